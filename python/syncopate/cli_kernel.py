"""The kernel a command names: ``gemm-tma`` / ``gemm-ptr`` or a user's ``@triton.jit`` function.

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

import importlib
import importlib.util
import os
import sys
from pathlib import Path

#: short names of the project's GEMMs -> their kernel functions (configured from ``--shape``)
KERNEL_ALIASES = {"gemm-tma": "matmul_tma_persistent_kernel", "gemm-ptr": "matmul_ptr_kernel"}

FORMS = "gemm-tma, gemm-ptr, module:function or path/to/file.py:function"


def is_gemm(ref: str) -> bool:
    return ref in KERNEL_ALIASES or ref in KERNEL_ALIASES.values()


def gemm_name(ref: str) -> str:
    return KERNEL_ALIASES.get(ref, ref)


def load_user_kernel(ref: str):
    """The ``@triton.jit`` function ``ref`` names (``module:function`` or ``file.py:function``)."""
    from .errors import CompileError

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
    from .errors import CompileError

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
    from .errors import CompileError

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
    where = ""
    if isinstance(e, SyntaxError) and e.filename:
        where = f" ({e.filename}:{e.lineno})"
    first = str(e).splitlines()[0] if str(e) else ""
    return f"importing {what} failed: {type(e).__name__}: {first}{where}; fix the module"


def _jit_functions(module) -> list[str]:
    return sorted(n for n, v in vars(module).items()
                  if hasattr(v, "arg_names") and hasattr(v, "fn"))


def _where(module) -> str:
    path = getattr(module, "__file__", None)
    name = module.__name__.removeprefix("_syncopate_kernel_file_")
    return f"module {name!r}" + (f" ({path})" if path else "")
