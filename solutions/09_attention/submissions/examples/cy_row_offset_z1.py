# The widely copied row offset off_z + off_h * N, in the exercise, the copy kernel and attention: passes every
# Z = 1 test, fails as soon as Z > 1.
#%% offsets from-solution
#%%- replace
    return off_z * H * N + off_h * N
#%%- with
    return off_z + off_h * N
#%% copy_heads from-solution
#%%- replace
    y_base = Y + (off_z * H * N + off_h * N) * HEAD_DIM
#%%- with
    y_base = Y + (off_z + off_h * N) * HEAD_DIM
#%% attention from-solution
#%%- replace
    q_base = Q + off_z * stride_qz + off_h * stride_qh
    k_base = K + off_z * stride_kz + off_h * stride_kh
    v_base = V + off_z * stride_vz + off_h * stride_vh
    o_base = O + off_z * stride_oz + off_h * stride_oh
#%%- with
    row = off_z + off_h * N   # first row of this head in the [Z*H*N, D] view
    q_base = Q + row * stride_qn
    k_base = K + row * stride_kn
    v_base = V + row * stride_vn
    o_base = O + row * stride_on
#%%- replace
    out = torch.empty_like(q)
#%%- with
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
