"""A second round of kernels in styles the project had not seen (issue 28's probe): written as a
new user would write them for one GPU, with no knowledge of communication, then fused with every
schedule that could apply to one of their tensors (``tests/test_probe_unseen2.py`` says which,
and what each must give: emulated clean against the unfused kernel, or refused with a message
that names the op and what to do).

Each kernel's docstring says what about it is new to the compiler.
"""

from __future__ import annotations

import triton
import triton.language as tl

import syncopate.language as sl


# ------------------------------------------------------------------------------ GEMMs

@triton.jit
def gemm_bias_gelu_2d(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                      stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """GEMM on a 2-D grid ``(pid_m, pid_n)`` with a bias + exact (erf) GELU epilogue: the
    gathered tensor may be A (along M or K), B (along K or N), or the bias."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        offs_k = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)
    x = acc + bias[None, :]
    y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, y,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def batched_gemm_3d(a_ptr, b_ptr, c_ptr, M, N, K,
                    stride_ab, stride_am, stride_bb, stride_bk, stride_cb, stride_cm,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Batched GEMM on a 3-D grid ``(pid_m, pid_n, batch)``: A is ``[B, M, K]`` (gathered along
    the batch or along M), C is ``[B, M, N]``."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    bat = tl.program_id(2)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_base = a_ptr + bat * stride_ab
    b_base = b_ptr + bat * stride_bb
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_base + offs_m[:, None] * stride_am + (k0 + offs_k)[None, :],
                    mask=(offs_m[:, None] < M) & ((k0 + offs_k)[None, :] < K), other=0.0)
        b = tl.load(b_base + (k0 + offs_k)[:, None] * stride_bk + offs_n[None, :],
                    mask=((k0 + offs_k)[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + bat * stride_cb + offs_m[:, None] * stride_cm + offs_n[None, :], acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def splitk_atomic_workspace(a_ptr, b_ptr, c_ptr, ws_ptr, cnt_ptr, M, N, K,
                            stride_am, stride_bk, stride_cm,
                            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                            SPLIT_K: tl.constexpr):
    """Split-K: program ``(tile, s)`` adds its partial of a tile into a float workspace with
    ``tl.atomic_add``, bumps the tile's counter, and the last of the ``SPLIT_K`` programs of a
    tile stores the workspace tile into C: atomics on local memory, and a store into C guarded
    by an atomic's result."""
    tile = tl.program_id(0)
    s = tl.program_id(1)
    n_n = tl.cdiv(N, BN)
    pm = tile // n_n
    pn = tile % n_n
    offs_m = pm * BM + tl.arange(0, BM)
    offs_n = pn * BN + tl.arange(0, BN)
    k_per = tl.cdiv(K, SPLIT_K)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(s * k_per, (s + 1) * k_per, BK):
        offs_k = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :],
                    mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :],
                    mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    ws = ws_ptr + offs_m[:, None] * N + offs_n[None, :]
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.atomic_add(ws, acc, mask=mask)
    done = tl.atomic_add(cnt_ptr + tile, 1)
    if done == SPLIT_K - 1:
        tot = tl.load(ws, mask=mask, other=0.0, volatile=True)
        tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], tot, mask=mask)


@triton.jit
def persistent_bp_gemm(a_ptr, b_ptr, c_ptr, M, N, K,
                       stride_am, stride_bk, stride_cm,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                       GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr):
    """Persistent GEMM over block pointers with a grouped tile order (a reduce-scatter's
    producer): the tile loop strides by ``NUM_SMS``, the block pointers are rebuilt per tile."""
    start = tl.program_id(0)
    n_m = tl.cdiv(M, BM)
    n_n = tl.cdiv(N, BN)
    n_tiles = n_m * n_n
    in_group = GROUP_M * n_n
    for t in range(start, n_tiles, NUM_SMS):
        g = t // in_group
        first_m = g * GROUP_M
        size_m = min(n_m - first_m, GROUP_M)
        pm = first_m + (t % in_group) % size_m
        pn = (t % in_group) // size_m
        a_bp = tl.make_block_ptr(a_ptr, (M, K), (stride_am, 1), (pm * BM, 0), (BM, BK), (1, 0))
        b_bp = tl.make_block_ptr(b_ptr, (K, N), (stride_bk, 1), (0, pn * BN), (BK, BN), (1, 0))
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for _ in range(0, tl.cdiv(K, BK)):
            acc = tl.dot(tl.load(a_bp, boundary_check=(0, 1)),
                         tl.load(b_bp, boundary_check=(0, 1)), acc)
            a_bp = tl.advance(a_bp, (0, BK))
            b_bp = tl.advance(b_bp, (BK, 0))
        c_bp = tl.make_block_ptr(c_ptr, (M, N), (stride_cm, 1), (pm * BM, pn * BN), (BM, BN),
                                 (1, 0))
        tl.store(c_bp, acc, boundary_check=(0, 1))


@triton.jit
def stream_k_counter_gemm(a_ptr, b_ptr, c_ptr, next_ptr, M, N, K,
                          stride_am, stride_bk, stride_cm,
                          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Dynamic tile scheduling: each program takes its next tile from an atomic counter in a
    local buffer (``tl.atomic_add(next_ptr, 1)``) until none is left -- the tile coordinate is
    an atomic's result, so no table can know it."""
    n_n = tl.cdiv(N, BN)
    n_tiles = tl.cdiv(M, BM) * n_n
    t = tl.atomic_add(next_ptr, 1)
    while t < n_tiles:
        pm = t // n_n
        pn = t % n_n
        offs_m = pm * BM + tl.arange(0, BM)
        offs_n = pn * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            offs_k = k0 + tl.arange(0, BK)
            a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :],
                        mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
            b = tl.load(b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :],
                        mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
        tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc,
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
        t = tl.atomic_add(next_ptr, 1)


@triton.jit
def gemm_bt_trans(a_ptr, bt_ptr, c_ptr, M, N, K, stride_am, stride_btn, stride_cm,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """``C = A @ Bt^T`` with ``Bt`` stored ``[N, K]`` (a linear layer's weight), loaded as rows
    of Bt and transposed in registers (``tl.trans``); the K loop is a ``tl.range`` with
    ``num_stages`` and ``loop_unroll_factor``."""
    pid = tl.program_id(0)
    n_n = tl.cdiv(N, BN)
    pm = pid // n_n
    pn = pid % n_n
    offs_m = pm * BM + tl.arange(0, BM)
    offs_n = pn * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in tl.range(0, K, BK, num_stages=3, loop_unroll_factor=2):
        offs_k = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :],
                    mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
        bt = tl.load(bt_ptr + offs_n[:, None] * stride_btn + offs_k[None, :],
                     mask=(offs_n[:, None] < N) & (offs_k[None, :] < K), other=0.0)
        acc = tl.dot(a, tl.trans(bt), acc)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def gemm_init_then_store(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                         BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Zero-fills its C tile, then stores the product over it: every element of C is stored
    twice by the same program (a produced tensor's chunk must not leave after the zeros)."""
    pid = tl.program_id(0)
    n_n = tl.cdiv(N, BN)
    pm = pid // n_n
    pn = pid % n_n
    offs_m = pm * BM + tl.arange(0, BM)
    offs_n = pn * BN + tl.arange(0, BN)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :]
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, tl.zeros((BM, BN), dtype=tl.float32), mask=mask)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        offs_k = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :],
                    mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :],
                    mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptrs, acc, mask=mask)


@triton.jit
def relu_sparse_store(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """GEMM + ReLU that stores only the positive elements (``mask=acc > 0``) into a C the
    caller zeroed: which elements are stored depends on the data."""
    pid = tl.program_id(0)
    n_n = tl.cdiv(N, BN)
    pm = pid // n_n
    pn = pid % n_n
    offs_m = pm * BM + tl.arange(0, BM)
    offs_n = pn * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        offs_k = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :],
                    mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :],
                    mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    inside = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc, mask=inside & (acc > 0))


# ------------------------------------------------------------------------------ row kernels

@triton.jit
def layernorm_rowloop(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, stride, eps,
                      BLOCK: tl.constexpr):
    """LayerNorm, one row per program, three loops over the row in ``BLOCK`` steps (mean,
    variance, normalise): the gathered row is read three times."""
    row = tl.program_id(0)
    x_row = x_ptr + row * stride
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        acc += tl.load(x_row + cols, mask=cols < n_cols, other=0.0)
    mean = tl.sum(acc, axis=0) / n_cols
    var = tl.zeros((BLOCK,), dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0)
        d = tl.where(cols < n_cols, x - mean, 0.0)
        var += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(var, axis=0) / n_cols + eps)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        m = cols < n_cols
        x = tl.load(x_row + cols, mask=m, other=0.0)
        w = tl.load(w_ptr + cols, mask=m, other=1.0)
        b = tl.load(b_ptr + cols, mask=m, other=0.0)
        tl.store(y_ptr + row * stride + cols, (x - mean) * rstd * w + b, mask=m)


@triton.jit
def softmax_online(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    """Softmax in two passes over the row: an online max/sum (rescaling the running sum when
    the max grows), then the normalised write."""
    row = tl.program_id(0)
    m_i = tl.full((BLOCK,), float("-inf"), tl.float32)
    d_i = tl.zeros((BLOCK,), dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=float("-inf"))
        m_new = tl.maximum(m_i, x)
        alpha = tl.where(m_new == float("-inf"), 0.0, tl.exp(m_i - m_new))
        d_i = d_i * alpha + tl.where(x == float("-inf"), 0.0, tl.exp(x - m_new))
        m_i = m_new
    m = tl.max(m_i, axis=0)
    d = tl.sum(d_i * tl.where(m_i == float("-inf"), 0.0, tl.exp(m_i - m)), axis=0)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=float("-inf"))
        tl.store(y_ptr + row * stride + cols, tl.exp(x - m) / d, mask=cols < n_cols)


@triton.jit
def softmax_three_pass(x_ptr, y_ptr, n_rows, n_cols, stride, BLOCK: tl.constexpr):
    """Softmax without the online trick: max, then sum, then write, over a grid-stride loop of
    rows (``tl.num_programs``)."""
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        mx = tl.full((BLOCK,), float("-inf"), tl.float32)
        for c0 in range(0, n_cols, BLOCK):
            cols = c0 + tl.arange(0, BLOCK)
            mx = tl.maximum(mx, tl.load(x_ptr + row * stride + cols, mask=cols < n_cols,
                                        other=float("-inf")))
        m = tl.max(mx, axis=0)
        s = tl.zeros((BLOCK,), dtype=tl.float32)
        for c0 in range(0, n_cols, BLOCK):
            cols = c0 + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=float("-inf"))
            s += tl.exp(x - m)
        d = tl.sum(s, axis=0)
        for c0 in range(0, n_cols, BLOCK):
            cols = c0 + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=float("-inf"))
            tl.store(y_ptr + row * stride + cols, tl.exp(x - m) / d, mask=cols < n_cols)


@triton.jit
def row_argmax_topk(x_ptr, idx_ptr, top_ptr, n_cols, stride, BLOCK: tl.constexpr,
                    K: tl.constexpr):
    """Per row of a gathered tensor: the argmax (``tl.argmax``) and the ``K`` largest values
    (``tl.topk``, a sort network) of the whole row."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=float("-inf"))
    tl.store(idx_ptr + row, tl.argmax(x, axis=0))
    top = tl.topk(x, K)
    tl.store(top_ptr + row * K + tl.arange(0, K), top)


@triton.jit
def cumsum_rows(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """Inclusive prefix sum along each row (``tl.cumsum``, a scan) of a ``[BM, BLOCK]`` tile."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], tl.cumsum(x, axis=1), mask=m)


@triton.jit
def transposed_read(x_ptr, y_ptr, M, N, stride_x0, stride_x1, stride_y,
                    BM: tl.constexpr, BN: tl.constexpr):
    """``y = x.T`` with x read through the strides of its transpose (``x.T.stride()``): the
    kernel's first index walks x's columns (``stride_x0 = 1``), its second x's rows."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    m = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    x = tl.load(x_ptr + offs_m[:, None] * stride_x0 + offs_n[None, :] * stride_x1, mask=m,
                other=0.0)
    tl.store(y_ptr + offs_m[:, None] * stride_y + offs_n[None, :], x * 2.0, mask=m)


@triton.jit
def transposed_tile(x_ptr, y_ptr, M, N, stride_x, stride_y,
                    BM: tl.constexpr, BN: tl.constexpr):
    """``y = x.T`` written the other way: tiles of x loaded row-major and ``tl.trans``-posed
    before the store, on a 2-D grid whose axis 0 walks x's columns."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    x = tl.load(x_ptr + offs_m[:, None] * stride_x + offs_n[None, :],
                mask=(offs_m[:, None] < M) & (offs_n[None, :] < N), other=0.0)
    tl.store(y_ptr + offs_n[:, None] * stride_y + offs_m[None, :], tl.trans(x),
             mask=(offs_n[:, None] < N) & (offs_m[None, :] < M))


@triton.jit
def dequant_rows(x_ptr, s_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    """Dequantise int8 (or fp8) rows with a per-row fp32 scale: the gathered tensor may be the
    8-bit one or the scales."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    q = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols)
    s = tl.load(s_ptr + row)
    tl.store(y_ptr + row * stride + cols, q.to(tl.float32) * s, mask=cols < n_cols)


@triton.jit
def where_pointer(a_ptr, b_ptr, y_ptr, n_cols, split, stride, BLOCK: tl.constexpr):
    """Each lane reads from one of two tensors, chosen by ``tl.where`` on the *pointers*:
    columns before ``split`` from A, the rest from B."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    p = tl.where(cols < split, a_ptr + row * stride + cols, b_ptr + row * stride + cols)
    x = tl.load(p, mask=cols < n_cols, other=0.0)
    tl.store(y_ptr + row * stride + cols, x + 1.0, mask=cols < n_cols)


@triton.jit
def hinted_int64_rows(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """Offsets computed in int64 with ``tl.multiple_of`` / ``tl.max_contiguous`` hints on them
    and ``tl.assume`` facts about the arguments."""
    tl.assume(stride > 0)
    tl.assume(n_cols > 0)
    pid = tl.program_id(0).to(tl.int64)
    tl.assume(pid >= 0)
    rows = pid * BM + tl.arange(0, BM).to(tl.int64)
    cols = tl.max_contiguous(tl.multiple_of(tl.arange(0, BLOCK), BLOCK), BLOCK)
    base = tl.multiple_of(rows * stride, 16)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + base[:, None] + cols[None, :], mask=m, other=0.0)
    tl.store(y_ptr + base[:, None] + cols[None, :], x - 1.0, mask=m)


@triton.jit
def ragged_rows(x_ptr, len_ptr, y_ptr, stride, BLOCK: tl.constexpr):
    """Rows of different lengths: each program's loop bound is a loaded value
    (``n = tl.load(len_ptr + row)``)."""
    row = tl.program_id(0)
    n = tl.load(len_ptr + row)
    for c0 in range(0, n, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=0.0)
        tl.store(y_ptr + row * stride + cols, x * 0.5, mask=cols < n)


@triton.jit
def ragged_rows_bounded(x_ptr, len_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    """:func:`ragged_rows` with the loaded length clamped by the row length argument
    (``mask = (cols < n) & (cols < n_cols)``)."""
    row = tl.program_id(0)
    n = tl.load(len_ptr + row)
    for c0 in range(0, n, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        m = (cols < n) & (cols < n_cols)
        x = tl.load(x_ptr + row * stride + cols, mask=m, other=0.0)
        tl.store(y_ptr + row * stride + cols, x * 0.5, mask=m)


@triton.jit
def early_return_in_loop(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr,
                      STEPS: tl.constexpr):
    """A grid-stride loop over row tiles that returns from inside the loop once it passes the
    last row."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    for i in range(0, STEPS):
        r0 = (pid + i * nprog) * BM
        if r0 >= M:
            return
        rows = r0 + tl.arange(0, BM)
        m = (rows[:, None] < M) & (cols[None, :] < n_cols)
        x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
        tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x + 3.0, mask=m)


@triton.jit
def mask_styles(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr,
                STYLE: tl.constexpr):
    """The same row-tile copy with its mask written in different ways (``STYLE``):
    0 ``~(cols >= n)``, 1 ``n > cols`` (operands swapped), 2 ``cols <= n - 1``,
    3 ``(rows < M) & (cols < n) & (cols >= 0)``, 4 ``cols != n`` (bounds nothing),
    5 ``tl.where(cols < n, True, False)``."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    if STYLE == 0:
        cm = ~(cols >= n_cols)
    elif STYLE == 1:
        cm = n_cols > cols
    elif STYLE == 2:
        cm = cols <= n_cols - 1
    elif STYLE == 3:
        cm = (cols < n_cols) & (cols >= 0)
    elif STYLE == 4:
        cm = cols != n_cols
    else:
        cm = tl.where(cols < n_cols, True, False)
    m = (rows[:, None] < M) & cm[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x * 4.0, mask=m)


@triton.jit
def static_range_rows(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr, PARTS: tl.constexpr):
    """A row read in ``PARTS`` pieces by a ``tl.static_range`` loop (unrolled by the frontend),
    the pieces summed and written back scaled by the sum."""
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in tl.static_range(PARTS):
        cols = i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tot = tl.sum(acc, axis=0)
    for i in tl.static_range(PARTS):
        cols = i * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        tl.store(y_ptr + row * stride + cols, x * tot, mask=cols < n_cols)


@triton.jit
def bitcast_read(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    """Reads an fp32 tensor through an int32 pointer (``x_ptr.to(tl.pointer_type(tl.int32))``)
    and clears the sign bit: ``|x|`` by bit arithmetic."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    xi = x_ptr.to(tl.pointer_type(tl.int32))
    bits = tl.load(xi + row * stride + cols, mask=cols < n_cols, other=0)
    tl.store(y_ptr + row * stride + cols, (bits & 0x7FFFFFFF).to(tl.float32, bitcast=True),
             mask=cols < n_cols)


@triton.jit
def bitcast_read_i16(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    """Reads a bf16 tensor through an int16 pointer and rebuilds the fp32 value from the bits
    (``bits << 16``)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    xi = x_ptr.to(tl.pointer_type(tl.int16))
    bits = tl.load(xi + row * stride + cols, mask=cols < n_cols, other=0)
    f = (bits.to(tl.int32) << 16).to(tl.float32, bitcast=True)
    tl.store(y_ptr + row * stride + cols, f, mask=cols < n_cols)


@triton.jit
def histogram_local_atomics(x_ptr, hist_ptr, M, n_cols, stride, BM: tl.constexpr,
                            BLOCK: tl.constexpr, BINS: tl.constexpr):
    """Reads a gathered tile and counts its values into ``BINS`` bins with ``tl.atomic_add``
    into a local int32 histogram (an atomic whose address comes from the data)."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    b = tl.minimum(tl.maximum((x * 2.0 + BINS // 2).to(tl.int32), 0), BINS - 1)
    tl.atomic_add(hist_ptr + b, 1, mask=m)


@triton.jit
def embedding_bag(w_ptr, idx_ptr, off_ptr, out_ptr, dim, stride_w, BLOCK: tl.constexpr):
    """Sum of the table rows a bag names: bag ``b`` is ``idx[off[b]:off[b + 1]]`` -- the loop
    bounds and the rows read are loaded values."""
    bag = tl.program_id(0)
    start = tl.load(off_ptr + bag)
    end = tl.load(off_ptr + bag + 1)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(start, end):
        r = tl.load(idx_ptr + i)
        acc += tl.load(w_ptr + r * stride_w + cols, mask=cols < dim, other=0.0)
    tl.store(out_ptr + bag * dim + cols, acc, mask=cols < dim)


@triton.jit
def embedding_bag_hinted(w_ptr, idx_ptr, off_ptr, out_ptr, dim, stride_w, BLOCK: tl.constexpr):
    """:func:`embedding_bag` with each row's box stated by a hint over the loaded index."""
    bag = tl.program_id(0)
    start = tl.load(off_ptr + bag)
    end = tl.load(off_ptr + bag + 1)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(start, end):
        r = tl.load(idx_ptr + i)
        sl.hint_region2(w_ptr, r, r + 1, 0, BLOCK)
        acc += tl.load(w_ptr + r * stride_w + cols, mask=cols < dim, other=0.0)
    tl.store(out_ptr + bag * dim + cols, acc, mask=cols < dim)


@triton.jit
def pointer_bumped_rows(x_ptr, y_ptr, M, n_cols, stride, BLOCK: tl.constexpr):
    """Advances the scalar base pointers to the row first (``x_ptr += row * stride``), then
    walks the row with a loop-carried pointer bumped by ``BLOCK``."""
    row = tl.program_id(0)
    x_ptr += row * stride
    y_ptr += row * stride
    xp = x_ptr + tl.arange(0, BLOCK)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(xp, mask=cols < n_cols, other=0.0, cache_modifier=".cg",
                    eviction_policy="evict_first")
        tl.store(y_ptr + cols, x * x, mask=cols < n_cols)
        xp += BLOCK


@triton.jit
def swapped_grid_cols(x_ptr, y_ptr, M, n_cols, stride, BLOCK: tl.constexpr):
    """A 2-D grid whose axis 1 is the row and axis 0 the column block (the transpose of the
    usual launch)."""
    pid_c = tl.program_id(0)
    row = tl.program_id(1)
    cols = pid_c * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(y_ptr + row * stride + cols, x + row.to(tl.float32), mask=cols < n_cols)


@triton.jit
def device_tma_rows(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    """Device-side TMA descriptors (``tl.make_tensor_descriptor``) over x and y."""
    pid = tl.program_id(0)
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    yd = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    x = xd.load([pid * BM, 0])
    yd.store([pid * BM, 0], x * 2.0)


@triton.jit
def early_return_tree(x_ptr, y_ptr, M, n_cols, stride, flag, BM: tl.constexpr,
                      BLOCK: tl.constexpr):
    """Early returns on two levels (a tree of ``cf.cond_br``): past the last row, and, for a
    run-time ``flag``, after a first half of the work."""
    pid = tl.program_id(0)
    if pid * BM >= M:
        return
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    if flag == 0:
        tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x, mask=m)
        return
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x * x, mask=m)


@triton.jit
def bitcast_read_hinted(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    """:func:`bitcast_read` with the box stated by a hint, as the refusal advises."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    xi = x_ptr.to(tl.pointer_type(tl.int32))
    sl.hint_region2(x_ptr, row, row + 1, 0, BLOCK)
    bits = tl.load(xi + row * stride + cols, mask=cols < n_cols, other=0)
    tl.store(y_ptr + row * stride + cols, (bits & 0x7FFFFFFF).to(tl.float32, bitcast=True),
             mask=cols < n_cols)


@triton.jit
def where_pointer_hinted(a_ptr, b_ptr, y_ptr, n_cols, split, stride, BLOCK: tl.constexpr):
    """:func:`where_pointer` with the box of A stated by a hint, as the refusal advises."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    p = tl.where(cols < split, a_ptr + row * stride + cols, b_ptr + row * stride + cols)
    sl.hint_region2(a_ptr, row, row + 1, 0, BLOCK)
    x = tl.load(p, mask=cols < n_cols, other=0.0)
    tl.store(y_ptr + row * stride + cols, x + 1.0, mask=cols < n_cols)


@triton.jit
def running_output_rows(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr, STEPS: tl.constexpr):
    """Stores its running result into the same output row on every iteration of a loop (the
    last store wins): every element of y is stored ``STEPS`` times."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for _ in range(0, STEPS):
        acc = acc * 0.5 + x
        tl.store(y_ptr + row * stride + cols, acc, mask=cols < n_cols)


@triton.jit
def halo_rows(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """Each program writes its ``BM`` rows plus the first row of the next tile (a halo that two
    programs write with the same value)."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, 2 * BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (rows[:, None] <= pid * BM + BM) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x * 2.0, mask=m)


@triton.jit
def scalar_norm_rows(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    """Divides each row by the tensor's first element (a scalar load of ``x[0, 0]`` by every
    program) and reverses the columns (``cols = BLOCK - 1 - arange``)."""
    row = tl.program_id(0)
    s = tl.load(x_ptr)
    cols = BLOCK - 1 - tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(y_ptr + row * stride + tl.arange(0, BLOCK), x / s,
             mask=tl.arange(0, BLOCK) < n_cols)


@triton.jit
def complex_rows(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    """Interleaved complex rows ``[re, im, re, im, ...]``: loaded as ``[BLOCK, 2]``, split with
    ``tl.split`` and the magnitude squared written (``n_cols`` complex values a row)."""
    row = tl.program_id(0)
    k = tl.arange(0, BLOCK)
    offs = 2 * k[:, None] + tl.arange(0, 2)[None, :]
    z = tl.load(x_ptr + row * stride + offs, mask=k[:, None] < n_cols, other=0.0)
    re, im = tl.split(z)
    tl.store(y_ptr + row * n_cols + k, re * re + im * im, mask=k < n_cols)
