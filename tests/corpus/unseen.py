"""Kernels written in styles other than the project's own, to try the compiler as a new user
would: block pointers with derived tile coordinates, 2-D grids, gathers through loaded indices,
wide rows, persistent loops with another swizzle.  Each is a plain single-GPU ``@triton.jit``
kernel with no knowledge of communication; :data:`CASES` says how to compile it for sm_90 on a
CPU and what fusing it with a schedule must give (compiled soundly, or refused).

These are the five classes of silent miscompiles of issue 8 (and their neighbours); the tests
in ``tests/test_soundness.py`` compile every case and, where the emulator runs, execute it.
"""

from __future__ import annotations

import triton
import triton.language as tl

import syncopate.language as sl


@triton.jit
def bp_gemm_derived(a_ptr, b_ptr, c_ptr, M, N, K,
                    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Block-pointer GEMM whose column coordinate is derived from the row coordinate
    (``j = pid - i * n``): remapping ``i`` alone would move ``j`` off the grid."""
    pid = tl.program_id(0)
    n_tiles_n = tl.cdiv(N, BN)
    i = pid // n_tiles_n
    j = pid - i * n_tiles_n
    a_bp = tl.make_block_ptr(a_ptr, (M, K), (stride_am, stride_ak), (i * BM, 0), (BM, BK), (1, 0))
    b_bp = tl.make_block_ptr(b_ptr, (K, N), (stride_bk, stride_bn), (0, j * BN), (BK, BN), (1, 0))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_bp, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_bp, boundary_check=(0, 1), padding_option="zero")
        acc = tl.dot(a, b, acc)
        a_bp = tl.advance(a_bp, (0, BK))
        b_bp = tl.advance(b_bp, (BK, 0))
    c_bp = tl.make_block_ptr(c_ptr, (M, N), (stride_cm, stride_cn), (i * BM, j * BN), (BM, BN),
                             (1, 0))
    tl.store(c_bp, acc.to(c_ptr.dtype.element_ty), boundary_check=(0, 1))


@triton.jit
def xt_gemm_2d(x_ptr, y_ptr, c_ptr, M, N, K,
               stride_xk, stride_xm, stride_yk, stride_yn, stride_cm, stride_cn,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """``C = X^T @ Y`` on a 2-D grid ``(pid_m, pid_n)``; X is ``[K, M]``, so an all-gather of X
    along its rows is consumed inside the K loop (a weight-gradient GEMM)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        offs_k = k * BK + tl.arange(0, BK)
        x = tl.load(x_ptr + offs_k[None, :] * stride_xk + offs_m[:, None] * stride_xm,
                    mask=(offs_k[None, :] < K) & (offs_m[:, None] < M), other=0.0)
        y = tl.load(y_ptr + offs_k[:, None] * stride_yk + offs_n[None, :] * stride_yn,
                    mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(x, y, acc)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
             acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def row_gather(inp_ptr, idx_ptr, out_ptr, n_cols, stride_in, stride_out,
               BLOCK: tl.constexpr):
    """``out[r, :] = inp[idx[r], :]``: the row read is a loaded value (an embedding lookup)."""
    row = tl.program_id(0)
    src = tl.load(idx_ptr + row)
    cols = tl.arange(0, BLOCK)
    x = tl.load(inp_ptr + src * stride_in + cols, mask=cols < n_cols)
    tl.store(out_ptr + row * stride_out + cols, x, mask=cols < n_cols)


@triton.jit
def row_gather_hinted(inp_ptr, idx_ptr, out_ptr, n_cols, stride_in, stride_out,
                      BLOCK: tl.constexpr):
    """:func:`row_gather` with the box stated by a hint whose bounds depend on the loaded index."""
    row = tl.program_id(0)
    src = tl.load(idx_ptr + row)
    cols = tl.arange(0, BLOCK)
    sl.hint_region2(inp_ptr, src, src + 1, 0, BLOCK)
    x = tl.load(inp_ptr + src * stride_in + cols, mask=cols < n_cols)
    tl.store(out_ptr + row * stride_out + cols, x, mask=cols < n_cols)


@triton.jit
def wide_rows(inp_ptr, out_ptr, BLOCK: tl.constexpr, ROW: tl.constexpr):
    """Copies ``BLOCK`` elements per row of a tensor whose rows it believes are ``ROW`` long:
    fused with a schedule whose rows are shorter, it reads past the end of each row."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(inp_ptr + row * ROW + cols)
    tl.store(out_ptr + row * ROW + cols, x)


@triton.jit
def masked_rows(inp_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    """A row copy masked by a runtime column count: the mask bounds what it reads, so the
    compiler can require ``n_cols`` to fit the schedule's rows at launch."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(inp_ptr + row * stride + cols, mask=cols < n_cols)
    tl.store(out_ptr + row * stride + cols, x, mask=cols < n_cols)


@triton.jit
def scale_rows_inplace(x_ptr, scale, n_cols, stride, BLOCK: tl.constexpr):
    """Reads a row and writes it back scaled: bound as a *consumed* operand of an all-gather,
    it writes the tensor the comm programs are copying."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols)
    tl.store(x_ptr + row * stride + cols, x * scale, mask=cols < n_cols)


@triton.jit
def persistent_rowmajor_gemm(a_ptr, b_ptr, c_ptr, M, N, K,
                             stride_am, stride_bk, stride_cm,
                             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                             NUM_PROGS: tl.constexpr):
    """Persistent GEMM with a plain row-major tile order (no grouping) and pointer loads."""
    start = tl.program_id(0)
    n_m = tl.cdiv(M, BM)
    n_n = tl.cdiv(N, BN)
    for tile in range(start, n_m * n_n, NUM_PROGS):
        pm = tile // n_n
        pn = tile % n_n
        offs_m = pm * BM + tl.arange(0, BM)
        offs_n = pn * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            offs_k = k * BK + tl.arange(0, BK)
            a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :],
                        mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
            b = tl.load(b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :],
                        mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
        tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :],
                 acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def col_tiles(inp_ptr, out_ptr, ROW: tl.constexpr, BLOCK: tl.constexpr):
    """Copies column tiles ``[pid_n * BLOCK, pid_n * BLOCK + BLOCK)`` of each row with no mask:
    nothing bounds ``pid_n``, so the compiler cannot prove the tile stays inside the row."""
    row = tl.program_id(0)
    pid_n = tl.program_id(1)
    cols = pid_n * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(inp_ptr + row * ROW + cols)
    tl.store(out_ptr + row * ROW + cols, x)


@triton.jit
def fill_rows(inp_ptr, out_ptr, value, n_cols, BLOCK: tl.constexpr):
    """Never touches ``inp_ptr``: binding it as the communicated operand is a mistake."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    tl.store(out_ptr + row * n_cols + cols, tl.full((BLOCK,), value, tl.float32).to(tl.bfloat16),
             mask=cols < n_cols)


# --------------------------------------------------------------------- session 15's styles

@triton.jit
def early_exit_rows(inp_ptr, out_ptr, M, n_cols, stride, BM: tl.constexpr,
                    BLOCK: tl.constexpr):
    """Guards its tile with an early ``return`` (a grid rounded up past the rows): Triton
    lowers it to a ``cf.cond_br`` to a returning block (``structurize-returns``)."""
    pid = tl.program_id(0)
    if pid * BM >= M:
        return
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(inp_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    tl.store(out_ptr + rows[:, None] * stride + cols[None, :], x + 2.0, mask=m)


@triton.jit
def stencil_rows(inp_ptr, out_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """``out[r] = in[r] + in[r + 1]``: each tile reads the first row of the next tile, which
    may lie in another chunk."""
    pid = tl.program_id(0)
    offs = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m0 = (offs[:, None] < M) & (cols[None, :] < n_cols)
    m1 = (offs[:, None] + 1 < M) & (cols[None, :] < n_cols)
    x0 = tl.load(inp_ptr + offs[:, None] * stride + cols[None, :], mask=m0, other=0.0)
    x1 = tl.load(inp_ptr + (offs[:, None] + 1) * stride + cols[None, :], mask=m1, other=0.0)
    tl.store(out_ptr + offs[:, None] * stride + cols[None, :], x0 + x1, mask=m0)


@triton.jit
def column_sums(inp_ptr, out_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """Every program reads every row (a reduction over the gathered dim): it waits for all."""
    pid = tl.program_id(0)
    cols = pid * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for r0 in range(0, M, BM):
        rows = r0 + tl.arange(0, BM)
        x = tl.load(inp_ptr + rows[:, None] * stride + cols[None, :],
                    mask=(rows[:, None] < M) & (cols[None, :] < n_cols), other=0.0)
        acc += tl.sum(x.to(tl.float32), axis=0)
    tl.store(out_ptr + cols, acc.to(tl.bfloat16), mask=cols < n_cols)


@triton.jit
def while_rows(inp_ptr, out_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """A grid-stride walk over row tiles written as a ``while`` loop (``scf.while``)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    r0 = pid * BM
    cols = tl.arange(0, BLOCK)
    while r0 < M:
        rows = r0 + tl.arange(0, BM)
        m = (rows[:, None] < M) & (cols[None, :] < n_cols)
        x = tl.load(inp_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
        tl.store(out_ptr + rows[:, None] * stride + cols[None, :], x * 3.0, mask=m)
        r0 += nprog * BM


@triton.jit
def int64_rows(inp_ptr, out_ptr, M, n_cols, stride, BLOCK: tl.constexpr):
    """One row per program, its offset computed in 64 bits (large-tensor style)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(inp_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row * stride + cols, x * x, mask=cols < n_cols)


@triton.jit
def reversed_rows(inp_ptr, out_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """Reads rows back to front (``M - 1 - offs``): an index computed from a size times the
    stride, which the analysis cannot attribute to a dim (refused: hint it)."""
    pid = tl.program_id(0)
    offs = pid * BM + tl.arange(0, BM)
    src = M - 1 - offs
    cols = tl.arange(0, BLOCK)
    x = tl.load(inp_ptr + src[:, None] * stride + cols[None, :],
                mask=(offs[:, None] < M) & (cols[None, :] < n_cols), other=0.0)
    tl.store(out_ptr + offs[:, None] * stride + cols[None, :], x * 2.0,
             mask=(offs[:, None] < M) & (cols[None, :] < n_cols))


@triton.jit
def interleaved_rows(inp_ptr, out_ptr, M, n_cols, stride, BM: tl.constexpr,
                     BLOCK: tl.constexpr):
    """Even and odd rows in alternate programs: a tile steps through the rows by 2 (refused: a
    strided tile's elements are not enumerated; hint its box)."""
    pid = tl.program_id(0)
    rows = (pid // 2) * (2 * BM) + 2 * tl.arange(0, BM) + pid % 2
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(inp_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    tl.store(out_ptr + rows[:, None] * stride + cols[None, :], x + 1.0, mask=m)
