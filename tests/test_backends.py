"""The backend registry (python/syncopate/backends, docs/backends.md): each backend is a frozen
:class:`BackendSpec` that the ABI, the pipeline, the schedule's execution and cost models, the
emulator and the runtime read; its launcher lives with the runtime. No backend name is compared
as a string outside ``backends/`` (an AST scan), and a new backend is a spec, a registry line,
a launcher line and its lowering pass. CPU only."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from syncopate import abi, backends
from syncopate.backends import spec as spec_mod
from syncopate.errors import CompileError, LaunchError, ScheduleError

ROOT = Path(__file__).resolve().parents[1]


def test_registry_lists_the_backends_and_abi_derives_from_it():
    assert backends.names() == ("sm", "ce", "nvshmem")
    assert backends.specs() == tuple(backends.get(n) for n in backends.names())
    assert backends.get("ce") is backends.get(backends.get("ce"))
    with pytest.raises(CompileError, match="unknown backend 'tpu'; choose one of sm, ce, nvshmem"):
        backends.get("tpu")
    with pytest.raises(LaunchError, match="x: unknown backend"):
        backends.get("tpu", LaunchError, context="x: ")
    with pytest.raises(ValueError, match="taken"):
        backends.register(backends.get("sm"))


def test_each_backend_owns_its_abi_facts():
    sm, ce, nv = (backends.get(n) for n in ("sm", "ce", "nvshmem"))
    assert (sm.flag_type, ce.flag_type, nv.flag_type) == ("*i32", "*i32", "*i64")
    assert dict(abi.extra_params("nvshmem"))["syn_flags"] == "*i64"
    assert sm.launch_grid((10, 2, 1), 4) == (14, 2, 1) and ce.launch_grid((10, 2, 1), 4) == (10, 2, 1)
    assert (sm.chunk_writers(4), ce.chunk_writers(4), sm.chunk_writers(0)) == (4, 1, 1)
    assert (sm.signals_entry, ce.signals_entry, nv.signals_entry) == (True, False, True)
    assert [b.sum_on_destination for b in (sm, ce, nv)] == [True, False, True]
    assert [b.side_stream for b in (sm, ce, nv)] == [False, True, False]
    assert [b.default_comm_programs for b in (sm, ce, nv)] == [16, 0, 16]
    assert dict(ce.op_modes) == {"ag": "pull", "rs": "push"}
    with pytest.raises(TypeError):
        ce.op_modes["ag"] = "push"  # frozen: a spec is shared by every caller
    with pytest.raises(dataclasses.FrozenInstanceError):
        ce.flag_dtype = "int64"


def test_every_spec_is_consistent_and_has_a_launcher():
    """Every registered backend: one way of moving chunks, a flag type, a link for the cost
    model, a host launcher."""
    from syncopate.runtime import launchers
    from syncopate.schedule import cost
    for be in backends.specs():
        assert be.has_comm_programs != be.side_stream, be
        assert be.flag_type in ("*i32", "*i64")
        assert cost.link_model(be, 16).time(1 << 20) > 0
        assert type(launchers.launcher(be, fk=None)).__name__.endswith("Launcher")


@pytest.mark.parametrize("bad, why", [
    (dict(flag_dtype="int16"), "flag_dtype"),
    (dict(has_comm_programs=False), "exactly one of"),
    (dict(side_stream=True), "exactly one of"),
    (dict(reduce_modes=("comm", "atomic")), "reduce_modes"),
    (dict(has_comm_programs=False, side_stream=True), "link_beta_bps"),
])
def test_a_spec_that_describes_no_backend_is_refused(bad, why):
    with pytest.raises(ValueError, match=why):
        backends.BackendSpec(**{"name": "x", "has_comm_programs": True, **bad})


def test_pipeline_asks_the_backend_for_its_tail():
    from syncopate_mlir.pipeline import pass_names
    # structurize-returns first (the later passes take the kernel as one block)
    head = ["structurize-returns", "check-accesses", "append-abi-params", "tile-remap",
            "insert-waits", "insert-signals"]
    # insert-trace (a no-op unless trace=True), then load-epoch (ABI 3: the epoch is read from
    # device memory) and self-advance-epoch (a no-op when self_advance is off) close every
    # pipeline
    tail = ["insert-trace", "load-epoch", "self-advance-epoch"]
    assert pass_names("sm") == head + ["partition-sms", "resolve-chunks", "lower-sm"] + tail
    assert pass_names("nvshmem") == (head + ["partition-sms", "resolve-chunks", "lower-nvshmem"]
                                     + tail)
    assert pass_names("ce", "epilogue") == head + ["insert-epilogue-reduce", "resolve-chunks",
                                                   "lower-ce"] + tail


def test_option_checks_and_defaults():
    sm, ce = backends.get("sm"), backends.get("ce")
    assert (sm.check_options(), sm.check_options(comm_programs=3), ce.check_options(comm_programs=9)) \
        == (16, 3, 0)
    with pytest.raises(CompileError, match="needs comm_programs >= 1"):
        sm.check_options(comm_programs=0)
    with pytest.raises(CompileError, match="reduce='epilogue' is implemented for backend='ce'"):
        sm.check_options(reduce="epilogue")
    with pytest.raises(CompileError, match="choose 'comm' or 'epilogue'"):
        ce.check_options(reduce="sum")
    with pytest.raises(CompileError, match="ce backend withholds at run time"):
        ce.check_options(withhold_chunks=(1,))
    assert sm.check_options(withhold_chunks=(1,)) == 16


def test_nvshmem_links_its_device_library(monkeypatch, tmp_path):
    (tmp_path / "libnvshmem_device.bc").write_bytes(b"")
    monkeypatch.setenv("NVSHMEM_LIB_DIR", str(tmp_path))
    opts = backends.get("nvshmem").compile_options({"num_warps": 4})
    assert opts == {"num_warps": 4,
                    "extern_libs": {"libnvshmem_device": str(tmp_path / "libnvshmem_device.bc")}}
    assert backends.get("sm").compile_options({"num_warps": 4}) == {"num_warps": 4}


@pytest.fixture
def toy_backend():
    """A TMA-copy backend (say), registered as docs/backends.md says -- a spec and a registry
    line -- and removed again after the test."""
    toy = backends.register(backends.BackendSpec(
        name="tma", has_comm_programs=True, default_comm_programs=4, sum_on_destination=True,
        pre_resolve_passes=("partition-sms",), link_alpha_s=2e-6))
    yield toy
    del spec_mod._REGISTRY[toy.name]


def test_a_new_backend_is_a_spec_and_a_registry_line(toy_backend):
    """What docs/backends.md promises: a backend registered next to the others is known to the
    ABI's helpers, the pipeline, the option checks, who executes a chunk, the verifier, the
    cost model and the emulator without touching them; the runtime refuses it until its
    launcher is registered."""
    from syncopate.emulate.comm import World
    from syncopate.runtime import launchers
    from syncopate.runtime.launchers.sm import SMLauncher
    from syncopate.schedule import cost, reduce_scatter, verify
    from syncopate.schedule.execution import executor
    from syncopate_mlir.pipeline import pass_names

    assert "tma" in backends.names()
    assert abi.extra_params("tma")[0] == ("syn_flags", "*i32")
    assert abi.FusedABI("tma", 2, 4, 4, "push").grid((8,)) == (12, 1, 1)
    assert pass_names("tma")[-5:] == ["resolve-chunks", "lower-tma", "insert-trace",
                                      "load-epoch", "self-advance-epoch"]
    assert backends.get("tma").check_options() == 4
    with pytest.raises(CompileError, match="backend='ce'; use reduce='comm' with backend='tma'"):
        backends.get("tma").check_options(reduce="epilogue")

    sched = reduce_scatter((64, 32), "bf16", 2, split=2, mode="push")
    sums = [c for c in sched.chunks if c.reduce == "sum"]
    assert sums and all(executor(c, "tma") == c.dst != executor(c, "ce") for c in sums)
    verify(sched)
    assert cost.link_model("tma", 16).alpha_s == 2e-6
    est = cost.estimate(sched, "tma", 4, compute_time_s=1e-4)
    assert est.backend == "tma" and "4 comm programs" in est.summary()
    assert cost.choose_gemm_plan("rs", 256, 256, 256, 2, backend="tma",
                                 programs=(4,))["comm_programs"] == 4
    assert World(sched, "tma", 3, {}, checker=None).writers == 3

    with pytest.raises(LaunchError, match="backend 'tma' has no host launcher"):
        launchers.launcher(toy_backend, fk=None)
    launchers.register(toy_backend, SMLauncher)
    try:
        assert isinstance(launchers.launcher(toy_backend, fk=None), SMLauncher)
    finally:
        del launchers._LAUNCHERS[toy_backend]


def test_the_schedule_package_refuses_an_unknown_backend():
    from syncopate.schedule import all_gather, cost
    from syncopate.schedule.execution import executor
    c = all_gather((8, 8), "bf16", 2).chunks[0]
    for call in (lambda: executor(c, "tcp"), lambda: cost.link_model("tcp")):
        with pytest.raises(ScheduleError, match="unknown backend 'tcp'; choose one of sm, ce"):
            call()


def test_importing_the_abi_and_the_registry_stays_light():
    """The ABI and the backend specs are layer 0 (the launchers are the runtime's, layer 3)."""
    import subprocess
    import sys
    code = ("import sys, syncopate.abi, syncopate.backends; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'triton', 'xdsl'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_specs_import_only_the_standard_library_and_errors():
    """backends/ is layer 0: its imports are the standard library, itself and syncopate.errors."""
    import sys
    allowed = set(sys.stdlib_module_names) | {"__future__", "nvidia"}  # nvidia: optional probe
    for path in sorted((ROOT / "python/syncopate/backends").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1 or node.module == "errors", (path.name, node.module)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                assert all(m.split(".")[0] in allowed for m in mods), (path.name, mods)


def test_sm_and_nvshmem_launchers(monkeypatch):
    """sm: ENTRY from the host only when the kernel does not publish it, then the kernel on the
    given stream; nvshmem: the same after NVSHMEM's module init, once per configuration."""
    pytest.importorskip("triton")
    from types import SimpleNamespace

    from syncopate.runtime import launchers
    from syncopate.runtime import sync_kernels as sk
    from syncopate.runtime.launchers import nvshmem
    seen = []
    monkeypatch.setattr(sk, "signal_entry", lambda peers, idx, e, W, flag64, stream:
                        seen.append(("entry", peers, idx, e, W, flag64)))
    monkeypatch.setattr(nvshmem, "nvshmem_module_init", lambda ck: seen.append(("init",)))

    class Ck:
        metadata = SimpleNamespace()

        def __getitem__(self, grid):
            return lambda *args, stream: seen.append(("kernel", grid, args, stream))
    fk = SimpleNamespace(comm=SimpleNamespace(rank=1, world_size=2), test_skip_entry=False)
    S = SimpleNamespace(cuda_stream=7)
    for name, signals in (("sm", False), ("sm", True), ("nvshmem", False)):
        a = abi.FusedABI(name, 2, 4, 4, "push", signals_entry=signals)
        cfg = SimpleNamespace(abi=a, compiled=SimpleNamespace(kernel=Ck()), host={})
        launcher = launchers.launcher(backends.get(name), fk)
        for e in (1, 2):
            launcher.launch(cfg, (12, 1, 1), ["x"], S, e, "peers", None)
    assert seen == [("entry", "peers", 5, 1, 2, False), ("kernel", (12, 1, 1), ("x",), 7),
                    ("entry", "peers", 5, 2, 2, False), ("kernel", (12, 1, 1), ("x",), 7),
                    ("kernel", (12, 1, 1), ("x",), 7), ("kernel", (12, 1, 1), ("x",), 7),
                    ("entry", "peers", 5, 1, 2, True), ("init",), ("kernel", (12, 1, 1), ("x",), 7),
                    ("entry", "peers", 5, 2, 2, True), ("kernel", (12, 1, 1), ("x",), 7)]


# -- no backend name compared as a string outside backends/ --------------------------------

#: comparisons left in the op and bench code, which the op-specs work (issue 29) rewrites:
#: a file may keep at most this many; any other file none
_LEFT_TO_THE_OPS = {
    "python/syncopate/ops/gemm_ar.py": 2,
    "python/syncopate/ops/gemm_ar_plan.py": 1,
    "python/syncopate/ops/moe_dispatch_gemm.py": 1,
    "python/syncopate/ops/moe_gemm_combine.py": 1,
    "python/syncopate/ops/ulysses.py": 1,
    "python/syncopate/bench/fused.py": 3,
    "python/syncopate/bench/compile_time.py": 1,
    "python/syncopate/bench/rows.py": 2,
    "python/syncopate/bench/__main__.py": 2,
}


def backend_name_comparisons(source: str) -> list[tuple[int, str]]:
    """``(line, code)`` of every comparison of a value with a backend name in ``source``:
    ``x == "ce"``, ``x in ("sm", "nvshmem")``, ``x in NAMES`` where ``NAMES`` is a
    module-level collection of backend names only, ``match x: case "sm":``, and
    ``{"sm": ..., "ce": ...}[x]``. A collection counts when every string in it is a backend
    name (``("cuda", "nvshmem")``, the symmetric heaps, does not)."""
    names = set(backends.names())
    tree = ast.parse(source)

    def named(n) -> bool:
        return isinstance(n, ast.Constant) and n.value in names

    def of_names(elts) -> bool:
        strs = [e for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return bool(strs) and all(named(e) for e in strs)

    collections = {t.id for node in tree.body if isinstance(node, ast.Assign)
                   for t in node.targets if isinstance(t, ast.Name)
                   and ((isinstance(node.value, (ast.Tuple, ast.List, ast.Set))
                         and of_names(node.value.elts))
                        or (isinstance(node.value, ast.Dict) and of_names(node.value.keys)))}

    def names_like(n) -> bool:
        if named(n):
            return True
        if isinstance(n, (ast.Tuple, ast.List, ast.Set)):
            return of_names(n.elts)
        return isinstance(n, ast.Name) and n.id in collections

    out = []
    for node in ast.walk(tree):
        hit = (isinstance(node, ast.Compare) and any(names_like(x) for x in
                                                     [node.left, *node.comparators])
               or isinstance(node, ast.MatchValue) and named(node.value)
               or isinstance(node, ast.Subscript) and (
                   isinstance(node.value, ast.Dict) and of_names(node.value.keys)))
        if hit:
            out.append((node.lineno, ast.unparse(node)))
    return out


@pytest.mark.parametrize("code", [
    "x == 'ce'", "'nvshmem' != b.backend", "b in ('sm', 'nvshmem')", "b not in {'sm'}",
    "N = ('sm', 'ce')\nb in N", "M = {'sm': 1, 'ce': 0}\nb in M",
    "match b:\n    case 'sm':\n        pass", "{'sm': 1, 'ce': 2}[b]"])
def test_the_scan_finds_every_form(code):
    assert len(backend_name_comparisons(code)) == 1


@pytest.mark.parametrize("code", [
    "b in ('cuda', 'nvshmem')", "p.add_argument('--backend', choices=backends.names())",
    "x == 'cuda'", "backends.get(b).has_comm_programs", "f(b, 'sm')"])
def test_the_scan_leaves_other_strings_alone(code):
    assert backend_name_comparisons(code) == []


def test_no_backend_name_is_compared_outside_the_backends():
    found: dict[str, list] = {}
    for top in ("python", "passes", "syncopate_mlir"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("python/syncopate/backends/"):
                continue
            hits = backend_name_comparisons(path.read_text())
            if len(hits) > _LEFT_TO_THE_OPS.get(rel, 0):
                found[rel] = hits
    assert not found, ("backend names compared as strings (read the BackendSpec instead: "
                       f"docs/backends.md): {found}")
