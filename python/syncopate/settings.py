"""Every ``SYNCOPATE_*`` environment variable, as one typed and documented :class:`Setting`
each (as ``triton.knobs`` does for Triton's), read through one accessor, :meth:`Setting.get`.

Why one module: the variables were read in 45 places with as many small parsers, so a typo
was an error in one place, the default in another and "on" in a third, and no list said
which variables exist. Here each has its name, type, default and meaning (docs/api.md,
"Settings", is generated from this module), a bad value is a typed error naming the variable
and what to write instead, and no other module reads ``os.environ`` for one (a test checks).

A value is read from the environment as it is at the call, so a variable changed at run time
(``monkeypatch.setenv``, :func:`scope`) takes effect at the next read; each raw value is
parsed once. Reads on the launch path cost dictionary lookups: on POSIX straight in
``os.environ``'s own dict, where ``os.environ.get`` would spend ~0.8 us per variable encoding
the key; :func:`watchdog`, read at every launch, is one lookup per variable and one in a memo,
and the compiled launch gate (``runtime/_fastlaunch.c``) compares the watchdog's raw values in
:data:`ENVIRON` itself. Stdlib and :mod:`syncopate.errors` only: ``import syncopate`` and the
CLI read settings before anything heavy is imported.
"""

from __future__ import annotations

import contextlib
import os

from .errors import CompileError, CoResidencyError, LaunchError, LoopbackError

#: ``os.environ``'s own dict on POSIX (bytes keys and values, updated by every assignment to
#: ``os.environ``): one lookup per read instead of ``os.environ.get``'s key encoding and Mapping
#: machinery; None elsewhere (reads then go through ``os.environ``)
ENVIRON = os.environ._data if (os.name == "posix"
                               and type(getattr(os.environ, "_data", None)) is dict) else None


class _Memo(dict):
    """Parsed values by raw value (a setting's: bytes on POSIX, str elsewhere, None when unset;
    the watchdog's: a pair of them): a read is one lookup; a raw value not seen before is
    parsed here by ``parse(raw)`` (a bad one raises, memoised nothing)."""

    __slots__ = ("parse",)

    def __init__(self, parse):
        super().__init__()
        self.parse = parse

    def __missing__(self, raw):
        value = self.parse(raw)
        if len(self) > 64:
            self.clear()
        self[raw] = value
        return value


class Setting:
    """One ``SYNCOPATE_*`` variable: ``var`` (its name), ``kind`` (what a value is, for the
    docs), ``default`` (the value when it is unset or empty), ``doc`` (what it does) and how a
    value is parsed; :meth:`get` is its value now."""

    __slots__ = ("var", "kind", "default", "doc", "key", "_parse", "_hint", "_error", "_memo")

    def __init__(self, var: str, kind: str, default, doc: str, parse, hint: str, *,
                 error=LaunchError):
        """``parse(text)``: the value of a non-empty (stripped) raw text, or ``ValueError``
        with what is wrong, to which the error adds ``hint`` (what to write instead);
        ``error``: the typed error a bad value raises."""
        self.var, self.kind, self.default, self.doc = var, kind, default, doc
        self.key = os.fsencode(var) if ENVIRON is not None else var
        self._parse, self._hint, self._error = parse, hint, error
        self._memo = _Memo(lambda raw: self.parse(os.fsdecode(raw) if type(raw) is bytes
                                                  else raw))

    def get(self, env=None):
        """The value in ``env`` (a mapping; default: the process environment now). Parsed once
        per distinct raw value of the process environment; a bad value raises the setting's
        typed error naming the variable, the value and what to write instead."""
        if env is None:
            return self._memo[ENVIRON.get(self.key) if ENVIRON is not None
                              else os.environ.get(self.var)]
        return self.parse(env.get(self.var))

    def parse(self, raw: str | None):
        """The value of the raw text ``raw`` (None: unset)."""
        if raw is None or not raw.strip():
            return self.default
        try:
            return self._parse(raw.strip())
        except ValueError as e:
            raise self._error(f"{self.var}={raw!r}: {e}; {self._hint}") from None

    def set(self, value) -> None:
        """Write ``value`` to the process environment (children inherit it): None unsets, a
        bool is ``1``/``0``, anything else its ``str``. Checked first: a bad value raises."""
        if value is None:
            os.environ.pop(self.var, None)
            return
        text = ("1" if value else "0") if isinstance(value, bool) else str(value)
        self.parse(text)
        os.environ[self.var] = text


def _flag(text: str) -> bool:
    t = text.lower()
    if t in ("1", "true", "on", "yes"):
        return True
    if t in ("0", "false", "off", "no"):
        return False
    raise ValueError("not a switch")


def _syncopate(text: str) -> bool | None:
    """``SYNCOPATE``: True for exactly ``1`` (also installs the compile hook), False for an
    off word, None (fused, no hook at import) for anything else."""
    if text == "1":
        return True
    return False if text.lower() in ("0", "false", "off", "no") else None


def _number(kind, minimum=0):
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise ValueError(f"not {'a whole number' if kind is int else 'a number'}") from None
        if v < minimum:
            raise ValueError("negative" if minimum == 0 else f"below {minimum}")
        return v
    return parse


def _choice(values: dict):
    """A parse taking the keys of ``values`` (any case) to their values."""
    def parse(text: str):
        try:
            return values[text.lower()]
        except KeyError:
            raise ValueError(f"choose one of {', '.join(values)}") from None
    return parse


def _loopback(text: str) -> int:
    w = _number(int)(text)
    if w == 1:
        raise ValueError("one virtual rank is not loopback")
    return w


SYNCOPATE = Setting(
    "SYNCOPATE", "switch", None,
    "`1`: install the Triton compile hook at `import syncopate` (fused compiles install it "
    "anyway); `0`/`false`/`off`/`no`: the ops take their unfused fallback (NCCL collective + "
    "the same local kernel) for A/B runs; `fuse` itself always fuses", _syncopate,
    "use 1 or 0")
TIMEOUT_S = Setting(
    "SYNCOPATE_TIMEOUT_S", "seconds", 10.0,
    "watchdog limit of every spin of a fused kernel or sync kernel; `0` disables the watchdog "
    "(docs/fused-abi.md)", _number(float),
    "set it to e.g. 10, or 0 to disable the watchdog")
TIMEOUT_ACTION = Setting(
    "SYNCOPATE_TIMEOUT_ACTION", "exit, trap", "exit",
    "what a spin that timed out does: `exit` records it and leaves (the host raises "
    "`CommTimeout`; results are invalid, the process group stays usable), `trap` traps (the "
    "CUDA context is lost)", _choice({"exit": "exit", "trap": "trap"}),
    "exit (the default) keeps the context usable")
SELF_ADVANCE = Setting(
    "SYNCOPATE_SELF_ADVANCE", "1, 0, auto", "auto",
    "default of `fuse(..., self_advance=)`: `auto` (fused kernels advance their own epoch word "
    "wherever the kernel allows it, no advance launch before them), `1` (required: a kernel "
    "that cannot is a CompileError), `0` (an advance kernel before every launch); "
    "docs/cuda-graphs.md", _choice({"1": "on", "0": "off", "auto": "auto"}),
    "use 1 (require the self-advancing epoch), 0 (the advance kernel) or auto (the default)")
EPOCH_ADVANCE = Setting(
    "SYNCOPATE_EPOCH_ADVANCE", "kernel", "kernel",
    "the eager epoch advance; `kernel` is the only one (`memop`, two stream memory writes, was "
    "withdrawn unverified: docs/cuda-graphs.md)", _choice({"kernel": "kernel"}),
    "the memop advance was withdrawn (not verified on a GPU, docs/cuda-graphs.md): unset it")
DIRECT_LAUNCH = Setting(
    "SYNCOPATE_DIRECT_LAUNCH", "switch", True,
    "from a layout's second launch, one `cuLaunchKernel` with its parameters packed once "
    "(7 us instead of 12-22 us per launch); off: every launch through Triton's launcher "
    "(docs/cuda-graphs.md)", _flag, "use 1 (the default) or 0")
FAST_LAUNCH = Setting(
    "SYNCOPATE_FAST_LAUNCH", "switch", True,
    "direct launches through a small C module built at first use (the ops' launch plans then "
    "enqueue staging copy and kernel in one call); off: through ctypes (docs/cuda-graphs.md)",
    _flag, "use 1 (the default) or 0")
GEMM_DIRECT_LAUNCH = Setting(
    "SYNCOPATE_GEMM_DIRECT_LAUNCH", "switch", True,
    "the local GEMMs (`syncopate.kernels.matmul`) call the compiled kernel's launcher from a "
    "plan's second launch; off: every launch through Triton's JIT. Read once, at import "
    "(docs/local-gemm.md)", _flag, "use 1 (the default) or 0")
TRACE = Setting(
    "SYNCOPATE_TRACE", "switch", False,
    "compile every `fuse` that does not say `trace=` with tracing: timestamped events per "
    "program into a device buffer (docs/tracing.md)", _flag, "use 1 or 0 (the default)")
TRACE_EVENTS = Setting(
    "SYNCOPATE_TRACE_EVENTS", "events", 262144,
    "capacity of a trace buffer (8 MiB by default); events past it are counted, not "
    "recorded (docs/tracing.md)", _number(int, 1), "give a positive number of events")
LOWERING = Setting(
    "SYNCOPATE_LOWERING", "auto, table, unrolled", "auto",
    "chunk-level lowering of every fused compile that asks for `auto`: `table` (code size "
    "independent of the chunk count) or `unrolled` (code per chunk); docs/fused-abi.md",
    _choice({"auto": "auto", "table": "table", "unrolled": "unrolled"}),
    "unset it for the compiler's choice", error=CompileError)
DUMP_IR = Setting(
    "SYNCOPATE_DUMP_IR", "folder", None,
    "write the IR after each pass of every fused compile to "
    "`DIR/<kernel>-<hash>/NN-<pass>.mlir`, numbered from 01 as `syncopate compile -o` "
    "numbers them", str, "give a folder")
TRACEBACK = Setting(
    "SYNCOPATE_TRACEBACK", "switch", False,
    "the command line shows the traceback of an unexpected error instead of its one-line "
    "summary (for debugging Syncopate itself)", _flag, "use 1 or 0 (the default)")
TORCH_FUSION = Setting(
    "SYNCOPATE_TORCH_FUSION", "switch", False,
    "enable the `torch.compile` fusion pass at `import syncopate.torch_ops` (docs/torch.md)",
    _flag, "use 1 to enable the syncopate fusion pass, 0 (or unset) to leave it off")
LOOPBACK_TIMEOUT_S = Setting(
    "SYNCOPATE_LOOPBACK_TIMEOUT_S", "seconds", 300.0,
    "loopback: how long a rank waits for the others at a collective before every rank raises "
    "`LoopbackError` (docs/loopback.md)", _number(float),
    "give a number of seconds", error=LoopbackError)
LOOPBACK_RESERVE_SMS = Setting(
    "SYNCOPATE_LOOPBACK_RESERVE_SMS", "SMs", 0,
    "loopback: SMs kept free for the runtime's sync kernels, never fewer than the W ranks (a "
    "diagnosis knob: smaller fused grids; docs/loopback.md)", _number(int),
    "give a number of SMs", error=CoResidencyError)
LOOPBACK_ALIGN = Setting(
    "SYNCOPATE_LOOPBACK_ALIGN", "switch", False,
    "loopback: the virtual ranks meet on the host at the start (compiled and loaded) and the "
    "end (enqueued) of every fused launch, so no allocation or module load of one rank comes "
    "between the ranks' launches of an epoch; the ops' bound launch paths step aside (a "
    "diagnosis knob; docs/loopback.md)",
    _flag, "use 1 or 0 (the default)")
GPU_LOOPBACK = Setting(
    "SYNCOPATE_GPU_LOOPBACK", "ranks", 0,
    "W >= 2 virtual ranks on one GPU for `tests/gpu` and `syncopate.bench --check` "
    "(docs/loopback.md); the timed benchmark refuses it; 0: one process per GPU", _loopback,
    "give the number of virtual ranks (>= 2) to run on one GPU, or 0 / unset for one process "
    "per GPU")
BENCH_CHECK_S = Setting(
    "SYNCOPATE_BENCH_CHECK_S", "seconds", 600.0,
    "`syncopate.bench --check --loopback W`: how long the ranks may take", _number(float),
    "give a number of seconds")
GEMM_TABLE = Setting(
    "SYNCOPATE_GEMM_TABLE", "file or off", None,
    "the local GEMM's config table file, used instead of the user's tuning cache and the "
    "shipped defaults; `off`: no table, the heuristic only (docs/local-gemm.md)", str,
    "give a table file")
ATTENTION_TABLE = Setting(
    "SYNCOPATE_ATTENTION_TABLE", "file or off", None,
    "the local attention kernels' config table file, used instead of the user's tuning cache "
    "and the shipped defaults; `off`: the default configs only (docs/attention.md)", str,
    "give a table file")
CACHE_DIR = Setting(
    "SYNCOPATE_CACHE_DIR", "folder", None,
    "the user's cache (the local GEMM's tuning results); default "
    "`$XDG_CACHE_HOME/syncopate`, else `~/.cache/syncopate`", str, "give a folder")
GIT_COMMIT = Setting(
    "SYNCOPATE_GIT_COMMIT", "commit", None,
    "the commit a benchmark result names (else the `.syncopate-commit` file at the repository "
    "root, else `git`)", str, "give a commit hash")

#: every setting, by variable name, in the order defined above
SETTINGS = {s.var: s for s in list(globals().values()) if isinstance(s, Setting)}

#: the watchdog's variables' keys in :data:`ENVIRON` (the compiled launch gate compares them)
WATCHDOG_KEYS = (TIMEOUT_S.key, TIMEOUT_ACTION.key)
#: their raw values -> :func:`watchdog`'s answer
_WATCHDOG_MEMO = _Memo(lambda raw: watchdog(os.environ))


def watchdog_raw() -> tuple | None:
    """The raw values of the watchdog's variables in :data:`ENVIRON` (None where there is no
    such dict): what the compiled launch gate compares on every call."""
    if ENVIRON is None:
        return None
    return (ENVIRON.get(WATCHDOG_KEYS[0]), ENVIRON.get(WATCHDOG_KEYS[1]))


def watchdog(env=None) -> tuple[int, str]:
    """``(timeout in ns, action)`` of the watchdog (:data:`TIMEOUT_S`, :data:`TIMEOUT_ACTION`)
    in ``env`` (default: the process environment now). Read at every launch and every enqueued
    wait: without ``env``, two dictionary lookups and one in a memo of the parsed pairs."""
    if env is None:
        if ENVIRON is not None:
            return _WATCHDOG_MEMO[ENVIRON.get(WATCHDOG_KEYS[0]), ENVIRON.get(WATCHDOG_KEYS[1])]
        return _WATCHDOG_MEMO[os.environ.get(TIMEOUT_S.var), os.environ.get(TIMEOUT_ACTION.var)]
    return int(round(TIMEOUT_S.get(env) * 1e9)), TIMEOUT_ACTION.get(env)


@contextlib.contextmanager
def scope(**values):
    """Settings for the duration of a ``with`` block, by field name
    (``scope(TIMEOUT_S=2, TRACE=True)``), written to the process environment as
    :meth:`Setting.set` writes them (so children and the compiled launch path see them) and
    restored on exit."""
    fields = {name: globals().get(name) for name in values}
    for name, s in fields.items():
        if not isinstance(s, Setting):
            raise TypeError(f"{name} is not a setting; the settings are "
                            f"{', '.join(n for n, v in globals().items() if isinstance(v, Setting))}")
    old = {s.var: os.environ.get(s.var) for s in fields.values()}
    try:
        for name, s in fields.items():
            s.set(values[name])
        yield
    finally:
        for var, v in old.items():
            if v is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = v
