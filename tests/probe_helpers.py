"""The harness of issue 28's probes (``tests/test_probe_unseen2.py``, ``test_probe_unseen3.py``):
how a probe case is described, the schedules that could move one of its tensors, and what a
case and binding must give (emulated clean against the unfused kernel, or refused with a typed
error that names the kernel's line).

:class:`Case` says how to launch a kernel (shapes, arguments, grid) and which of its tensors a
schedule may move (:class:`Bind`: consumed, so all-gather / ring pass / all-to-all along each
dim; or produced, so reduce-scatter / all-reduce).  An expectation is :data:`CLEAN`,
``(error type name, regex of its message)``, or ``(LIMIT, why, the exception)``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import pytest

from syncopate.emulate import PerRank, emulate
from syncopate.errors import SyncopateError
from syncopate.schedule import all_gather, all_reduce, all_to_all, reduce_scatter, ring_pass


@dataclasses.dataclass(frozen=True)
class Bind:
    """A tensor of the kernel that a schedule may move: the parameter, the tensor's shape and
    the dims it may be split along; ``produced`` for an output (reduce-scatter, all-reduce)."""
    param: str
    shape: tuple
    dims: tuple = (0,)
    produced: bool = False


@dataclasses.dataclass(frozen=True)
class Case:
    fn: object
    cx: dict
    #: parameter -> Triton type (pointers and non-i32 scalars)
    types: dict
    #: W -> the kernel's arguments
    args: Callable
    grid: tuple
    binds: tuple


def _rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _per_rank(shape, seed, W):
    return PerRank([_rand(shape, seed * 10 + r) for r in range(W)])


def _zeros(shape, dtype=np.float32):
    return np.zeros(shape, dtype)


DT = {"*fp32": "fp32", "*bf16": "bf16", "*i8": "int8", "*fp8e4nv": "fp8e4m3", "*i32": "int32"}


def _gemm_case(fn, M=48, N=32, K=48, extra_types=None, extra_args=None, grid=None, cx=None,
               binds=None, b_shape=None, **strides):
    cx = cx or dict(BM=16, BN=16, BK=16)
    b_shape = b_shape or (K, N)

    def args(W):
        a = dict(a_ptr=_per_rank((M, K), 1, W), b_ptr=_per_rank(b_shape, 2, W),
                 c_ptr=_zeros((M, N)), M=M, N=N, K=K)
        a.update({k: v for k, v in strides.items()})
        a.update((extra_args or (lambda W: {}))(W))
        return {k: v for k, v in a.items() if k in fn.arg_names}
    types = dict(a_ptr="*fp32", b_ptr="*fp32", c_ptr="*fp32", **(extra_types or {}))
    grid = grid or ((M // cx["BM"]) * (N // cx["BN"]),)
    binds = binds or (Bind("a_ptr", (M, K), (0, 1)), Bind("c_ptr", (M, N), (0, 1), True))
    return Case(fn, cx, types, args, grid, binds)


def _rows_case(fn, cx, R=48, C=32, grid=None, xtype="*fp32", binds=None, extra=None,
               extra_types=None, n_rows_arg="M", out_shape=None):
    """A row kernel over ``x [R, C]`` writing ``y`` of the same shape (or ``out_shape``)."""
    def args(W):
        if xtype == "*i8":
            x = PerRank([np.random.default_rng(r).integers(-128, 128, (R, C)).astype(np.int8)
                         for r in range(W)])
        else:
            x = _per_rank((R, C), 1, W)
        a = dict(x_ptr=x, y_ptr=_zeros(out_shape or (R, C)), n_cols=C, stride=C)
        a[n_rows_arg] = R
        a.update((extra or (lambda W: {}))(W))
        return {k: v for k, v in a.items() if k in fn.arg_names}
    types = dict(x_ptr=xtype, y_ptr="*fp32", **(extra_types or {}))
    binds = binds or (Bind("x_ptr", (R, C), (0, 1)),
                      Bind("y_ptr", out_shape or (R, C), (0, 1), True))
    return Case(fn, cx, types, args, grid or (R,), binds)


# ------------------------------------------------------------------------- schedules

def schedules(bind: Bind, W: int, dtype: str, full: bool = True):
    """``(label, schedule)`` of every template that can move ``bind``'s tensor (``full``: every
    mode and split of 1-2; else one of each template)."""
    out = []
    nd = len(bind.shape)
    modes = [(m, k) for m in ("pull", "push") for k in (1, 2)]
    for d in bind.dims:
        if bind.produced:
            for mode, split in (modes if full else [("push", 1)]):
                out.append((f"reduce_scatter dim{d} {mode} split{split}",
                            reduce_scatter(bind.shape, dtype, W, dim=d, mode=mode, split=split)))
            out.append((f"all_reduce dim{d} push split1",
                        all_reduce(bind.shape, dtype, W, dim=d, mode="push")))
            continue
        for mode, split in (modes if full else [("pull", 2)]):
            out.append((f"all_gather dim{d} {mode} split{split}",
                        all_gather(bind.shape, dtype, W, dim=d, mode=mode, split=split)))
        out.append((f"ring_pass dim{d} push split1",
                    ring_pass(bind.shape, dtype, W, dim=d, mode="push")))
        if nd > 1:
            out.append((f"all_to_all split_dim{d}",
                        all_to_all(bind.shape, dtype, W, split_dim=d, concat_dim=(d + 1) % nd)))
    return out


def signature(case: Case) -> dict:
    return {n: ("constexpr" if n in case.cx else case.types.get(n, "i32"))
            for n in case.fn.arg_names}


def run(case: Case, bind: Bind, sched, backend: str, policies, launches: int = 2):
    """The emulation result, or raises the compiler's typed refusal."""
    W = sched.world_size
    return emulate(case.fn, signature=signature(case), constexprs=case.cx, schedule=sched,
                   operand=bind.param, grid=case.grid, args=case.args(W), backend=backend,
                   comm_programs=2, policies=policies, launches=launches, check=False)


# ------------------------------------------------------------------------- expectations

CLEAN = "clean"
#: the emulator cannot run it, or misreports it (a limitation of the emulator, not a compiler
#: fault): ``(LIMIT, why, the exception it fails with)``, an xfail that fails when it is lifted
LIMIT = "emulator limitation"

BACKENDS = ("sm", "ce", "nvshmem")
POLICIES = ("in-order", "reverse", "random:1")


def schedule_for(bind: Bind, dtype: str, i: int, backend: str):
    """One schedule of ``bind``'s tensor for item ``i`` of the slice: the dim, the mode, W and
    the template rotate with ``i`` (ce refuses an all-reduce and a pulled reduce-scatter: the
    copy engine would spin on a peer's PRODUCED flag; not on ce, then)."""
    W = 2 + i % 2
    d = bind.dims[i % len(bind.dims)]
    if bind.produced:
        if i % 2 and backend != "ce":
            return all_reduce(bind.shape, dtype, W, dim=d, mode="push")
        pull = i // 2 % 2 and backend != "ce"
        return reduce_scatter(bind.shape, dtype, W, dim=d, mode="pull" if pull else "push",
                              split=1 + i // 4 % 2)
    if i % 3 == 2:
        return ring_pass(bind.shape, dtype, W, dim=d, mode="push")
    return all_gather(bind.shape, dtype, W, dim=d, mode=("pull", "push")[i % 2],
                      split=1 + i // 2 % 2)


def items(cases: dict, expect: dict) -> list:
    """Every case and binding as a pytest param ``(name, param, i, backend)``: the backend
    rotates with ``i``; a LIMIT expectation is a strict xfail on its exception."""
    out, i = [], 0
    for name in sorted(cases):
        for bind in cases[name]().binds:
            backend = BACKENDS[i % 3]
            exp = expect[name][bind.param]
            marks = [pytest.mark.xfail(strict=True, reason=exp[1], raises=exp[2])] \
                if isinstance(exp, tuple) and exp[0] == LIMIT else []
            out.append(pytest.param(name, bind.param, i, backend, marks=marks,
                                    id=f"{name}-{bind.param}-{backend}"))
            i += 1
    return out


def check_expectations_cover(cases: dict, expect: dict) -> None:
    for name, make in cases.items():
        assert set(expect[name]) == {b.param for b in make().binds}, name
    assert set(expect) == set(cases)


def probe(case: Case, param: str, i: int, backend: str, exp, corpus_file: str) -> None:
    """Fuse ``case`` with the slice's schedule of ``param`` and check ``exp``: CLEAN (and a
    LIMIT, whose xfail expects it to fail) must emulate equal to the unfused kernel with no
    race or deadlock and some transfer; a refusal must be that typed error, its message
    matching, and a CompileError must name the kernel's line in ``corpus_file``."""
    bind = next(b for b in case.binds if b.param == param)
    sched = schedule_for(bind, DT[case.types[param]], i, backend)
    if exp == CLEAN or exp[0] == LIMIT:
        res = run(case, bind, sched, backend, POLICIES)
        assert res.ok, res.summary()
        assert not any(s["deadlocked"] for s in res.stats.values())
        assert sum(s["transfers"] for s in res.stats.values()) > 0
        return
    kind, phrase = exp[:2]
    with pytest.raises(SyncopateError, match=phrase) as e:
        run(case, bind, sched, backend, POLICIES)
    assert type(e.value).__name__ == kind, e.value
    if kind == "CompileError":  # names the kernel's line
        assert f"{corpus_file}:" in str(e.value), e.value
