"""Host-side launch of the local GEMM kernels: :func:`matmul` and :func:`make_launcher`, the
operand checks they run first (:func:`check_operands`, host only, testable without a GPU),
the TMA scratch allocator and the device's SM count.

What :func:`matmul` does per call, and why it is cheap: the first call for a given
*layout* -- shapes, strides, dtype, device, 16-byte alignment of each base pointer, kernel and
config -- validates the operands, chooses the config (:func:`~.gemm_config.default_config`,
i.e. the tuned table) and builds a :class:`GemmPlan` (kernel variant, grid, constexprs, which
operands need staging). Later calls with the same layout look the plan up in a dict and
launch the already-compiled kernel through its low-level launcher (:class:`_Launch`), skipping
the checks, the config choice and Triton's argument binding. Only what depends on the
tensors' *addresses* is checked per call: the alignment (part of the key) and, when ``out`` is
given, that it does not overlap ``a`` or ``b``.

``kernel='auto'`` (the default) picks, per layout:

* the persistent TMA kernel when every operand satisfies TMA's rules (unit inner stride,
  16-byte aligned base and row stride): TMA zero-fills out-of-bounds reads and clips writes,
  so ragged M, N, K need nothing else;
* its split-K variant (:mod:`.gemm_splitk`) when the config says ``SPLIT_K > 1``;
* *staging* for an operand that breaks TMA's rules (a row length that is not a multiple of 8
  elements, e.g. K = 1500 or 3001, a transposed view, an unaligned base): it is copied once
  into a padded row-major buffer and the TMA kernel runs on that. A copy costs one read and
  one write of the operand -- a few percent of an M x N x K GEMM -- while the pointer kernel on
  an unaligned operand cannot vectorise its loads at all (it measured 2.9x cuBLAS);
* the pointer kernel before Hopper (no TMA).

The pointer kernel (``kernel='ptr'``) remains for explicit use: it reads any strides in place,
with no copy and no workspace, and it is the form the compiler's access analysis reads most
directly.
"""

from __future__ import annotations

import triton

from .. import dtypes, settings
from ..errors import LaunchError
from ..runtime import direct_launch
from ..runtime.direct_launch import ensure_tma_allocator
from .gemm import matmul_ptr_kernel, matmul_tma_persistent_kernel
from .gemm_config import (_SUPPORTED_DTYPES, REDUCE_BLOCK_M, REDUCE_BLOCK_N, REDUCE_NUM_WARPS,
                          GemmConfig, _short)
from .gemm_splitk import matmul_tma_splitk_kernel, splitk_reduce_kernel
from .gemm_table import default_config, gpu_key

_DEVICE_INFO: dict[int, tuple] = {}


def num_sms(device=None) -> int:
    """Multiprocessor count of a CUDA device (cached)."""
    import torch
    idx = torch.device(device if device is not None else "cuda").index
    return device_info(torch.cuda.current_device() if idx is None else idx)[0]


def device_info(index: int) -> tuple[int, tuple[int, int], str]:
    """``(SM count, capability, table key)`` of CUDA device ``index`` (cached): what the
    config choice needs to know about the GPU (:func:`~.gemm_table.gpu_key`)."""
    if index not in _DEVICE_INFO:
        import torch
        props = torch.cuda.get_device_properties(index)
        _DEVICE_INFO[index] = (props.multi_processor_count, (props.major, props.minor),
                               gpu_key(props.name))
    return _DEVICE_INFO[index]


def _max_offset(t) -> int:
    return sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()))


def _span(t) -> int:
    """Bytes from ``t``'s first to one past its last element (0 when empty)."""
    return 0 if t.numel() == 0 else (_max_offset(t) + 1) * t.element_size()


def _overlaps(x, y) -> bool:
    sx, sy, x0, y0 = _span(x), _span(y), x.data_ptr(), y.data_ptr()
    return bool(sx and sy) and x0 < y0 + sy and y0 < x0 + sx


def _kernel_choice(kernel) -> str:
    if kernel == "auto":
        return "auto"
    try:
        return _short(kernel)
    except (ValueError, TypeError):
        raise LaunchError(f"unknown GEMM kernel {kernel!r}; choose 'auto' (the default: TMA, "
                          f"split-K or staged operands as the layout needs), 'tma' or "
                          f"'ptr'") from None


def check_matrices(named) -> None:
    """Each ``(name, tensor)`` of ``named`` a 2-D torch.Tensor (:class:`LaunchError`)."""
    import torch
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 2:
            raise LaunchError(f"{name} must be 2-D, got shape {tuple(t.shape)}: reshape it to a "
                              f"matrix (e.g. x.flatten(0, -2) for a batch of rows)")


def check_ptr_offsets(named) -> None:
    """The pointer kernels' 32-bit element offsets and non-negative strides."""
    for name, t in named:
        if _max_offset(t) >= 2**31 or any(st < 0 for st in t.stride()):
            raise LaunchError(f"kernel='ptr' uses 32-bit element offsets and non-negative "
                              f"strides; {name} (shape {tuple(t.shape)}, strides "
                              f"{tuple(t.stride())}) exceeds that: use kernel='tma'")


def check_devices(a, named, what: str = "GEMM", cuda: bool = True) -> None:
    """Every ``(name, tensor)`` on ``a``'s device, and (``cuda``) that a CUDA device (checked
    last, so the other checks run on CPU tensors)."""
    for name, t in named:
        if t.device != a.device:
            raise LaunchError(f"{name} is on {t.device} but a is on {a.device}; put all operands "
                              f"on the same CUDA device")
    if cuda and a.device.type != "cuda":
        raise LaunchError(f"the {what} kernels run on a CUDA device; operands are on {a.device}: "
                          f"move them with .cuda()")


def check_operands(a, b, out=None, kernel: str = "tma", *, cuda: bool = True
                   ) -> tuple[int, int, int]:
    """Validate ``matmul``'s operands; return ``(M, N, K)``. Raises :class:`LaunchError`.

    ``kernel='auto'`` takes any layout (what TMA cannot read is staged); 'tma' and 'ptr' check
    their own layout rules. Runs entirely on the host (works on CPU tensors), device last, so
    the checks are testable without a GPU; ``cuda=False`` leaves out that the device is a GPU
    (plans built for CPU tensors).
    """
    k = _kernel_choice(kernel)
    tensors = (("a", a), ("b", b)) + ((("out", out),) if out is not None else ())
    check_matrices(tensors)
    if a.dtype != b.dtype:
        raise LaunchError(f"a and b must have the same dtype, got a: {a.dtype}, b: {b.dtype}; "
                          f"cast one of them (e.g. b.to({a.dtype}))")
    if (dtypes.canonical(a.dtype) if dtypes.is_known(a.dtype) else None) not in _SUPPORTED_DTYPES:
        raise LaunchError(f"a and b must be torch.bfloat16 or torch.float16, got {a.dtype}; "
                          f"cast them (e.g. a.to(torch.bfloat16))")
    M, K = a.shape
    K2, N = b.shape
    if K != K2:
        raise LaunchError(f"shape mismatch: a is {tuple(a.shape)} ([M, K]) and b is "
                          f"{tuple(b.shape)} ([K, N]); b.shape[0] must equal a.shape[1] = {K} "
                          f"(pass b, not b.T, if b is stored [N, K])")
    if out is not None:
        if tuple(out.shape) != (M, N):
            raise LaunchError(f"out must have shape (M, N) = {(M, N)}, got {tuple(out.shape)}")
        if out.dtype != a.dtype:
            raise LaunchError(f"out must have the operands' dtype {a.dtype}, got {out.dtype}")
        if out.numel() > 1 and any(st == 0 for s, st in zip(out.shape, out.stride()) if s > 1):
            raise LaunchError("out has a zero stride (an expanded view): tiles would race on the "
                              "same elements; pass a dense tensor")
        if _overlaps(out, a) or _overlaps(out, b):
            raise LaunchError("out overlaps a or b in memory; pass a separate output buffer")
    if M == 0 or N == 0 or K == 0:
        pass  # nothing is launched (empty result, or zeros for K == 0): layouts do not matter
    elif k == "tma":
        for name, t in tensors:
            if (problem := _tma_problem(name, t)) is not None:
                raise LaunchError(problem)
    elif k == "ptr":
        check_ptr_offsets(tensors)
    check_devices(a, tensors[1:], cuda=cuda)
    return M, N, K


def _tma_problem(name: str, t) -> str | None:
    """Why TMA cannot read/write ``t`` in place (None: it can): it needs a unit inner stride
    (or one column), a row stride that is a multiple of 16 bytes (or one row) and a 16-byte
    aligned base."""
    rows, cols = t.shape
    if t.stride(1) != 1 and cols > 1:
        return (f"kernel='tma' needs {name} row-major with unit inner stride, got strides "
                f"{tuple(t.stride())} (non-contiguous): pass {name}.contiguous(), or use "
                f"kernel='auto' (stages it) or kernel='ptr' which takes any strides")
    if rows > 1 and (t.stride(0) * t.element_size()) % 16:
        return (f"kernel='tma' needs {name}'s row stride to be a multiple of 16 bytes (TMA), "
                f"got {t.stride(0)} elements of {t.element_size()} bytes: pad the row length "
                f"to a multiple of {16 // t.element_size()}, or use kernel='auto' (stages "
                f"it) or kernel='ptr'")
    if t.data_ptr() % 16:
        return (f"kernel='tma' needs {name} 16-byte aligned (TMA), got address "
                f"{t.data_ptr():#x}: pass a fresh tensor or {name}.clone(), or "
                f"use kernel='auto' (stages it) or kernel='ptr'")
    return None


def _tma_row_stride(t) -> int:
    """The row stride to put in a TMA descriptor: a single-row tensor's stride is arbitrary in
    torch but must still be a multiple of 16 bytes for TMA, so use the padded row length."""
    if t.shape[0] > 1:
        return t.stride(0)
    return _padded(t.shape[1], t.element_size())


def _padded(cols: int, elem_bytes: int) -> int:
    """``cols`` rounded up to a whole number of 16-byte units."""
    per16 = 16 // elem_bytes
    return triton.cdiv(max(cols, 1), per16) * per16


def _stage(t, rows: int, cols: int, padded: int):
    """A row-major copy of ``t`` with ``padded`` elements per row (a multiple of 16 bytes), on a
    fresh (hence 16-byte aligned) allocation. The pad columns are never read: the TMA
    descriptor's shape is ``[rows, cols]`` and TMA zero-fills beyond it."""
    import torch
    buf = torch.empty((rows, padded), dtype=t.dtype, device=t.device)
    buf[:, :cols].copy_(t)
    return buf


# ----------------------------------------------------------------------------------------------
# Launching a compiled kernel cheaply
# ----------------------------------------------------------------------------------------------

#: ``SYNCOPATE_GEMM_DIRECT_LAUNCH=0`` keeps every launch on Triton's JIT path (``fn[grid](...)``)
#: instead of calling the compiled kernel's launcher directly after the first launch.
DIRECT_LAUNCH = settings.GEMM_DIRECT_LAUNCH.get()


class _Launch:
    """One kernel with a fixed grid and fixed constexprs, launched with its runtime arguments.

    The first call goes through Triton's JIT (``fn[grid](*args, **constexprs, **options)``),
    which binds and specialises the arguments, compiles or loads the kernel, launches it and
    returns the compiled kernel. Later calls hand the same arguments straight to that compiled
    kernel's launcher -- exactly the call the JIT itself makes at the end of ``run`` -- and so
    skip the binder and the cache-key computation (~10 us of Python per launch). That is valid
    because a plan is only reused for arguments of the same layout: the same integers, the same
    dtypes and the same pointer alignment, i.e. the same specialisation. Launch hooks (e.g. the
    proton profiler) are honoured; pre-run hooks, the interpreter and
    ``SYNCOPATE_GEMM_DIRECT_LAUNCH=0`` keep the JIT path.

    Where the kernel allows it, the launcher is bypassed too: one ``cuLaunchKernel`` with the
    parameters packed in ctypes slots (:mod:`syncopate.runtime.direct_launch`; its docstring
    says what it saves and when it steps back; ``SYNCOPATE_DIRECT_LAUNCH=0`` turns it off).
    """

    __slots__ = ("fn", "grid", "kwargs", "tail", "kernel", "direct")

    def __init__(self, fn, grid: tuple, constexprs: dict, options: dict):
        names = fn.arg_names
        n_rt = len(names) - len(constexprs)
        if set(names[n_rt:]) != set(constexprs):
            raise LaunchError(f"internal: {fn.__name__}'s constexprs {sorted(constexprs)} are not "
                              f"its trailing parameters {names[n_rt:]}")
        self.fn = fn
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.kwargs = dict(constexprs, **options)
        self.tail = tuple(constexprs[n] for n in names[n_rt:])
        self.kernel = None
        self.direct = None  # a DirectLaunch (runtime.direct_launch), False: none possible

    def warmup(self, *args) -> None:
        """Compile (or load from Triton's cache) without launching."""
        self.fn.warmup(*args, grid=self.grid, **self.kwargs)

    def __call__(self, *args) -> None:
        k = self.kernel
        if k is None:
            k = self.fn[self.grid](*args, **self.kwargs)
            if (DIRECT_LAUNCH and not getattr(self.fn, "pre_run_hooks", True)
                    and all(hasattr(k, x) for x in ("run", "function", "packed_metadata",
                                                     "launch_metadata"))):
                from triton import knobs
                from triton.runtime.driver import driver

                self.kernel = (k, knobs.runtime, driver.active.get_current_stream)
                self.direct = direct_launch.build(k, args + self.tail, fixed_scalars=False) or False
            return
        k, rt, get_stream = k
        import torch
        stream = get_stream(torch.cuda.current_device())
        full = args + self.tail
        enter = rt.launch_enter_hook
        dl = self.direct
        if dl and dl(self.grid, full, stream):
            return
        md = k.launch_metadata(self.grid, stream, *full) if enter is not None else None
        g = self.grid
        k.run(g[0], g[1], g[2], stream, k.function, k.packed_metadata, md, enter,
              rt.launch_exit_hook, *full)


# ----------------------------------------------------------------------------------------------
# Plans
# ----------------------------------------------------------------------------------------------


class GemmPlan:
    """How to compute ``c = a @ b`` for one operand layout: the kernel variant, its config, its
    grid(s) and constexprs, and which operands are staged (see the module docstring).

    Build with :func:`make_plan`; call ``plan(a, b, c)`` with tensors of the planned layout
    (``c`` allocated, ``[M, N]``). ``kind`` is 'tma', 'splitk' or 'ptr'.
    """

    def __init__(self, kind: str, M: int, N: int, K: int, dtype, config: GemmConfig,
                 num_sms: int, *, stage_a: bool = False, stage_b: bool = False,
                 stage_c: bool = False, row_strides=None):
        self.kind, self.M, self.N, self.K, self.dtype = kind, M, N, K, dtype
        self.config, self.num_sms = config, num_sms
        self.stage_a, self.stage_b, self.stage_c = stage_a, stage_b, stage_c
        self.Kp, self.Np = _padded(K, 2), _padded(N, 2)
        cfg = config
        tiles = triton.cdiv(M, cfg.BLOCK_M) * triton.cdiv(N, cfg.BLOCK_N)
        if kind == "ptr":
            self.launches = [_Launch(matmul_ptr_kernel, (max(1, tiles),), cfg.constexprs("ptr"),
                                     cfg.options())]
            return
        # TMA descriptors' row strides: staged operands get their padded buffers' strides
        sa, sb, sc = row_strides
        self.row_strides = (self.Kp if stage_a else sa, self.Np if stage_b else sb,
                            self.Np if stage_c else sc)
        if kind == "tma":
            self.launches = [_Launch(matmul_tma_persistent_kernel, (max(1, min(num_sms, tiles)),),
                                     cfg.constexprs("tma", num_sms), cfg.options())]
            return
        S = cfg.SPLIT_K
        self.m_pad = triton.cdiv(M, cfg.BLOCK_M) * cfg.BLOCK_M
        self.ws_cols = triton.cdiv(N, cfg.BLOCK_N) * cfg.BLOCK_N
        self.ws_rows = S * self.m_pad
        self.launches = [
            _Launch(matmul_tma_splitk_kernel, (max(1, min(num_sms, tiles * S)),),
                    cfg.constexprs("splitk", num_sms), cfg.options()),
            _Launch(splitk_reduce_kernel,
                    (triton.cdiv(M, REDUCE_BLOCK_M), triton.cdiv(N, REDUCE_BLOCK_N)),
                    dict(SPLIT_K=S, BLOCK_M=REDUCE_BLOCK_M, BLOCK_N=REDUCE_BLOCK_N),
                    dict(num_warps=REDUCE_NUM_WARPS, num_stages=1)),
        ]

    def __repr__(self) -> str:
        staged = [n for n, s in (("a", self.stage_a), ("b", self.stage_b), ("c", self.stage_c))
                  if s]
        return (f"GemmPlan({self.kind}, {self.M}x{self.N}x{self.K}, {self.config}"
                + (f", staged {'/'.join(staged)}" if staged else "") + ")")

    def args(self, a, b, c, ws=None) -> list[tuple]:
        """Each launch's runtime arguments for (already staged) operands."""
        M, N, K = self.M, self.N, self.K
        if self.kind == "ptr":
            return [(a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                     c.stride(0), c.stride(1))]
        sa, sb, sc = self.row_strides
        if self.kind == "tma":
            return [(a, b, c, M, N, K, sa, sb, sc)]
        return [(a, b, ws, M, N, K, sa, sb, self.ws_cols),
                (ws, c, M, N, self.m_pad, self.ws_cols, c.stride(0), c.stride(1))]

    def operands(self, a, b, c):
        """``(a, b, c, ws)`` as the kernels read them: staged copies, the padded C buffer, the
        split-K workspace (allocated per call from torch's stream-ordered caching allocator)."""
        import torch
        M, N, K = self.M, self.N, self.K
        if self.stage_a:
            a = _stage(a, M, K, self.Kp)
        if self.stage_b:
            b = _stage(b, K, N, self.Np)
        cc = torch.empty((M, self.Np), dtype=c.dtype, device=c.device) if self.stage_c else c
        ws = None
        if self.kind == "splitk":
            ws = torch.empty((self.ws_rows, self.ws_cols), dtype=torch.float32, device=c.device)
        return a, b, cc, ws

    def __call__(self, a, b, c):
        a2, b2, c2, ws = self.operands(a, b, c)
        for launch, args in zip(self.launches, self.args(a2, b2, c2, ws)):
            launch(*args)
        if self.stage_c:
            c.copy_(c2[:, :self.N])
        return c

    def warmup(self, a, b, c) -> None:
        """Compile every kernel of the plan without launching (for parallel precompiles)."""
        a2, b2, c2, ws = self.operands(a, b, c)
        for launch, args in zip(self.launches, self.args(a2, b2, c2, ws)):
            launch.warmup(*args)


def make_plan(a, b, out, *, kernel: str = "auto", config=None, num_sms: int | None = None,
              capability: tuple[int, int] | None = None, gpu: str | None = None) -> GemmPlan:
    """Check the operands and plan ``out = a @ b`` (``out`` allocated, ``[M, N]``).

    ``num_sms``, ``capability``, ``gpu`` describe the device; None asks CUDA (given, they let
    the plan be built for CPU tensors, e.g. under Triton's interpreter, where the final
    device check is skipped). Sizes must be positive (:func:`make_launcher` handles the empty
    cases)."""
    k = _kernel_choice(kernel)
    ask = num_sms is None or capability is None or gpu is None
    M, N, K = check_operands(a, b, out, k, cuda=ask)
    if ask:
        info = device_info(a.device.index if a.device.index is not None else 0)
        num_sms = num_sms or info[0]
        capability = capability or info[1]
        gpu = gpu or info[2]
    if k == "auto" and capability[0] < 9:
        k = "ptr"
        check_operands(a, b, out, "ptr", cuda=False)
    ops = (("a", a), ("b", b), ("out", out))
    return plan_layout(M, N, K, a.dtype, config, num_sms, kernel=k, gpu=gpu,
                       tma_ok=tuple(_tma_problem(n, t) is None for n, t in ops),
                       row_strides=tuple(_tma_row_stride(t) for _, t in ops))


def plan_layout(M: int, N: int, K: int, dtype, config, num_sms: int, *, kernel: str = "auto",
                gpu: str = "h200", tma_ok=(True, True, True), row_strides=None) -> GemmPlan:
    """The plan for checked operands described by their layout: ``tma_ok`` says which of a, b,
    c TMA can use in place, ``row_strides`` their descriptor row strides (default: row-major
    ``K``, ``N``, ``N``). ``kernel`` 'auto' means TMA here (the device has it)."""
    k = "tma" if kernel == "auto" else kernel
    cfg = (default_config(M, N, K, dtype, k, num_sms, fusable=False, gpu=gpu) if config is None
           else GemmConfig.of(config)).check(k)
    if k == "ptr":
        return GemmPlan("ptr", M, N, K, dtype, cfg, num_sms)
    split = cfg.SPLIT_K > 1
    if kernel == "tma" and not all(tma_ok):
        raise LaunchError("internal: kernel='tma' planned for operands TMA cannot read")
    return GemmPlan("splitk" if split else "tma", M, N, K, dtype, cfg, num_sms,
                    stage_a=not tma_ok[0], stage_b=not tma_ok[1],
                    stage_c=not split and not tma_ok[2],
                    row_strides=row_strides or (K, N, N))


_PLANS: dict = {}
_PLANS_MAX = 4096


def clear_plans() -> None:
    """Forget every cached plan (after the config table changed)."""
    _PLANS.clear()


def _plan_key(a, b, out, kernel, config):
    """The layout of a call: everything the plan depends on. None for input the fast path
    does not handle (the slow path then raises the typed error)."""
    try:
        if config is None or isinstance(config, GemmConfig):
            ck = config
        elif isinstance(config, dict):
            ck = tuple(sorted(config.items()))
        else:
            return None
        return (kernel, ck, a.shape, b.shape, a.stride(), b.stride(), a.dtype, b.dtype,
                a.device, b.device, a.data_ptr() & 15, b.data_ptr() & 15,
                None if out is None else (out.shape, out.stride(), out.dtype, out.device,
                                          out.data_ptr() & 15))
    except (AttributeError, TypeError):
        return None


def _empty_launch(M, N, K, out):
    if M == 0 or N == 0:
        return lambda: None
    return out.zero_


def _plan_for(a, b, out, kernel, config):
    """``(plan or None, M, N, K, spans)``: the cached plan of this layout, else a new one (None
    for an empty problem), and the byte spans of a, b, out (for the per-call overlap check).
    Raises LaunchError for bad input."""
    key = _plan_key(a, b, out, kernel, config)
    hit = _PLANS.get(key) if key is not None else None
    if hit is not None:
        return hit
    k = _kernel_choice(kernel)
    M, N, K = check_operands(a, b, out, k)
    if M == 0 or N == 0 or K == 0:
        plan = None
    else:
        import torch
        probe = out if out is not None else torch.empty((M, N), dtype=a.dtype, device=a.device)
        plan = make_plan(a, b, probe, kernel=k, config=config)
    spans = (_span(a), _span(b), _span(out) if out is not None else 0)
    hit = (plan, M, N, K, spans)
    if key is not None:
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[key] = hit
    return hit


def _run(plan, a, b, out):
    import torch
    idx = a.device.index
    if plan.kind != "ptr":
        ensure_tma_allocator()
    if idx is not None and torch.cuda.current_device() != idx:
        with torch.cuda.device(idx):
            return plan(a, b, out)
    return plan(a, b, out)


def _output(a, b, out, M: int, N: int, spans):
    """The result tensor of ``a @ b``: ``out`` after checking it overlaps neither operand
    (:class:`LaunchError`), or a new ``[M, N]`` tensor like ``a``. The overlap is
    :func:`_overlaps`, from the byte spans the plan cached."""
    if out is None:
        import torch
        return torch.empty((M, N), device=a.device, dtype=a.dtype)
    so = spans[2]
    if so:
        o = out.data_ptr()
        for t, st in ((a, spans[0]), (b, spans[1])):
            if st:
                p = t.data_ptr()
                if o < p + st and p < o + so:
                    raise LaunchError("out overlaps a or b in memory; pass a separate output "
                                      "buffer")
    return out


def make_launcher(a, b, out=None, *, kernel: str = "auto", config=None):
    """Validate once and return ``(launch, out)``: ``launch()`` enqueues ``out = a @ b`` on the
    current stream with no host-side checks (what the benchmark times). Same arguments and
    errors as :func:`matmul`."""
    plan, M, N, K, spans = _plan_for(a, b, out, kernel, config)
    out = _output(a, b, out, M, N, spans)
    if plan is None:
        return _empty_launch(M, N, K, out), out
    return (lambda: _run(plan, a, b, out)), out


def matmul(a, b, out=None, *, kernel: str = "auto", config=None):
    """``out = a @ b`` with a local Triton GEMM: ``a`` ``[M, K]``, ``b`` ``[K, N]``, bf16 or fp16,
    fp32 accumulation, result in the operands' dtype (written into ``out`` when given).

    ``kernel='auto'`` (the default) runs the persistent TMA kernel -- split along K when the
    problem has too few tiles, on staged copies of operands whose layout TMA cannot read --
    with the config the tuned table gives for this shape and GPU (see the module docstring
    and :mod:`.gemm_table`). ``'tma'`` is the TMA kernel on the operands as given (row-major,
    16-byte aligned rows: LaunchError otherwise); ``'ptr'`` the one-program-per-tile kernel
    (any strides). ``config``: a :class:`GemmConfig`, a dict of its fields or None for
    :func:`~.gemm_config.default_config`. Bad input raises :class:`LaunchError` before
    anything is launched.
    """
    plan, M, N, K, spans = _plan_for(a, b, out, kernel, config)
    out = _output(a, b, out, M, N, spans)
    if plan is None:
        _empty_launch(M, N, K, out)()
        return out
    return _run(plan, a, b, out)
