"""Compiler bugs the fuzzer has found and that are not fixed yet.

Each entry is matched narrowly (the styles and the failure kind), so a *new* failure in the
same area still fails the run.  Every entry is in docs/fuzzing.md ("Found") with a replay
command and has an ``xfail(strict=True)`` test in tests/test_fuzz.py: when the compiler is
fixed, that test passes, pytest reports the unexpected pass, and the entry must be removed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Known:
    id: str
    summary: str
    replay_seed: int
    applies: Callable  # (case, verdict) -> bool


def _kinds(v) -> set[str]:
    return set(v.kind.split(",")) if v.kind else set()


def _reduction_dim_gathered(c) -> bool:
    """The communicated input is gathered along the dim the kernel reduces over in a loop
    (the row-sum's column loop, the GEMM's K loop)."""
    st = c.styles
    if st.get("role") != "in" or st.get("template") not in ("all_gather", "ring_pass"):
        return False
    return (st["body"], c.operand, st.get("dim")) in {
        ("rowsum", "x_ptr", 1), ("gemm", "a_ptr", 1), ("gemm", "b_ptr", 0)}


KNOWN: list[Known] = [
    Known("remap-reorders-reduction",
          "tile-remap renumbers the tiles of a loop that accumulates (a row-sum over column "
          "tiles, a GEMM's K loop) when the gathered dim is the reduced one, so each rank adds "
          "the tiles in chunk-arrival order: floating-point results differ from the unfused "
          "kernel by rounding (1 ulp in fp32); the emulator requires equal bits",
          75,
          lambda c, v: _reduction_dim_gathered(c) and _kinds(v) == {"mismatch"}
          and v.max_rel is not None and v.max_rel <= 2.0 ** -7),
    Known("all_to_all-undelivered-read",
          "a kernel that reads the whole tensor fused with an all_to_all: every rank ends with "
          "one block along concat_dim only, but the kernel reads all of it; the compiler emits "
          "no refusal and tiles read elements no chunk delivers (also in docs/emulator.md)",
          204,
          lambda c, v: c.styles.get("template") == "all_to_all"
          and _kinds(v) <= {"read-before-arrival", "mismatch"}),
    Known("all_reduce-push-unwaited",
          "all_reduce on sm/nvshmem: the all-gather phase is pushed by the owner and nothing on "
          "the receiving rank waits for it, so a launch returns before its output is complete "
          "(also in docs/emulator.md)",
          624,
          lambda c, v: c.styles.get("template") == "all_reduce"
          and c.backend in ("sm", "nvshmem")
          and _kinds(v) <= {"read-before-arrival", "write-after-read", "mismatch",
                            "early-signal"}),
]


def match_known(case, verdict) -> str | None:
    """The id of the known bug this failure is, or None."""
    for k in KNOWN:
        if k.applies(case, verdict):
            return k.id
    return None
