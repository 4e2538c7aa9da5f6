"""The kernel a command names: ``gemm-tma`` / ``gemm-ptr`` or a user's ``@triton.jit`` function,
and the options that configure it (``--shape``/``--dtype``, ``--signature``/``--constexpr``,
``--comm-programs``), shared by ``syncopate compile`` and ``syncopate emulate``.

A user's kernel is ``module:function`` (a module on the import path) or
``path/to/file.py:function`` (a file, whose folder is put on the import path as ``python
path/to/file.py`` would).  The current folder is put on the import path first, as
``python -m`` does: a user running ``syncopate compile mymod:kernel`` from the kernel's own
folder expects ``mymod`` to be found, and the console script (unlike ``python -m``) does not
add the folder itself.  Every failure -- no such module, the module fails to import, no such
function, not a ``@triton.jit`` function -- is a :class:`~syncopate.errors.CompileError` that
names the kernel and says what to give instead.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from pathlib import Path

from . import backends
from .cli_args import constexpr, shape, signature
from .errors import CompileError, UsageError
from .runtime.residency import DeviceLimits, blocks_per_sm
from .schedule.cost import H200_SMS

#: short names of the project's GEMMs -> their kernel functions (configured from ``--shape``)
KERNEL_ALIASES = {"gemm-tma": "matmul_tma_persistent_kernel", "gemm-ptr": "matmul_ptr_kernel"}

FORMS = "gemm-tma, gemm-ptr, module:function or path/to/file.py:function"

#: element types of the project's GEMMs (``--dtype``)
GEMM_DTYPES = ("bf16", "fp16")


def is_gemm(ref: str) -> bool:
    return ref in KERNEL_ALIASES or ref in KERNEL_ALIASES.values()


def gemm_name(ref: str) -> str:
    return KERNEL_ALIASES.get(ref, ref)


def load_user_kernel(ref: str):
    """The ``@triton.jit`` function ``ref`` names (``module:function`` or ``file.py:function``)."""
    mod_ref, colon, fn_name = ref.rpartition(":")
    if not colon or not mod_ref or not fn_name:
        raise CompileError(f"unknown kernel {ref!r}: use {FORMS}")
    module = _import(mod_ref, ref)
    fn = getattr(module, fn_name, None)
    if fn is None:
        found = _jit_functions(module)
        raise CompileError(f"{_where(module)} has no function {fn_name!r}"
                           + (f"; its @triton.jit functions: {', '.join(found)}" if found
                              else "; it defines no @triton.jit function"))
    if not hasattr(fn, "arg_names") or not hasattr(fn, "fn"):
        raise CompileError(f"{ref} is not a @triton.jit function (it is a "
                           f"{type(fn).__name__}); decorate it with @triton.jit")
    return fn


def _import(mod_ref: str, ref: str):
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)  # what `python -m` does; the console script does not
    if mod_ref.endswith(".py") or os.sep in mod_ref:
        return _import_file(Path(mod_ref), ref)
    try:
        return importlib.import_module(mod_ref)
    except ModuleNotFoundError as e:
        if e.name and (mod_ref == e.name or mod_ref.startswith(e.name + ".")):
            raise CompileError(
                f"cannot import module {mod_ref!r} for kernel {ref}: it is not in the current "
                f"folder ({cwd}) nor on the import path; run from its folder, add its folder to "
                f"PYTHONPATH, or name the file: path/to/{mod_ref.split('.')[-1]}.py:"
                f"{ref.rpartition(':')[2]}") from None
        raise CompileError(_import_failure(mod_ref, e)) from None
    except Exception as e:  # noqa: BLE001 - the user's module raised while importing
        raise CompileError(_import_failure(mod_ref, e)) from None


def _import_file(path: Path, ref: str):
    if not path.is_file():
        raise CompileError(f"kernel {ref}: no file {str(path)!r}")
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        # what `python path/to/file.py` does: the file's own imports of its sibling modules
        # (examples/fuse_your_kernel.py imports _launch) work as they do when it runs as a script
        sys.path.insert(0, folder)
    # a private name: a file called json.py must not replace the json module
    name = f"_syncopate_kernel_file_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path.resolve())
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # @triton.jit reads the source through the module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - the user's file raised while importing
        del sys.modules[name]
        raise CompileError(_import_failure(str(path), e)) from None
    return module


def _import_failure(what: str, e: BaseException) -> str:
    where = f" ({e.filename}:{e.lineno})" if isinstance(e, SyntaxError) and e.filename else ""
    first = str(e).splitlines()[0] if str(e) else ""
    return f"importing {what} failed: {type(e).__name__}: {first}{where}; fix the module"


def _jit_functions(module) -> list[str]:
    return sorted(n for n, v in vars(module).items()
                  if hasattr(v, "arg_names") and hasattr(v, "fn"))


def _where(module) -> str:
    path = getattr(module, "__file__", None)
    name = module.__name__.removeprefix("_syncopate_kernel_file_")
    return f"module {name!r}" + (f" ({path})" if path else "")


# ------------------------------------------------------------ the options that configure it

def shape_text(text: str) -> str:
    """``--shape``: validated at parse time (malformed -> exit 2), kept as ``M,N,K`` text so
    that ``request.json`` records it as given (``syncopate emulate DIR`` reads it back)."""
    return ",".join(str(d) for d in shape(text))


shape_text.__name__ = "shape"


def add_kernel_options(p) -> None:
    """The options that configure the kernel, alike in ``syncopate compile`` and ``emulate``."""
    p.add_argument("--shape", type=shape_text, default=None,
                   help="M,N,K of the local GEMM (gemm-* kernels); 'x' separates as well")
    p.add_argument("--dtype", default=None, choices=GEMM_DTYPES,
                   help="element type of the GEMM (gemm-* kernels; default bf16)")
    p.add_argument("--signature", default=None, help="name=type,... (module:function kernels)")
    p.add_argument("--constexpr", action="append", default=[],
                   help="NAME=VALUE: an integer, a float, True/False or quoted text (repeatable)")


def load_kernel(ref: str, args):
    """``(fn, signature, constexprs, attrs, options)`` of the kernel ``ref`` names, from the
    command line's ``--shape``/``--dtype`` (GEMMs) or ``--signature``/``--constexpr``."""
    if is_gemm(ref):
        # the local kernels import Triton and torch: not at the CLI's start
        from .kernels import compile_args, compile_attrs, default_config, kernel_fn

        m, n, k = gemm_shape(ref, args, "its parameters come from --shape and --dtype")
        name = gemm_name(ref)
        args.dtype = args.dtype or "bf16"
        cfg = default_config(m, n, k, args.dtype, "tma" if "tma" in name else "ptr")
        sig, cx = compile_args(name, args.dtype, cfg)
        return kernel_fn(name), sig, cx, compile_attrs(name), cfg.options()
    if ":" not in ref:
        raise CompileError(f"unknown kernel {ref!r}: use {FORMS}")
    refuse_unused(ref, args, ("shape", "dtype"), "--shape and --dtype configure the gemm-* "
                   "kernels; give types with --signature, sizes with --constexpr (and --arg "
                   "for syncopate emulate)")
    fn = load_user_kernel(ref)
    if not args.signature:
        raise UsageError(f"kernel {ref} needs --signature name=type,... for its parameters "
                         f"({', '.join(fn.arg_names)})")
    sig = signature(args.signature)
    cx = {}
    for item in args.constexpr:
        name, value = constexpr(item)
        if name not in fn.arg_names:
            raise CompileError(f"--constexpr {item}: kernel {ref} has no parameter {name!r} "
                               f"(its parameters: {', '.join(fn.arg_names)})")
        cx[name] = value
        sig.setdefault(name, "constexpr")
    return fn, sig, cx, None, {}


def gemm_shape(ref: str, args, why: str) -> tuple[int, int, int]:
    """``M, N, K`` of a gemm-* kernel from ``--shape``, after refusing the options of a user's
    kernel (``why``: where the GEMM's parameters come from instead)."""
    refuse_unused(ref, args, ("signature", "constexpr", "grid", "arg"), why)
    if not args.shape:
        raise UsageError(f"{ref} needs --shape M,N,K (the local GEMM's shape)")
    try:
        dims = shape(args.shape)
    except argparse.ArgumentTypeError as e:
        raise UsageError(f"--shape {e}") from None
    if len(dims) != 3:
        raise UsageError(f"--shape {args.shape!r} has {len(dims)} size(s); {ref} (M,N,K of the "
                         f"local GEMM) takes 3")
    return dims


def refuse_unused(ref: str, args, options: tuple[str, ...], why: str) -> None:
    """Refuse options that do not apply to this kind of kernel: silently ignoring one (as
    ``--signature`` given to ``gemm-ptr`` once was) leaves the user believing it took effect."""
    given = [o for o in options if getattr(args, o, None)]
    if given:
        flags = ", ".join("--" + o for o in given)
        raise UsageError(f"{flags} {'does' if len(given) == 1 else 'do'} not apply to kernel "
                         f"{ref}: {why}")


def check_comm_programs(n: int | None, backend: str, *, num_warps: int = 4,
                        shared: int | None = None) -> None:
    """Refuse (:class:`UsageError`) more comm programs than an sm_90 GPU can run.

    The comm programs take the lowest program ids and spin on flags for as long as chunks
    move (``passes/partition_sms.py``): all of them must be resident at once, with room left
    for the compute programs whose tiles they wait for, or the kernel deadlocks (a
    reduce-scatter's comm programs wait for tiles that never get an SM).  No sm_90 GPU has
    more than 132 SMs (H100 SXM, H200), and an SM holds at most as many programs of this
    kernel as its threads and shared memory allow (``runtime/residency.py``; registers are
    not known before the kernel is loaded, so this is an upper bound: the check refuses
    only what cannot fit).  At launch the runtime checks the real device (loopback)."""
    be = backends.get(backend)
    if n is None:
        return
    if not be.has_comm_programs:
        raise UsageError(f"--comm-programs does not apply to backend {backend}: it has no comm "
                         f"programs (the copy engine moves the data)")
    limits = DeviceLimits(sms=H200_SMS)
    per_sm = blocks_per_sm(limits, num_warps=num_warps, n_regs=1, shared=shared or 0)
    most = limits.sms * per_sm - 1
    if n > most:
        raise UsageError(
            f"--comm-programs {n}: the comm programs spin until their chunks have moved, so "
            f"all of them must be resident at once with room left for the compute programs "
            f"they wait for; an sm_90 GPU holds at most {limits.sms} SMs x {per_sm} programs "
            f"of this kernel ({num_warps} warps"
            f"{'' if shared is None else f', {shared} B shared memory'}): give at most "
            f"{most} (the {backend} backend's default is {be.default_comm_programs})")
