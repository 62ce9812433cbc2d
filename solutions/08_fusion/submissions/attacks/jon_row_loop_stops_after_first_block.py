# Caps BLOCK_N at 32768 values and loops over wider rows block by block, but bounds the loop by the number of
# blocks where the number of columns belongs: the loop never passes its first block. Right on every row that fits in
# one block; on wider ones the sum of squares misses the rest of the row, and h and y are never written past the
# first block. It loses the kernel's tests of such rows here on the CPU (65535 float32 values, 40000 float16 ones;
# and the test at GPU sizes, not graded here, on a GPU); the traffic and roofline answers are the solution's.
#%% traffic from-solution
#%% roofline from-solution
#%% fused from-solution
#%%- replace
    offsets = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    # STREAM: x and residual are read once, h and y not read again here: ask the caches not to keep them
    x = tl.load(x_ptr + offsets, mask=inside, other=0.0, eviction_policy="evict_first" if STREAM else "").to(tl.float32)
    r = tl.load(r_ptr + offsets, mask=inside, other=0.0, eviction_policy="evict_first" if STREAM else "").to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    h = x + r                                                     # the new residual stream: stored, then normalised
    tl.store(h_ptr + offsets, h.to(h_ptr.dtype.element_ty), mask=inside, cache_modifier=".cs" if STREAM else "")
    inv_rms = tl.math.rsqrt(tl.sum(h * h, axis=1) / n_cols + eps)
    tl.store(y_ptr + offsets, (h * inv_rms[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), mask=inside,
             cache_modifier=".cs" if STREAM else "")
#%%- with
    row_starts = rows.to(tl.int64)[:, None] * n_cols
    n_blocks = tl.cdiv(n_cols, BLOCK_N)
    sum_sq = tl.zeros([ROWS], dtype=tl.float32)
    for start in tl.range(0, n_blocks, BLOCK_N):   # the mistake: up to the number of blocks, not of columns
        here = (rows < n_rows)[:, None] & (start + cols < n_cols)[None, :]
        x = tl.load(x_ptr + row_starts + start + cols[None, :], mask=here, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row_starts + start + cols[None, :], mask=here, other=0.0).to(tl.float32)
        h = x + r
        tl.store(h_ptr + row_starts + start + cols[None, :], h.to(h_ptr.dtype.element_ty), mask=here)
        sum_sq += tl.sum(h * h, axis=1)
    inv_rms = tl.math.rsqrt(sum_sq / n_cols + eps)
    for start in tl.range(0, n_blocks, BLOCK_N):
        here = (rows < n_rows)[:, None] & (start + cols < n_cols)[None, :]
        x = tl.load(x_ptr + row_starts + start + cols[None, :], mask=here, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row_starts + start + cols[None, :], mask=here, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=start + cols < n_cols, other=0.0).to(tl.float32)
        tl.store(y_ptr + row_starts + start + cols[None, :],
                 ((x + r) * inv_rms[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), mask=here)
#%%- replace
    block_n = triton.next_power_of_2(n_cols)
#%%- with
    block_n = min(triton.next_power_of_2(n_cols), 32768)   # at most 32768 values a block; wider rows loop
