"""A fourth round of kernels in styles the project had not seen (issue 28's probe, continued): tile
enumerations that are not grids (a triangle of tiles, a grid over part of the tiles, a persistent
loop whose stride is not the grid), a program id that reaches the data, 3-D and 4-D tensors with
permuted strides, broadcast (stride-0) loads, ``tl.where`` instead of masks, block pointers with
one boundary checked or column-major order, ``tl.advance`` and pointer increments carried by
loops, descriptors whose blocks straddle chunks, stores under program-id conditions, two
parameters over one output, gathers beside a produced store, partial epilogues, transposed
``tl.dot`` operands and split-K serialised by a semaphore.  Each is written for one GPU with no
knowledge of communication; ``tests/test_probe_unseen4.py`` fuses it with every schedule that
could move one of its tensors and says what each must give.

Each kernel's docstring says what about it is new to the compiler.
"""

from __future__ import annotations

import triton
import triton.language as tl


# ------------------------------------------------------------------- tile enumerations

@triton.jit
def tril_block_gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, T: tl.constexpr):
    """The lower block triangle of ``C = A @ B`` (causal scores: tile ``(i, j)`` with
    ``j <= i``), one program per tile of the triangle: program ``p`` finds its row ``i`` by
    counting the triangular numbers ``<= p`` and its column ``j`` by subtracting them, both
    from ``p`` (neither is computed from the other)."""
    pid = tl.program_id(0)
    i = 0
    base = 0
    for t in tl.static_range(1, T):
        ge = (pid >= t * (t + 1) // 2).to(tl.int32)
        i += ge
        base += ge * t
    j = pid - base
    offs_m = i * BM + tl.arange(0, BM)
    offs_n = j * BN + tl.arange(0, BN)
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


@triton.jit
def row_window(x_ptr, y_ptr, M, n_cols, stride, row0, BM: tl.constexpr, BLOCK: tl.constexpr):
    """Processes the row tiles ``row0 / BM + pid`` only: a user splits one big tensor into
    windows and launches the kernel once per window (chunked prefill), so one launch covers
    part of the tiles."""
    t = tl.program_id(0) + row0 // BM
    rows = t * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x * 3.0 - 1.0, mask=m)


@triton.jit
def persistent_fixed_sms(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr,
                         NUM_SMS: tl.constexpr):
    """A persistent loop over row tiles whose stride is the constexpr ``NUM_SMS``, launched on
    another number of programs than ``NUM_SMS`` (the user's grid is ``min(tiles, SMs)`` of
    another GPU)."""
    tiles = tl.cdiv(M, BM)
    cols = tl.arange(0, BLOCK)
    for t in range(tl.program_id(0), tiles, NUM_SMS):
        rows = t * BM + tl.arange(0, BM)
        m = (rows[:, None] < M) & (cols[None, :] < n_cols)
        x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
        tl.store(y_ptr + rows[:, None] * stride + cols[None, :], tl.exp(x), mask=m)


@triton.jit
def pid_in_data(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, HALF: tl.constexpr):
    """Two programs per row tile, one per half of the columns (``pid // 2``, ``pid % 2``), and
    each adds its program id to its values (a per-program bias, a debugging stamp): the program
    id reaches the data by another path than the tile coordinate."""
    pid = tl.program_id(0)
    t = pid // 2
    h = pid % 2
    rows = t * BM + tl.arange(0, BM)
    cols = h * HALF + tl.arange(0, HALF)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x + pid.to(tl.float32), mask=m)


@triton.jit
def swap_axes_flag(x_ptr, y_ptr, M, n_cols, stride, col_major, BM: tl.constexpr,
                   HALF: tl.constexpr):
    """The row tile comes from ``pid // 2`` or ``pid % n_row_tiles`` as a run-time flag says
    (an ``scf.if`` yields the tile coordinate), the half of the columns from the other."""
    pid = tl.program_id(0)
    n_t = tl.cdiv(M, BM)
    if col_major != 0:
        t = pid % n_t
        h = pid // n_t
    else:
        t = pid // 2
        h = pid % 2
    rows = t * BM + tl.arange(0, BM)
    cols = h * HALF + tl.arange(0, HALF)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x * x, mask=m)


@triton.jit
def carried_count_rows(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """A grid-stride loop over row tiles that carries an integer count of the positive values
    it has seen from one tile to the next and adds it to each tile's values (a per-program
    statistic threaded through the tile loop; integers, so no rounding order is at stake)."""
    cols = tl.arange(0, BLOCK)
    seen = tl.zeros((BM, BLOCK), dtype=tl.int32)
    for t in range(tl.program_id(0), tl.cdiv(M, BM), tl.num_programs(0)):
        rows = t * BM + tl.arange(0, BM)
        m = (rows[:, None] < M) & (cols[None, :] < n_cols)
        x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
        seen += (x > 0).to(tl.int32)
        tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x + seen.to(tl.float32),
                 mask=m)


@triton.jit
def bool_split_rows(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr,
                    HALF: tl.constexpr):
    """The row tile from a comparison turned into an integer: programs ``>= HALF`` take the
    second half of the tiles (``(pid >= HALF).to(tl.int32) * HALF + pid % HALF``)."""
    pid = tl.program_id(0)
    t = (pid >= HALF).to(tl.int32) * HALF + pid % HALF
    rows = t * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x * 1.5, mask=m)


@triton.jit
def causal_row_sums(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """Row tile ``i`` plus the sum of the row tiles ``j <= i`` (a causal prefix over tiles): a
    loop whose trip count is the program id, reading the gathered tensor at ``j`` inside the
    loop and at ``i`` outside."""
    i = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    r = tl.arange(0, BM)
    acc = tl.zeros((BM, BLOCK), dtype=tl.float32)
    for j in range(0, i + 1):
        rows = j * BM + r
        m = (rows[:, None] < M) & (cols[None, :] < n_cols)
        acc += tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    rows = i * BM + r
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x + acc, mask=m)


# ------------------------------------------------------------------------ layouts

@triton.jit
def perm3d_rows(x_ptr, y_ptr, B, M, N, sxb, sxm, syb, sym, BLOCK: tl.constexpr):
    """A 3-D ``[B, M, N]`` tensor walked with the grid's axes swapped (axis 0 is ``m``, axis 1
    the batch) and 64-bit offsets: ``x[b, m, :]`` to ``y[b, m, :]`` through strides passed in."""
    m = tl.program_id(0).to(tl.int64)
    b = tl.program_id(1).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + b * sxb + m * sxm + cols, mask=cols < N, other=0.0)
    tl.store(y_ptr + b * syb + m * sym + cols, x - 2.0, mask=cols < N)


@triton.jit
def perm3d_rows_masked(x_ptr, y_ptr, B, M, N, sxb, sxm, syb, sym, BLOCK: tl.constexpr):
    """:func:`perm3d_rows` with the row index masked (``m < M``), as a careful user writes it
    when the grid may be rounded up."""
    m = tl.program_id(0).to(tl.int64)
    b = tl.program_id(1).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    ok = (cols < N) & (m < M)
    x = tl.load(x_ptr + b * sxb + m * sxm + cols, mask=ok, other=0.0)
    tl.store(y_ptr + b * syb + m * sym + cols, x - 2.0, mask=ok)


@triton.jit
def bhsd_tiles(x_ptr, y_ptr, H, S, D, sb, sh, ss, BS: tl.constexpr, BD: tl.constexpr):
    """A 4-D ``[B, H, S, D]`` tensor (attention's layout): program ``(s_tile, b * H + h)``
    scales a ``BS x D`` tile."""
    st = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = st * BS + tl.arange(0, BS)
    cols = tl.arange(0, BD)
    m = (rows[:, None] < S) & (cols[None, :] < D)
    base = b * sb + h * sh
    x = tl.load(x_ptr + base + rows[:, None] * ss + cols[None, :], mask=m, other=0.0)
    tl.store(y_ptr + base + rows[:, None] * ss + cols[None, :], x * 0.125, mask=m)


@triton.jit
def bhsd_tiles_cx(x_ptr, y_ptr, S, D, sb, sh, ss, H: tl.constexpr, BS: tl.constexpr,
                  BD: tl.constexpr):
    """:func:`bhsd_tiles` with the head count a constexpr (``bh % H`` is then bounded)."""
    st = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = st * BS + tl.arange(0, BS)
    cols = tl.arange(0, BD)
    m = (rows[:, None] < S) & (cols[None, :] < D)
    base = b * sb + h * sh
    x = tl.load(x_ptr + base + rows[:, None] * ss + cols[None, :], mask=m, other=0.0)
    tl.store(y_ptr + base + rows[:, None] * ss + cols[None, :], x * 0.125, mask=m)


@triton.jit
def batch_axis2_rows(x_ptr, y_ptr, M, N, sxb, BM: tl.constexpr, BN: tl.constexpr):
    """A batched row kernel whose batch is grid axis 2 (axes 0 and 1: row and column tiles):
    the gathered dim may be the batch, whose coordinate is ``program_id(2)``."""
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    b = tl.program_id(2)
    rows = pm * BM + tl.arange(0, BM)
    cols = pn * BN + tl.arange(0, BN)
    m = (rows[:, None] < M) & (cols[None, :] < N)
    off = b * sxb + rows[:, None] * N + cols[None, :]
    x = tl.load(x_ptr + off, mask=m, other=0.0)
    tl.store(y_ptr + off, tl.sqrt(tl.abs(x)), mask=m)


@triton.jit
def broadcast_row_add(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """Adds row 0 of ``x`` to every row tile, loaded as a ``BM x BLOCK`` tile through a
    stride-0 row index (``rows * 0``): a broadcast load of the gathered tensor."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    r0 = tl.load(x_ptr + (rows * 0)[:, None] * stride + cols[None, :],
                 mask=cols[None, :] < n_cols, other=0.0)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x + r0, mask=m)


@triton.jit
def where_clamped_rows(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """No load mask: out-of-range lanes read column 0 instead (``tl.where`` on the offsets),
    and ``tl.where`` on the data zeroes them; the store is masked."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    safe = tl.where(cols < n_cols, cols, 0)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + safe[None, :])
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], tl.where(m, x, 0.0) + 1.0, mask=m)


@triton.jit
def where_clamped_store(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """The mirror image for a store: no store mask, out-of-range lanes store to column 0 of
    their row (``tl.where`` on the offsets), a value they read from there."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    safe = tl.where(cols < n_cols, cols, 0)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + safe[None, :], mask=rows[:, None] < M)
    tl.store(y_ptr + rows[:, None] * stride + safe[None, :], x * 2.0, mask=rows[:, None] < M)


@triton.jit
def bp_col_major_one_check(x_ptr, y_ptr, M, N, stride, BM: tl.constexpr, BN: tl.constexpr):
    """Block pointers in column-major ``order=(0, 1)`` with ``boundary_check`` on the columns
    only (the rows always fit: ``M`` is a multiple of ``BM``)."""
    pid = tl.program_id(0)
    xb = tl.make_block_ptr(x_ptr, shape=(M, N), strides=(stride, 1), offsets=(pid * BM, 0),
                           block_shape=(BM, BN), order=(0, 1))
    yb = tl.make_block_ptr(y_ptr, shape=(M, N), strides=(stride, 1), offsets=(pid * BM, 0),
                           block_shape=(BM, BN), order=(0, 1))
    x = tl.load(xb, boundary_check=(1,), padding_option="zero")
    tl.store(yb, x + 0.5, boundary_check=(1,))


@triton.jit
def bp_rows_unchecked(x_ptr, y_ptr, M, N, stride, BM: tl.constexpr, BN: tl.constexpr):
    """``boundary_check=(0,)`` only: the column block (``BN`` wider than ``N``) is not checked,
    so a tile reads and writes past the end of each row into the next row."""
    pid = tl.program_id(0)
    xb = tl.make_block_ptr(x_ptr, shape=(M, N), strides=(stride, 1), offsets=(pid * BM, 0),
                           block_shape=(BM, BN), order=(1, 0))
    yb = tl.make_block_ptr(y_ptr, shape=(M, N), strides=(stride, 1), offsets=(pid * BM, 0),
                           block_shape=(BM, BN), order=(1, 0))
    x = tl.load(xb, boundary_check=(0,), padding_option="zero")
    tl.store(yb, x + 0.5, boundary_check=(0,))


@triton.jit
def desc_straddle(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    """Tensor descriptors whose ``BM x BN`` block does not divide a chunk: tiles of 16 rows over
    chunks of 24 (every other tile straddles two chunks), and a block wider than the tensor."""
    pid = tl.program_id(0)
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    yd = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    x = xd.load([pid * BM, 0])
    yd.store([pid * BM, 0], x * 4.0)


# ------------------------------------------------------------------ loops and pointers

@triton.jit
def bp_advance_gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """The block-pointer GEMM of Triton's docs: ``tl.advance`` moves A's and B's block
    pointers along K in the loop (loop-carried block pointers), C stored through a block
    pointer with both boundaries checked."""
    pid = tl.program_id(0)
    n_n = tl.cdiv(N, BN)
    pm = pid // n_n
    pn = pid % n_n
    ab = tl.make_block_ptr(a_ptr, shape=(M, K), strides=(stride_am, 1), offsets=(pm * BM, 0),
                           block_shape=(BM, BK), order=(1, 0))
    bb = tl.make_block_ptr(b_ptr, shape=(K, N), strides=(stride_bk, 1), offsets=(0, pn * BN),
                           block_shape=(BK, BN), order=(1, 0))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BK)):
        a = tl.load(ab, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(bb, boundary_check=(0, 1), padding_option="zero")
        acc = tl.dot(a, b, acc)
        ab = tl.advance(ab, (0, BK))
        bb = tl.advance(bb, (BK, 0))
    cb = tl.make_block_ptr(c_ptr, shape=(M, N), strides=(stride_cm, 1),
                           offsets=(pm * BM, pn * BN), block_shape=(BM, BN), order=(1, 0))
    tl.store(cb, acc, boundary_check=(0, 1))


@triton.jit
def carried_ptr_store(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """A column loop that advances both pointer tiles by ``BLOCK`` each iteration
    (``xp += BLOCK``, ``yp += BLOCK``): the stores' boxes move with loop-carried pointers."""
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    xp = x_ptr + row * stride + c
    yp = y_ptr + row * stride + c
    for c0 in range(0, n_cols, BLOCK):
        m = c0 + c < n_cols
        x = tl.load(xp, mask=m, other=0.0)
        tl.store(yp, x * x + 1.0, mask=m)
        xp += BLOCK
        yp += BLOCK


@triton.jit
def carried_ptr_half_step(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr,
                          BLOCK: tl.constexpr):
    """As :func:`carried_ptr_store`, but the pointers advance by half a tile while the loop
    counter advances by a whole one: consecutive iterations store overlapping columns."""
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    xp = x_ptr + row * stride + c
    yp = y_ptr + row * stride + c
    for c0 in range(0, n_cols, BLOCK):
        m = c0 + c < n_cols
        x = tl.load(xp, mask=m, other=0.0)
        tl.store(yp, x + c0, mask=m)
        xp += BLOCK // 2
        yp += BLOCK // 2


@triton.jit
def static_unrolled_halves(x_ptr, y_ptr, M, n_cols, stride, BLOCK: tl.constexpr,
                           PARTS: tl.constexpr):
    """``tl.static_range`` unrolls a store per part of a row, each part ``BLOCK`` wide but the
    parts only ``BLOCK // 2`` apart: the unrolled stores overlap."""
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    for p in tl.static_range(PARTS):
        cols = p * (BLOCK // 2) + c
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        tl.store(y_ptr + row * stride + cols, x + p, mask=cols < n_cols)


@triton.jit
def pid_branch_stores(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """The first half of the programs store the even row tiles, the second half the odd ones
    (``if pid < half`` picks the formula): a store per branch, each a function of the pid."""
    pid = tl.program_id(0)
    half = tl.num_programs(0) // 2
    if pid < half:
        t = 2 * pid
    else:
        t = 2 * (pid - half) + 1
    rows = t * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    if pid < half:
        tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x + 1.0, mask=m)
    else:
        tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x - 1.0, mask=m)


@triton.jit
def pid_guarded_store(x_ptr, y_ptr, M, n_cols, stride, n_valid, BM: tl.constexpr,
                      BLOCK: tl.constexpr):
    """Only the first ``n_valid`` row tiles are stored (``if pid < n_valid``): a run-time
    argument decides which programs store their tile."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    if pid < n_valid:
        tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x * 5.0, mask=m)


# ------------------------------------------------------------- parameters and epilogues

@triton.jit
def two_params_one_output(x_ptr, y_ptr, y_hi_ptr, M, n_cols, stride, BM: tl.constexpr,
                          BLOCK: tl.constexpr):
    """The output is written through two parameters, ``y_ptr`` for the first half of the
    rows and ``y_hi_ptr`` (``y + M // 2`` rows, passed by the caller) for the second."""
    pid = tl.program_id(0)
    half = M // 2
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    lo = (rows[:, None] < half) & (cols[None, :] < n_cols)
    hi = (rows[:, None] >= half) & m
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x + 7.0, mask=lo)
    tl.store(y_hi_ptr + (rows - half)[:, None] * stride + cols[None, :], x + 7.0, mask=hi)


@triton.jit
def gather_beside_store(x_ptr, idx_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr,
                        BLOCK: tl.constexpr):
    """Each program stores a row tile of ``y`` computed from rows of ``x`` gathered through an
    index vector (``x[idx[r]]``)."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    src = tl.load(idx_ptr + rows, mask=rows < M, other=0)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + src[:, None] * stride + cols[None, :], mask=m, other=0.0)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x, mask=m)


@triton.jit
def partial_epilogue(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """Stores all but the last column of each row (a computed bound ``n_cols - 1``): the last
    column of the output is left as it was."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    keep = (rows[:, None] < M) & (cols[None, :] < n_cols - 1)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x * 0.5, mask=keep)


@triton.jit
def dot_trans_a(at_ptr, b_ptr, c_ptr, M, N, K, stride_ak, stride_bk, stride_cm,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """``C = A @ B`` with A stored transposed (``At [K, M]``) and loaded as a ``BK x BM`` tile
    that ``tl.trans`` turns for ``tl.dot``: the gathered dim of ``At`` may be its columns (M)."""
    pid = tl.program_id(0)
    n_n = tl.cdiv(N, BN)
    pm = pid // n_n
    pn = pid % n_n
    offs_m = pm * BM + tl.arange(0, BM)
    offs_n = pn * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        offs_k = k0 + tl.arange(0, BK)
        at = tl.load(at_ptr + offs_k[:, None] * stride_ak + offs_m[None, :],
                     mask=(offs_k[:, None] < K) & (offs_m[None, :] < M), other=0.0)
        b = tl.load(b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :],
                    mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(tl.trans(at), b, acc)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def splitk_semaphore(a_ptr, b_ptr, c_ptr, sem_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                     BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr):
    """Split-K serialised by a per-tile semaphore: program ``(tile, s)`` computes its K slice,
    spins until the semaphore says it is its turn (``tl.atomic_cas``), adds its partial into C
    with a plain load and store, and passes the turn on."""
    tile = tl.program_id(0)
    s = tl.program_id(1)
    n_n = tl.cdiv(N, BN)
    pm = tile // n_n
    pn = tile % n_n
    offs_m = pm * BM + tl.arange(0, BM)
    offs_n = pn * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(s * BK, K, BK * SPLIT):
        offs_k = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :],
                    mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :],
                    mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    cm = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    cp = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :]
    while tl.atomic_cas(sem_ptr + tile, s, s) != s:
        pass
    if s == 0:
        tl.store(cp, acc, mask=cm)
    else:
        tl.store(cp, tl.load(cp, mask=cm, other=0.0) + acc, mask=cm)
    tl.atomic_xchg(sem_ptr + tile, s + 1)
