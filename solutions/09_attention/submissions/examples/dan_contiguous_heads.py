# Assumes contiguous heads (base = off_hz * N * D): right for contiguous inputs, wrong for heads from a projection.
#%% offsets from-solution

#%% copy_heads from-solution
#%%- replace
    x_base = X + off_z * stride_xz + off_h * stride_xh
#%%- with
    x_base = X + off_hz.to(tl.int64) * N * HEAD_DIM   # assumes a contiguous x

#%% attention from-solution
#%%- replace
    q_base = Q + off_z * stride_qz + off_h * stride_qh
    k_base = K + off_z * stride_kz + off_h * stride_kh
    v_base = V + off_z * stride_vz + off_h * stride_vh
    o_base = O + off_z * stride_oz + off_h * stride_oh
#%%- with
    head = off_hz.to(tl.int64) * N * HEAD_DIM   # assumes contiguous [Z, H, N, D] tensors
    q_base = Q + head
    k_base = K + head
    v_base = V + head
    o_base = O + head
