"""A third round of kernels in styles the project had not seen (issue 28's probe, continued): a
demanding new user's kernels that lean on what the soundness promise must not take for granted --
programs that talk to each other inside one launch (look-back scans, locks, grid barriers, "the
last program finishes"), hints that lie, views that alias or wrap, register-level tile ops
(``tl.gather``, ``tl.sort``, ``tl.histogram``, interleave/permute), memory-op modifiers,
inline assembly and libdevice calls, loops written with Triton's loop knobs, and tilings
whose stores of an output overlap across loop iterations or programs.  Each is
written for one GPU with no knowledge of communication; ``tests/test_probe_unseen3.py`` fuses
it with every schedule that could move one of its tensors and says what each must give.

Each kernel's docstring says what about it is new to the compiler.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import libdevice


# ------------------------------------------------------------ programs that talk to each other

@triton.jit
def lookback_scan_rows(x_ptr, y_ptr, agg_ptr, flag_ptr, M, n_cols, stride,
                       BM: tl.constexpr, BLOCK: tl.constexpr):
    """A decoupled look-back prefix sum over row tiles: program ``p`` spins on program
    ``p - 1``'s flag (``tl.atomic_add(flag, 0)``), adds its published running total, publishes
    its own and writes ``y = x + total of the earlier tiles``.  It relies on program order: a
    remap that runs tile 3 before tile 2 can only wait."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    local = tl.sum(tl.sum(x, axis=1), axis=0)
    prev = 0.0
    if pid > 0:
        while tl.atomic_add(flag_ptr + pid - 1, 0) == 0:
            pass
        prev = tl.load(agg_ptr + pid - 1, volatile=True)
    tl.store(agg_ptr + pid, prev + local)
    tl.atomic_xchg(flag_ptr + pid, 1)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x + prev, mask=m)


@triton.jit
def spin_lock_count(x_ptr, y_ptr, lock_ptr, cnt_ptr, M, n_cols, stride,
                    BM: tl.constexpr, BLOCK: tl.constexpr):
    """A spin lock (``tl.atomic_cas`` to take it, ``tl.atomic_xchg`` to release) around a plain
    load-modify-store of a shared int32 counter (the number of positive elements seen)."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    pos = tl.sum(tl.sum((x > 0).to(tl.int32), axis=1), axis=0)
    while tl.atomic_cas(lock_ptr, 0, 1) == 1:
        pass
    c = tl.load(cnt_ptr, volatile=True)
    tl.store(cnt_ptr, c + pos)
    tl.atomic_xchg(lock_ptr, 0)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], tl.abs(x), mask=m)


@triton.jit
def grid_barrier_norm(x_ptr, y_ptr, gmax_ptr, bar_ptr, M, n_cols, stride,
                      BM: tl.constexpr, BLOCK: tl.constexpr):
    """A grid-wide barrier: every program folds its tile's max into a global max
    (``tl.atomic_max``), arrives at a counter and spins until all ``tl.num_programs(0)`` have
    arrived, then divides its tile by the global max.  It needs every program resident at once
    and counts the launch's programs."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    tl.atomic_max(gmax_ptr, tl.max(tl.max(tl.abs(x), axis=1), axis=0))
    tl.atomic_add(bar_ptr, 1)
    while tl.atomic_add(bar_ptr, 0) < tl.num_programs(0):
        pass
    g = tl.atomic_add(gmax_ptr, 0.0)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x / g, mask=m)


@triton.jit
def last_program_total(x_ptr, y_ptr, part_ptr, cnt_ptr, tot_ptr, M, n_cols, stride,
                       BM: tl.constexpr, BLOCK: tl.constexpr, NP: tl.constexpr):
    """"The last program finishes": each program stores its tile's column sums into a
    workspace row, takes a ticket (``tl.atomic_add(cnt, 1)``), and the one that draws the last
    ticket sums the workspace (volatile loads) into the total; every program also writes its
    tile scaled."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    tl.store(part_ptr + pid * BLOCK + cols, tl.sum(x, axis=0))
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x * 0.25, mask=m)
    t = tl.atomic_add(cnt_ptr, 1, sem="acq_rel")
    if t == tl.num_programs(0) - 1:
        ps = tl.arange(0, NP)
        p = tl.load(part_ptr + ps[:, None] * BLOCK + cols[None, :],
                    mask=ps[:, None] < tl.num_programs(0), other=0.0, volatile=True)
        tl.store(tot_ptr + cols, tl.sum(p, axis=0), mask=cols < n_cols)


@triton.jit
def ticket_order_rows(x_ptr, y_ptr, ticket_ptr, M, n_cols, stride,
                      BM: tl.constexpr, BLOCK: tl.constexpr):
    """Processes row tiles in the order programs *start* (a ticket from an atomic counter is
    the tile), and stores each ticket into ``y``'s last column as a record of the order."""
    t = tl.atomic_add(ticket_ptr, 1)
    rows = t * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x - 1.0, mask=m)


@triton.jit
def volatile_flag_rows(x_ptr, y_ptr, flag_ptr, M, n_cols, stride,
                       BM: tl.constexpr, BLOCK: tl.constexpr):
    """Program 0 publishes a flag that every other program polls with a volatile load (no
    atomic) before writing ``y``: a wait on another program, spelled without atomics."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    if pid == 0:
        tl.atomic_xchg(flag_ptr, 1)
    else:
        while tl.load(flag_ptr, volatile=True) == 0:
            pass
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x * 2.0, mask=m)


@triton.jit
def chased_rows(x_ptr, y_ptr, next_ptr, M, n_cols, stride,
                BM: tl.constexpr, BLOCK: tl.constexpr):
    """Counts the hops from this program's node to the end (-1) of a linked list with plain
    loads -- data the loop follows, not a flag it polls -- and adds the count to its rows."""
    pid = tl.program_id(0)
    node = pid
    hops = 0
    while node >= 0:
        node = tl.load(next_ptr + node)
        hops += 1
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x + hops, mask=m)


# ------------------------------------------------------------------------ hints that lie

@triton.jit
def lying_contiguity(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """Reads every other column (``cols = 2 * arange``) while claiming the index is contiguous
    and 16-aligned (``tl.max_contiguous`` / ``tl.multiple_of``): the hints are false."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.max_contiguous(tl.multiple_of(2 * tl.arange(0, BLOCK), 16), BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x + 5.0, mask=m)


@triton.jit
def assumed_bound_nomask(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    """No mask: the row length is only *assumed* (``tl.assume(n_cols >= BLOCK)``); launched
    with rows shorter than ``BLOCK`` the assumption is a lie."""
    tl.assume(n_cols >= BLOCK)
    tl.assume(stride >= n_cols)
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols)
    tl.store(y_ptr + row * stride + cols, x * 3.0)


@triton.jit
def assumed_row_range(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """Every row index is assumed below ``M`` (``tl.assume(pid * BM + BM <= M)``) instead of
    masked: the store into the output has only a column mask."""
    pid = tl.program_id(0)
    tl.assume(pid * BM + BM <= M)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = cols[None, :] < n_cols
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x * x, mask=m)


# ------------------------------------------------------------------ views that alias or wrap

@triton.jit
def strided_view_rows(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    """Reads rows of x through its own stride argument (an ``as_strided`` view: launched with
    ``stride_x = 0`` every program reads row 0, with ``stride_x < n_cols`` the rows overlap)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=0.0)
    tl.store(y_ptr + row * stride_y + cols, x + 1.0, mask=cols < n_cols)


@triton.jit
def negative_stride_rows(x_ptr, y_ptr, M, n_cols, stride, BLOCK: tl.constexpr):
    """``x.flip(0)`` passed as a base offset and a negative row stride: row ``r`` of the view
    is ``x_ptr + (M - 1) * stride + r * (-stride)``."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    neg = 0 - stride
    x = tl.load(x_ptr + (M - 1) * stride + row * neg + cols, mask=cols < n_cols, other=0.0)
    tl.store(y_ptr + row * stride + cols, x * 2.0, mask=cols < n_cols)


@triton.jit
def int32_wrap_rows(x_ptr, y_ptr, n_cols, stride, wrap, BLOCK: tl.constexpr):
    """An int32 offset that overflows: ``wrap * wrap`` with ``wrap = 65536`` is ``2**32``, 0 in
    32 bits, so the row read is the program's own although the offset says ``2**32`` further."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    off = row * stride + wrap * wrap + cols
    x = tl.load(x_ptr + off, mask=cols < n_cols, other=0.0)
    tl.store(y_ptr + row * stride + cols, x - 2.0, mask=cols < n_cols)


@triton.jit
def concat_into_self(x_ptr, M, n_cols, stride, BLOCK: tl.constexpr):
    """Writes its output into the same buffer past the input (``x_ptr + M * stride``: a
    ``torch.cat`` done in place): the store lies past the last row of the input tensor."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(x_ptr + (M + row) * stride + cols, x * 0.5, mask=cols < n_cols)


# ---------------------------------------------------------------------- register-level ops

@triton.jit
def gather_permute_rows(x_ptr, perm_ptr, y_ptr, M, n_cols, stride,
                        BM: tl.constexpr, BLOCK: tl.constexpr):
    """Permutes the columns of a tile in registers (``tl.gather`` along axis 1 with a loaded
    permutation)."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    p = tl.load(perm_ptr + cols)
    idx = tl.broadcast_to(p[None, :], (BM, BLOCK))
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], tl.gather(x, idx, 1), mask=m)


@triton.jit
def interleave_halves(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, HALF: tl.constexpr):
    """Loads the two halves of each row separately and interleaves them
    (``tl.interleave``: ``[a0, b0, a1, b1, ...]``)."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    h = tl.arange(0, HALF)
    a = tl.load(x_ptr + rows[:, None] * stride + h[None, :])
    b = tl.load(x_ptr + rows[:, None] * stride + HALF + h[None, :])
    out = tl.arange(0, 2 * HALF)
    tl.store(y_ptr + rows[:, None] * stride + out[None, :], tl.interleave(a, b),
             mask=(rows[:, None] < M) & (out[None, :] < n_cols))


@triton.jit
def reshape_permute_tile(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr,
                         BLOCK: tl.constexpr):
    """Builds the output tile by ``reshape [BM, 2, BLOCK/2] -> permute (0, 2, 1) -> reshape``
    (even columns first, then odd: a de-interleave)."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    t = tl.reshape(tl.permute(tl.reshape(x, (BM, BLOCK // 2, 2)), (0, 2, 1)), (BM, BLOCK))
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], t, mask=m)


@triton.jit
def sort_flip_rows(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """Sorts each row in registers (``tl.sort``, descending) and writes it flipped
    (``tl.flip``): ascending order."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=float("inf"))
    s = tl.flip(tl.sort(x, dim=1, descending=True), 1)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], s, mask=m)


@triton.jit
def histogram_rows(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr, BINS: tl.constexpr):
    """A per-row histogram in registers (``tl.histogram``) of the row's values bucketed into
    ``BINS`` bins, written as floats."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    b = tl.minimum(tl.maximum((x * 2.0 + BINS // 2).to(tl.int32), 0), BINS - 1)
    h = tl.histogram(b, BINS)
    bins = tl.arange(0, BINS)
    tl.store(y_ptr + row * BINS + bins, h.to(tl.float32))


@triton.jit
def _running_max(a, b):
    return tl.maximum(a, b)


@triton.jit
def reverse_scans_rows(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """A suffix sum (``tl.cumsum(reverse=True)``) plus a running max through
    ``tl.associative_scan`` with a user combine function."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    s = tl.cumsum(x, axis=1, reverse=True)
    r = tl.associative_scan(x, 1, _running_max)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], s + r, mask=m)


# --------------------------------------------------------------------- memory-op modifiers

@triton.jit
def modifiers_rows(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """Every memory-op modifier at once: a volatile load, ``.cv`` / ``evict_last`` on another,
    ``.cs`` / ``evict_first`` on the store, a ``tl.debug_barrier`` between them and a
    ``tl.device_assert`` on the loaded data."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    p = x_ptr + rows[:, None] * stride + cols[None, :]
    a = tl.load(p, mask=m, other=0.0, volatile=True)
    tl.debug_barrier()
    b = tl.load(p, mask=m, other=0.0, cache_modifier=".cv", eviction_policy="evict_last")
    tl.device_assert(a == b, "volatile and .cv loads disagree")
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], a + b, mask=m,
             cache_modifier=".cs", eviction_policy="evict_first")


@triton.jit
def desc_half_stores(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    """Device tensor descriptors with different block shapes over the same output: a
    ``[BM, BN]`` tile loaded, stored back as two ``[BM, BN/2]`` halves (the right half first)."""
    pid = tl.program_id(0)
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    yd = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1],
                                   block_shape=[BM, BN // 2])
    x = xd.load([pid * BM, 0])
    lo, hi = tl.split(tl.permute(tl.reshape(x, (BM, 2, BN // 2)), (0, 2, 1)))
    yd.store([pid * BM, BN // 2], hi * 2.0)
    yd.store([pid * BM, 0], lo * 2.0)


@triton.jit
def bp_nan_padding(x_ptr, y_ptr, M, N, stride, BM: tl.constexpr, BN: tl.constexpr):
    """Block pointers checked on the column dim only, padded with NaN past it, and the NaNs
    replaced before the store (``boundary_check=(1,)``, ``padding_option="nan"``)."""
    pid = tl.program_id(0)
    xb = tl.make_block_ptr(x_ptr, (M, N), (stride, 1), (pid * BM, 0), (BM, BN), (1, 0))
    yb = tl.make_block_ptr(y_ptr, (M, N), (stride, 1), (pid * BM, 0), (BM, BN), (1, 0))
    x = tl.load(xb, boundary_check=(1,), padding_option="nan")
    x = tl.where(x != x, 0.0, x)
    tl.store(yb, x + 1.0, boundary_check=(0, 1))


@triton.jit
def asm_pure_rows(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """Pure inline PTX on the loaded data (``tl.inline_asm_elementwise``: a ``max`` with 0)."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    r = tl.inline_asm_elementwise("max.f32 $0, $1, 0f00000000;", "=r,r", [x], dtype=tl.float32,
                                  is_pure=True, pack=1)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], r, mask=m)


@triton.jit
def asm_store_rows(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    """Stores through inline PTX (``st.global.f32``) at an address computed from ``y_ptr`` and
    passed to the asm as an integer: a store the access analysis cannot see as ``tt.store``."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    addr = (y_ptr + row * stride + cols).to(tl.int64, bitcast=True)
    tl.inline_asm_elementwise("st.global.f32 [$1], $2; mov.u32 $0, 0;", "=r,l,r", [addr, x],
                              dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def libdevice_rows(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """libdevice extern calls on the loaded data (``libdevice.tanh``, ``libdevice.pow``)."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :],
             libdevice.tanh(x) + libdevice.pow(x, 2.0), mask=m)


# ------------------------------------------------------------------------------ control flow

@triton.jit
def while_loaded_bound(x_ptr, len_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    """A ``while`` loop whose bound is a loaded value, clamped by the row length: the loop
    runs ``cdiv(min(len, n_cols), BLOCK)`` times, the mask is ``cols < n_cols`` only."""
    row = tl.program_id(0)
    n = tl.minimum(tl.load(len_ptr + row), n_cols)
    c0 = 0
    while c0 < n:
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        tl.store(y_ptr + row * stride + cols, x + 7.0, mask=cols < n_cols)
        c0 += BLOCK


@triton.jit
def flattened_loops(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr,
                    ROWS: tl.constexpr):
    """Nested loops with Triton's knobs: the row loop ``tl.range(..., flatten=True)``, the
    column loop ``tl.range(..., num_stages=2, loop_unroll_factor=2)``."""
    pid = tl.program_id(0)
    for r in tl.range(0, ROWS, flatten=True):
        row = pid * ROWS + r
        for c0 in tl.range(0, n_cols, BLOCK, num_stages=2, loop_unroll_factor=2):
            cols = c0 + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
            tl.store(y_ptr + row * stride + cols, x * 1.5, mask=cols < n_cols)


@triton.jit
def swizzle2d_persistent_gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                              GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr):
    """A persistent GEMM whose tile coordinates come from ``tl.swizzle2d`` of the row-major
    ``(i, j)`` of the tile (Triton's own grouping helper, not the tutorial's inline formula)."""
    n_m = tl.cdiv(M, BM)
    n_n = tl.cdiv(N, BN)
    for t in range(tl.program_id(0), n_m * n_n, NUM_SMS):
        pm, pn = tl.swizzle2d(t // n_n, t % n_n, n_m, n_n, GROUP_M)
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


@triton.jit
def nested_if_returns(x_ptr, y_ptr, M, n_cols, stride, mode, BM: tl.constexpr,
                      BLOCK: tl.constexpr):
    """Early returns inside nested ``if``s on a run-time ``mode`` (0: copy, 1: square, else
    negate), each branch storing the whole tile before it returns."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    yp = y_ptr + rows[:, None] * stride + cols[None, :]
    if mode < 2:
        if mode == 0:
            tl.store(yp, x, mask=m)
            return
        tl.store(yp, x * x, mask=m)
        return
    tl.store(yp, -x, mask=m)


# ------------------------------------------------ tilings that store an element twice a launch

@triton.jit
def overlap_step(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """A column loop whose step is half its tile: every iteration stores a box of its own (the
    box moves with the loop), but consecutive boxes share half their columns."""
    row = tl.program_id(0)
    for c0 in range(0, n_cols, BLOCK // 2):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        tl.store(y_ptr + row * stride + cols, x * 2.0 + c0, mask=cols < n_cols)


@triton.jit
def shifted_pair(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """Two stores an iteration, at ``c0`` and ``c0 + BLOCK``: disjoint within the iteration (a
    constant gap of one tile), but the second overlaps the next iteration's first."""
    row = tl.program_id(0)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        tl.store(y_ptr + row * stride + cols, x * 2.0, mask=cols < n_cols)
        cols2 = cols + BLOCK
        x2 = tl.load(x_ptr + row * stride + cols2, mask=cols2 < n_cols, other=0.0)
        tl.store(y_ptr + row * stride + cols2, x2 * 3.0, mask=cols2 < n_cols)


@triton.jit
def grid_overlap(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """Row tiles of ``BM`` rows at a stride of ``BM // 2``: neighbouring programs share rows."""
    pid = tl.program_id(0)
    rows = pid * (BM // 2) + tl.arange(0, BM)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < M) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x * 2.0, mask=m)


@triton.jit
def persistent_overlap(x_ptr, y_ptr, M, n_cols, stride, BM: tl.constexpr, BLOCK: tl.constexpr):
    """A persistent loop over ``2 * M // BM`` tiles of ``BM`` rows at a stride of ``BM // 2``
    (4 programs): the tiles of different programs share rows."""
    for t in range(tl.program_id(0), 2 * M // BM, 4):
        rows = t * (BM // 2) + tl.arange(0, BM)
        cols = tl.arange(0, BLOCK)
        m = (rows[:, None] < M) & (cols[None, :] < n_cols)
        x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
        tl.store(y_ptr + rows[:, None] * stride + cols[None, :], x * 2.0, mask=m)
