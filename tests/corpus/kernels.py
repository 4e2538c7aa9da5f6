"""A corpus of real Triton kernels for the tt mirror dialect and the Triton <-> xDSL bridge.

Each entry of :data:`CORPUS` names a ``@triton.jit`` kernel with the signature and constexprs
needed to compile it for sm_90 on a CPU-only machine::

    from triton.backends.compiler import GPUTarget
    import triton
    entry = CORPUS[0]
    k = triton.compile(entry.source(), target=GPUTarget("cuda", 90, 32), options=entry.options)
    k.asm["ttir"]

Between them the kernels make Triton emit every op the mirror must read and print: pointer
arithmetic, masked loads and stores, block pointers, tensor descriptors (device side), dots,
reductions and scans (``tt.reduce`` / ``tt.scan`` regions), ``scf.for`` / ``scf.while`` /
``scf.if``, atomics, inline asm, libdevice calls, prints and asserts, shape ops and fp8/bf16
casts.  The project's own GEMM kernels (``syncopate.kernels.CORPUS``, when that module exports
it) are appended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import triton
import triton.language as tl
from triton.language.extra import libdevice


# ---------------------------------------------------------------------------------------------
# Elementwise, softmax, layer norm
# ---------------------------------------------------------------------------------------------


@triton.jit
def vector_add(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@triton.jit
def softmax(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols, BLOCK: tl.constexpr):
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row in tl.range(row_start, n_rows, row_step, num_stages=2):
        row_ptr = in_ptr + row * in_row_stride
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        row_vals = tl.load(row_ptr + cols, mask=mask, other=-float("inf"))
        shifted = row_vals - tl.max(row_vals, axis=0)
        num = tl.exp(shifted)
        den = tl.sum(num, axis=0)
        tl.store(out_ptr + row * out_row_stride + cols, num / den, mask=mask)


@triton.jit
def layer_norm_fwd(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        acc += a
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        acc += x * x
    var = tl.sum(acc, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(Y + cols, y.to(tl.float16), mask=mask)


# ---------------------------------------------------------------------------------------------
# GEMMs
# ---------------------------------------------------------------------------------------------


@triton.jit
def matmul_ptr(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
               stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = accumulator.to(tl.float16)
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


@triton.jit
def matmul_block_ptr(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                     stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_block = tl.make_block_ptr(a_ptr, shape=(M, K), strides=(stride_am, stride_ak),
                                offsets=(pid_m * BLOCK_M, 0), block_shape=(BLOCK_M, BLOCK_K),
                                order=(1, 0))
    b_block = tl.make_block_ptr(b_ptr, shape=(K, N), strides=(stride_bk, stride_bn),
                                offsets=(0, pid_n * BLOCK_N), block_shape=(BLOCK_K, BLOCK_N),
                                order=(1, 0))
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K, BLOCK_K):
        a = tl.load(a_block, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_block, boundary_check=(0, 1))
        acc += tl.dot(a, b)
        a_block = tl.advance(a_block, (0, BLOCK_K))
        b_block = tl.advance(b_block, (BLOCK_K, 0))
    c_block = tl.make_block_ptr(c_ptr, shape=(M, N), strides=(stride_cm, stride_cn),
                                offsets=(pid_m * BLOCK_M, pid_n * BLOCK_N),
                                block_shape=(BLOCK_M, BLOCK_N), order=(1, 0))
    tl.store(c_block, acc.to(tl.float16), boundary_check=(0, 1))


@triton.jit
def matmul_tma(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1],
                                       block_shape=[BLOCK_N, BLOCK_K])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1],
                                       block_shape=[BLOCK_M, BLOCK_N])
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = a_desc.load([off_m, k])
        b = b_desc.load([off_n, k])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


@triton.jit
def matmul_persistent(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                      stride_cm, stride_cn, NUM_SMS: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    start_pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n
    num_pid_in_group = GROUP_M * num_pid_n
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True):
        group_id = tile_id // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + (tile_id % group_size_m)
        pid_n = (tile_id % num_pid_in_group) // group_size_m
        offs_am = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_bn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_am = tl.where(offs_am < M, offs_am, 0)
        offs_bn = tl.where(offs_bn < N, offs_bn, 0)
        offs_am = tl.max_contiguous(tl.multiple_of(offs_am, BLOCK_M), BLOCK_M)
        offs_bn = tl.max_contiguous(tl.multiple_of(offs_bn, BLOCK_N), BLOCK_N)
        accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            offs_k = ki * BLOCK_K + tl.arange(0, BLOCK_K)
            a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
            b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - ki * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - ki * BLOCK_K, other=0.0)
            accumulator = tl.dot(a, b, accumulator)
        offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.store(c_ptrs, accumulator.to(tl.float16), mask=c_mask)


@triton.jit
def matmul_tma_persistent(a_ptr, b_ptr, c_ptr, M, N, K, NUM_SMS: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1],
                                       block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1],
                                       block_shape=[BLOCK_M, BLOCK_N])
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = tl.cdiv(M, BLOCK_M) * num_pid_n
    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_SMS, warp_specialize=False):
        off_m = (tile_id // num_pid_n) * BLOCK_M
        off_n = (tile_id % num_pid_n) * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in tl.range(0, K, BLOCK_K, num_stages=3):
            acc = tl.dot(a_desc.load([off_m, k]), b_desc.load([k, off_n]), acc)
        c_desc.store([off_m, off_n], acc.to(tl.float8e4nv))


# ---------------------------------------------------------------------------------------------
# Flash attention forward
# ---------------------------------------------------------------------------------------------


@triton.jit
def flash_attn_fwd(Q, K, V, Out, sm_scale, stride_qm, stride_kn, stride_vn, stride_om, N_CTX,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                   CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    qkv_off = off_hz.to(tl.int64) * N_CTX * stride_qm
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + qkv_off + offs_m[:, None] * stride_qm + offs_d[None, :],
                mask=offs_m[:, None] < N_CTX, other=0.0)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    hi = (start_m + 1) * BLOCK_M if CAUSAL else N_CTX
    for start_n in range(0, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = tl.load(K + qkv_off + (start_n + offs_n)[None, :] * stride_kn + offs_d[:, None],
                    mask=(start_n + offs_n)[None, :] < N_CTX, other=0.0)
        qk = tl.dot(q, k)
        if CAUSAL:
            qk = tl.where(offs_m[:, None] >= (start_n + offs_n[None, :]), qk, -1.0e6)
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        l_ij = tl.sum(p, 1)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + l_ij
        acc = acc * alpha[:, None]
        v = tl.load(V + qkv_off + (start_n + offs_n)[:, None] * stride_vn + offs_d[None, :],
                    mask=(start_n + offs_n)[:, None] < N_CTX, other=0.0)
        acc = tl.dot(p.to(tl.float16), v, acc)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(Out + qkv_off + offs_m[:, None] * stride_om + offs_d[None, :], acc.to(Out.dtype.element_ty),
             mask=offs_m[:, None] < N_CTX)


# ---------------------------------------------------------------------------------------------
# Atomics, reductions, scans, where
# ---------------------------------------------------------------------------------------------


@triton.jit
def atomics(x_ptr, counter_ptr, max_ptr, lock_ptr, flag_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0)
    tl.atomic_add(counter_ptr, tl.sum(x, axis=0))
    tl.atomic_max(max_ptr + offs % 16, x, mask=mask, sem="relaxed", scope="cta")
    tl.atomic_min(max_ptr + 16 + offs % 16, x, mask=mask, sem="release", scope="sys")
    tl.atomic_xchg(flag_ptr + pid, 1, sem="acq_rel", scope="gpu")
    tl.atomic_and(flag_ptr + 64 + pid, 3)
    tl.atomic_or(flag_ptr + 128 + pid, 4)
    tl.atomic_xor(flag_ptr + 192 + pid, 5, sem="acquire")
    while tl.atomic_cas(lock_ptr, 0, 1) == 1:
        pass
    old = tl.atomic_cas(lock_ptr, 1, 0, sem="release", scope="sys")
    tl.store(flag_ptr + 256 + pid, old)
    # a spin on a flag written by another program (volatile load in a while loop)
    while tl.load(flag_ptr + 320, volatile=True) < 1:
        pass
    f = tl.load(x_ptr + offs, mask=mask, other=0).to(tl.float32)
    tl.atomic_add(x_ptr.to(tl.pointer_type(tl.float32), bitcast=True) + offs, f, mask=mask)


@triton.jit
def reductions(x_ptr, out_ptr, idx_ptr, cum_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=0.0)
    s = tl.sum(x, axis=1)
    mx = tl.max(x, axis=0)
    am = tl.argmax(x, axis=1)
    mn, amn = tl.min(x, axis=0, return_indices=True)
    pos = tl.where(x > 0, x, -x)
    tl.store(out_ptr + rows, s + tl.sum(pos, axis=1), mask=rows < M)
    tl.store(out_ptr + BLOCK_M + cols, mx + mn, mask=cols < N)
    tl.store(idx_ptr + rows, am, mask=rows < M)
    tl.store(idx_ptr + BLOCK_M + cols, amn, mask=cols < N)
    c = tl.cumsum(x, axis=1)
    cp = tl.cumprod(x, axis=0, reverse=True)
    tl.store(cum_ptr + rows[:, None] * N + cols[None, :], c + cp, mask=mask)
    xi = x.to(tl.int32)
    tl.store(idx_ptr + 2 * BLOCK_M + rows, tl.reduce_or(xi, axis=1) ^ tl.xor_sum(xi, axis=1))


# ---------------------------------------------------------------------------------------------
# Inline asm, libdevice, print/assert, casts, shape ops, misc
# ---------------------------------------------------------------------------------------------


@triton.jit
def inline_asm(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    z = tl.inline_asm_elementwise("shf.l.wrap.b32 $0, $1, $2, $3;", "=r,r,r,r", [x, y, y],
                                  dtype=tl.uint32, is_pure=True, pack=1)
    a, b = tl.inline_asm_elementwise(
        "mov.b32 $0, $2; mov.b32 $1, $3;", "=r,=r,r,r", [z, x], dtype=(tl.uint32, tl.uint32),
        is_pure=False, pack=1)
    tl.store(out_ptr + offs, a + b, mask=mask)


@triton.jit
def libdevice_calls(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    y = libdevice.tanh(x) + libdevice.pow(x, 2.0) + libdevice.fast_expf(x)
    y += tl.sqrt_rn(x) + tl.div_rn(x, y)
    y = tl.clamp(y, -4.0, 4.0)
    y = tl.minimum(y, x, propagate_nan=tl.PropagateNan.ALL)
    y += tl.fma(x, y, x) + tl.exp(x) + tl.log2(x) + tl.cos(x) + tl.rsqrt(x) + tl.abs(x)
    y += tl.floor(x) + tl.ceil(x) + tl.erf(x)
    xi = x.to(tl.uint32, bitcast=True)
    y += tl.umulhi(xi, xi).to(tl.float32)
    tl.store(out_ptr + offs, y, mask=mask)


@triton.jit
def print_assert(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.device_print("x = ", x)
    tl.device_print("pid", tl.program_id(0), hex=True)
    tl.device_assert(x >= 0, "x must be non-negative")
    tl.static_print("compile-time")


@triton.jit
def casts(x_ptr, y_ptr, z_ptr, w_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)  # fp32
    b = x.to(tl.bfloat16)
    h = x.to(tl.float16, fp_downcast_rounding="rtz")
    f8 = x.to(tl.float8e4nv)
    f5 = h.to(tl.float8e5)
    f8b = b.to(tl.float8e4nv)
    tl.store(y_ptr + offs, f8, mask=mask)
    tl.store(y_ptr + n + offs, f5.to(tl.float16).to(tl.float8e4nv), mask=mask)
    back = f8.to(tl.float32) + f5.to(tl.float32) + f8b.to(tl.bfloat16).to(tl.float32)
    back += b.to(tl.float32) + h.to(tl.float32)
    i = back.to(tl.int32)
    u = back.to(tl.uint8)
    bits = back.to(tl.int32, bitcast=True)
    tl.store(z_ptr + offs, i + u.to(tl.int32) + (bits >> 3) + (bits.to(tl.uint32) >> 3).to(tl.int32),
             mask=mask)
    p = (w_ptr + offs).to(tl.int64, bitcast=True)
    q = p.to(tl.pointer_type(tl.float64), bitcast=True)
    tl.store(q, back.to(tl.float64), mask=mask)
    ip = tl.cast(w_ptr, tl.int64, bitcast=True)
    tl.store(ip.to(tl.pointer_type(tl.float64), bitcast=True) + 3, 1.0)


@triton.jit
def shape_ops(x_ptr, idx_ptr, out_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r[:, None] * BLOCK + r[None, :])
    t = tl.trans(x)
    p = tl.permute(tl.reshape(x, (BLOCK, BLOCK // 2, 2)), (2, 0, 1))
    lo, hi = tl.split(tl.reshape(x, (BLOCK, BLOCK // 2, 2)))
    j = tl.join(lo, hi)
    c = tl.cat(tl.reshape(lo, (BLOCK * BLOCK // 2, )), tl.reshape(hi, (BLOCK * BLOCK // 2, )), can_reorder=True)
    s = tl.sum(p, axis=0).reshape(BLOCK // 2, BLOCK)
    v = tl.reshape(j, (BLOCK, BLOCK)) + t + tl.join(s, s).reshape(BLOCK, BLOCK)
    tl.store(out_ptr + r[:, None] * BLOCK + r[None, :], v)
    tl.store(out_ptr + BLOCK * BLOCK + tl.arange(0, BLOCK * BLOCK), c)
    idx = tl.load(idx_ptr + r[:, None] * BLOCK + r[None, :])
    g = tl.gather(x, idx, axis=1)
    tl.store(out_ptr + 2 * BLOCK * BLOCK + r[:, None] * BLOCK + r[None, :], g)
    h = tl.histogram(tl.reshape(idx, (BLOCK * BLOCK, )), 16)
    tl.store(idx_ptr + tl.arange(0, 16), h)
    ii = tl.interleave(lo, hi)
    tl.store(out_ptr + 3 * BLOCK * BLOCK + r[:, None] * BLOCK + r[None, :], ii)
    one = tl.reshape(tl.sum(x, axis=None)[None], (1, ))
    tl.store(out_ptr + tl.arange(0, 1), one)


@triton.jit
def scalar_helper(x, y):
    return x * 2 + y


@triton.jit(noinline=True)
def noinline_helper(ptr, v):
    tl.store(ptr, v)
    return v + 1


@triton.jit
def control_flow(x_ptr, out_ptr, n, flag, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    if flag > 0:
        y = x * 2.0
    elif flag < -3:
        y = x - 1.0
    else:
        y = scalar_helper(x, x)
    i = 0
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    while i < n:
        acc += y
        i += BLOCK * tl.num_programs(0)
    if pid == 0:
        tl.store(out_ptr + offs, acc)
    r = noinline_helper(out_ptr + n, tl.sum(acc))
    if r > 2.0:
        return
    tl.store(out_ptr + n + 1, r)


@triton.jit
def map_elementwise_scalar(x, alpha):
    if x > 0:
        return x
    else:
        return alpha * (tl.exp(x) - 1)


@triton.jit
def map_elementwise(x_ptr, out_ptr, alpha, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, tl.map_elementwise(map_elementwise_scalar, x, alpha))


@triton.jit
def descriptor_ops(x_ptr, y_ptr, i_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    desc = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1],
                                     block_shape=[BLOCK_M, BLOCK_N], padding_option="nan")
    out = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1],
                                    block_shape=[BLOCK_M, BLOCK_N])
    iout = tl.make_tensor_descriptor(i_ptr, shape=[M, N], strides=[N, 1],
                                     block_shape=[BLOCK_M, BLOCK_N])
    v = desc.load([tl.program_id(0) * BLOCK_M, 0])
    out.atomic_add([0, 0], v)
    iv = v.to(tl.int32)
    iout.atomic_max([BLOCK_M, 0], iv)
    iout.atomic_and([BLOCK_M, BLOCK_N], iv)
    out.store([BLOCK_M, BLOCK_N], v)


@triton.jit
def descriptor_gather_scatter(x_ptr, y_ptr, idx_ptr, M, N, BLOCK_M: tl.constexpr,
                              BLOCK_N: tl.constexpr):
    desc = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1],
                                     block_shape=[1, BLOCK_N])
    rows = tl.load(idx_ptr + tl.arange(0, BLOCK_M))
    g = desc.gather(rows, 0)
    desc.scatter(g + 1, rows, BLOCK_N)


@triton.jit
def memory_variants(x_ptr, y_ptr, h_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(x_ptr + offs, mask=mask, other=0.0, cache_modifier=".cg")
    b = tl.load(x_ptr + n + offs, mask=mask, other=0.0, eviction_policy="evict_last")
    c = tl.load(x_ptr + 2 * n + offs, mask=mask, other=0.0, cache_modifier=".ca")
    s = tl.load(x_ptr + 3 * n, volatile=True)  # scalar volatile load
    tl.debug_barrier()
    tl.store(y_ptr + offs, a + b, mask=mask, cache_modifier=".wt")
    tl.store(y_ptr + n + offs, c * s, mask=mask, cache_modifier=".cs")
    tl.store(y_ptr + 2 * n + offs, c, mask=mask, eviction_policy="evict_first")
    bins = tl.histogram((a * 8.0).to(tl.int32) & 15, 16, mask=mask)
    tl.atomic_add(h_ptr + tl.arange(0, 16), bins)
    one = tl.sum(tl.reshape(bins, (16, 1)), axis=0)  # a 1-element tensor ...
    tl.store(h_ptr + 16, tl.reshape(one, ()))        # ... to a scalar (tt.unsplat)


@triton.jit
def hints(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    tl.assume(n > 0)
    tl.assume(stride % 16 == 0)
    pid = tl.program_id(0)
    base = tl.multiple_of(pid * BLOCK, BLOCK)
    offs = tl.max_contiguous(tl.multiple_of(base + tl.arange(0, BLOCK), BLOCK), BLOCK)
    rows = tl.max_constancy(offs // 4, 4)
    x = tl.load(x_ptr + offs * stride, mask=offs < n)
    y = tl.multiple_of(tl.exp(x).to(tl.int32), 2)
    tl.store(y_ptr + rows, y, mask=rows < n)


@triton.jit
def dot_scaled_mx(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr,
                  K: tl.constexpr):
    offs_m = tl.arange(0, M)
    offs_n = tl.arange(0, N)
    offs_k = tl.arange(0, K)
    offs_ks = tl.arange(0, K // 32)
    a = tl.load(a_ptr + offs_m[:, None] * K + offs_k[None, :])
    b = tl.load(b_ptr + offs_k[:, None] * N + offs_n[None, :])
    a_scale = tl.load(a_scale_ptr + offs_m[:, None] * (K // 32) + offs_ks[None, :])
    b_scale = tl.load(b_scale_ptr + offs_n[:, None] * (K // 32) + offs_ks[None, :])
    c = tl.dot_scaled(a, a_scale, "e4m3", b, b_scale, "e5m2")
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], c)


# ---------------------------------------------------------------------------------------------
# The corpus
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CorpusKernel:
    """One kernel of the corpus: what :func:`triton.compile` needs."""

    name: str
    fn: Any
    signature: dict
    constexprs: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    arch: int = 90
    #: integer arguments the launcher would specialise as multiples of 16 (pointer arguments
    #: always get ``tt.divisibility = 16``, as Triton's JIT gives 16-byte aligned pointers)
    divisible: tuple = ()
    #: explicit ASTSource attrs (``{(index,): [["tt.divisibility", 16]]}``), replacing the above
    explicit_attrs: dict | None = None

    def attrs(self) -> dict:
        """Argument attributes as Triton's JIT would set them (``tt.divisibility = 16``)."""
        if self.explicit_attrs is not None:
            return dict(self.explicit_attrs)
        out = {}
        for name, ty in self.signature.items():
            if (isinstance(ty, str) and ty.startswith("*")) or name in self.divisible:
                out[(self.fn.arg_names.index(name), )] = [["tt.divisibility", 16]]
        return out

    def target(self):
        """The :class:`GPUTarget` this kernel compiles for (sm_90 unless it needs more)."""
        from triton.backends.compiler import GPUTarget
        return GPUTarget("cuda", self.arch, 32)

    def source(self):
        """The :class:`triton.compiler.ASTSource` to pass to :func:`triton.compile`."""
        return triton.compiler.ASTSource(fn=self.fn, signature=self.signature,
                                         constexprs=self.constexprs, attrs=self.attrs())


def _sig(**kw) -> dict:
    return dict(kw)


_GEMM_PTR_SIG = _sig(a_ptr="*fp16", b_ptr="*fp16", c_ptr="*fp16", M="i32", N="i32", K="i32",
                     stride_am="i32", stride_ak="i32", stride_bk="i32", stride_bn="i32",
                     stride_cm="i32", stride_cn="i32")

CORPUS: list[CorpusKernel] = [
    CorpusKernel("vector_add", vector_add,
                 _sig(x_ptr="*fp32", y_ptr="*fp32", out_ptr="*fp32", n_elements="i32", BLOCK="constexpr"),
                 {"BLOCK": 1024}),
    CorpusKernel("softmax", softmax,
                 _sig(out_ptr="*fp32", in_ptr="*fp32", in_row_stride="i32", out_row_stride="i32",
                      n_rows="i32", n_cols="i32", BLOCK="constexpr"), {"BLOCK": 1024}),
    CorpusKernel("layer_norm_fwd", layer_norm_fwd,
                 _sig(X="*fp16", Y="*fp16", W="*fp32", B="*fp32", Mean="*fp32", Rstd="*fp32",
                      stride="i32", N="i32", eps="fp32", BLOCK="constexpr"), {"BLOCK": 512}),
    CorpusKernel("matmul_ptr", matmul_ptr, dict(_GEMM_PTR_SIG, BLOCK_M="constexpr", BLOCK_N="constexpr",
                                               BLOCK_K="constexpr", GROUP_M="constexpr"),
                 {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8},
                 {"num_warps": 8, "num_stages": 3},
                 divisible=("M", "N", "K", "stride_am", "stride_bk", "stride_cm")),
    CorpusKernel("matmul_block_ptr", matmul_block_ptr,
                 dict(_GEMM_PTR_SIG, BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr"),
                 {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, {"num_warps": 8}),
    CorpusKernel("matmul_tma", matmul_tma,
                 _sig(a_ptr="*bf16", b_ptr="*bf16", c_ptr="*bf16", M="i32", N="i32", K="i32",
                      BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr"),
                 {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, {"num_warps": 8, "num_stages": 3},
                 divisible=("K", "N")),
    CorpusKernel("matmul_persistent", matmul_persistent,
                 dict(_GEMM_PTR_SIG, NUM_SMS="constexpr", BLOCK_M="constexpr", BLOCK_N="constexpr",
                      BLOCK_K="constexpr", GROUP_M="constexpr"),
                 {"NUM_SMS": 132, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8},
                 {"num_warps": 8, "num_stages": 3}),
    CorpusKernel("matmul_tma_persistent", matmul_tma_persistent,
                 _sig(a_ptr="*fp8e4nv", b_ptr="*fp8e4nv", c_ptr="*fp8e4nv", M="i32", N="i32", K="i32",
                      NUM_SMS="constexpr", BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr"),
                 {"NUM_SMS": 132, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128}, {"num_warps": 8}),
    CorpusKernel("flash_attn_fwd", flash_attn_fwd,
                 _sig(Q="*fp16", K="*fp16", V="*fp16", Out="*fp16", sm_scale="fp32", stride_qm="i32",
                      stride_kn="i32", stride_vn="i32", stride_om="i32", N_CTX="i32",
                      BLOCK_M="constexpr", BLOCK_N="constexpr", HEAD_DIM="constexpr", CAUSAL="constexpr"),
                 {"BLOCK_M": 128, "BLOCK_N": 64, "HEAD_DIM": 64, "CAUSAL": True}, {"num_warps": 4}),
    CorpusKernel("atomics", atomics,
                 _sig(x_ptr="*i32", counter_ptr="*i32", max_ptr="*i32", lock_ptr="*i32", flag_ptr="*i32",
                      n="i32", BLOCK="constexpr"), {"BLOCK": 256}),
    CorpusKernel("reductions", reductions,
                 _sig(x_ptr="*fp32", out_ptr="*fp32", idx_ptr="*i32", cum_ptr="*fp32", M="i32", N="i32",
                      BLOCK_M="constexpr", BLOCK_N="constexpr"), {"BLOCK_M": 32, "BLOCK_N": 64}),
    CorpusKernel("inline_asm", inline_asm,
                 _sig(x_ptr="*u32", y_ptr="*u32", out_ptr="*u32", n="i32", BLOCK="constexpr"),
                 {"BLOCK": 256}),
    CorpusKernel("libdevice_calls", libdevice_calls,
                 _sig(x_ptr="*fp32", out_ptr="*fp32", n="i32", BLOCK="constexpr"), {"BLOCK": 256}),
    CorpusKernel("print_assert", print_assert, _sig(x_ptr="*i32", n="i32", BLOCK="constexpr"),
                 {"BLOCK": 128}, {"debug": True}),
    CorpusKernel("casts", casts,
                 _sig(x_ptr="*fp32", y_ptr="*fp8e4nv", z_ptr="*i32", w_ptr="*fp64", n="i32",
                      BLOCK="constexpr"), {"BLOCK": 256}),
    CorpusKernel("shape_ops", shape_ops,
                 _sig(x_ptr="*fp32", idx_ptr="*i32", out_ptr="*fp32", BLOCK="constexpr"), {"BLOCK": 32}),
    CorpusKernel("control_flow", control_flow,
                 _sig(x_ptr="*fp32", out_ptr="*fp32", n="i32", flag="i32", BLOCK="constexpr"),
                 {"BLOCK": 128}),
    CorpusKernel("map_elementwise", map_elementwise,
                 _sig(x_ptr="*fp32", out_ptr="*fp32", alpha="fp32", BLOCK="constexpr"), {"BLOCK": 128}),
    CorpusKernel("descriptor_ops", descriptor_ops,
                 _sig(x_ptr="*fp32", y_ptr="*fp32", i_ptr="*i32", M="i32", N="i32", BLOCK_M="constexpr",
                      BLOCK_N="constexpr"), {"BLOCK_M": 32, "BLOCK_N": 64}),
    CorpusKernel("memory_variants", memory_variants,
                 _sig(x_ptr="*fp32", y_ptr="*fp32", h_ptr="*i32", n="i32", BLOCK="constexpr"),
                 {"BLOCK": 256}),
    CorpusKernel("hints", hints, _sig(x_ptr="*fp32", y_ptr="*i32", n="i32", stride="i32", BLOCK="constexpr"),
                 {"BLOCK": 128}),
    CorpusKernel("dot_scaled_mx", dot_scaled_mx,
                 _sig(a_ptr="*fp8e4nv", a_scale_ptr="*u8", b_ptr="*fp8e5", b_scale_ptr="*u8", c_ptr="*fp32",
                      M="constexpr", N="constexpr", K="constexpr"), {"M": 128, "N": 128, "K": 128}),
    # TMA gather/scatter need sm_100 in ptxas: this one compiles for Blackwell.
    CorpusKernel("descriptor_gather_scatter", descriptor_gather_scatter,
                 _sig(x_ptr="*i32", idx_ptr="*i32", M="i32", N="i32", y_ptr="*i32",
                      BLOCK_M="constexpr", BLOCK_N="constexpr"), {"BLOCK_M": 32, "BLOCK_N": 64},
                 arch=100),
]


def _project_kernels() -> list[CorpusKernel]:
    """The project's own GEMM kernels (``syncopate.kernels.CORPUS``) when that module has them.

    Entries may be :class:`CorpusKernel` objects or anything with the same attributes
    (``name``, ``fn``, ``signature``, optional ``constexprs`` / ``options``), or dicts with those
    keys."""
    try:
        import syncopate.kernels as project_kernels
    except Exception:  # the module is written by another engineer; tolerate its absence
        return []
    entries = getattr(project_kernels, "CORPUS", None) or []
    out = []
    for e in entries:
        get = (lambda k, d=None: e.get(k, d)) if isinstance(e, dict) else (lambda k, d=None: getattr(e, k, d))
        fn = get("fn")
        if fn is None:
            continue
        name = get("name") or getattr(fn, "__name__", "kernel")
        attrs = get("attrs", None)
        out.append(CorpusKernel(f"syncopate.{name}", fn, dict(get("signature")),
                                dict(get("constexprs", None) or {}), dict(get("options", None) or {}),
                                explicit_attrs=dict(attrs) if attrs is not None else None))
    return out


CORPUS.extend(_project_kernels())

CORPUS_BY_NAME: dict[str, CorpusKernel] = {k.name: k for k in CORPUS}
