# Forgets the head: the base pointers move by the batch only, so every head computes head 0's attention and
# writes it into head 0's slice. Right with H = 1; with H > 1 the later heads are never written.
#%% offsets from-solution

#%% copy_heads from-solution

#%% attention from-solution
#%%- replace
    q_base = Q + off_z * stride_qz + off_h * stride_qh
    k_base = K + off_z * stride_kz + off_h * stride_kh
    v_base = V + off_z * stride_vz + off_h * stride_vh
    o_base = O + off_z * stride_oz + off_h * stride_oh
#%%- with
    q_base = Q + off_z * stride_qz
    k_base = K + off_z * stride_kz
    v_base = V + off_z * stride_vz
    o_base = O + off_z * stride_oz
