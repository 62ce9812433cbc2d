# Caps BLOCK_N at 64 KB of a row, as Triton's layer-norm tutorial does (16384 float32 or 32768 float16 values), and
# loops over wider rows block by block, but assigns each block's sum of squares where it should add it: only the
# last block's squares reach rstd. Right on every row that fits in one block, wrong on rows of several: rmsnorm and
# rmsnorm_with_rstd lose their tests of such rows here on the CPU (rows of 17000 and 70001 float32 values, 40000
# float16 ones; and the test at GPU sizes, not graded here, on a GPU).
#%% rmsnorm from-solution
#%%- replace
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=ok, other=0.0,
                eviction_policy="evict_first" if STREAM else "").to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)   # in flight with x, not after the sum
    mean_sq = tl.sum(x * x, axis=1) / N            # float32: float16 squares overflow past 256
    rstd = 1.0 / tl.sqrt(mean_sq + eps)
    y = x * rstd[:, None] * w[None, :]
    tl.store(out_ptr + rows[:, None] * stride_out + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=ok,
             cache_modifier=".cs" if STREAM else "")
#%%- with
    sum_sq = tl.zeros([ROWS], dtype=tl.float32)
    for start in tl.range(0, N, BLOCK_N):           # a row wider than BLOCK_N: one block after another
        ok = (rows < M)[:, None] & (start + cols < N)[None, :]
        x = tl.load(x_ptr + rows[:, None] * stride_x + start + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        sum_sq = tl.sum(x * x, axis=1)             # the mistake: = where += belongs
    rstd = 1.0 / tl.sqrt(sum_sq / N + eps)
    for start in tl.range(0, N, BLOCK_N):
        ok = (rows < M)[:, None] & (start + cols < N)[None, :]
        x = tl.load(x_ptr + rows[:, None] * stride_x + start + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=start + cols < N, other=0.0).to(tl.float32)
        tl.store(out_ptr + rows[:, None] * stride_out + start + cols[None, :],
                 (x * rstd[:, None] * w[None, :]).to(out_ptr.dtype.element_ty), mask=ok)
#%%- replace
    block_n = 1 << max(0, (n - 1).bit_length())  # next power of two (cheaper than Triton's helper)
#%%- with
    block_n = min(1 << max(0, (n - 1).bit_length()), 65536 // element_size)  # at most 64 KB of a row a block
#%% rmsnorm_with_rstd from-solution
#%%- replace
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < M
    ok = row_ok[:, None] & (cols < N)[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=ok, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows[:, None] * stride_out + cols[None, :],
             (x * rstd[:, None] * w[None, :]).to(out_ptr.dtype.element_ty), mask=ok)
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)
#%%- with
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < M
    sum_sq = tl.zeros([ROWS], dtype=tl.float32)
    for start in tl.range(0, N, BLOCK_N):           # as in rmsnorm_kernel, and the same mistake
        ok = row_ok[:, None] & (start + cols < N)[None, :]
        x = tl.load(x_ptr + rows[:, None] * stride_x + start + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        sum_sq = tl.sum(x * x, axis=1)
    rstd = 1.0 / tl.sqrt(sum_sq / N + eps)
    for start in tl.range(0, N, BLOCK_N):
        ok = row_ok[:, None] & (start + cols < N)[None, :]
        x = tl.load(x_ptr + rows[:, None] * stride_x + start + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=start + cols < N, other=0.0).to(tl.float32)
        tl.store(out_ptr + rows[:, None] * stride_out + start + cols[None, :],
                 (x * rstd[:, None] * w[None, :]).to(out_ptr.dtype.element_ty), mask=ok)
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)
