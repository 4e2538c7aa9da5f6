"""The cost model of Ulysses attention and of the variant that fuses the QKV projection with the
first all-to-all (issue 11, section 3): does that variant pay, and by how much of the layer?

Why a model and no kernel first: the variant is a GEMM + all-to-all fusion (the projection's
tiles signal the head chunks they complete, the chunks leave for their head owners while the
GEMM goes on), a new plan and a new op; it is worth building only if what it hides is not
already hidden.  The fused Ulysses kernel (:func:`syncopate.ops.ulysses_attention`) already
overlaps the first all-to-all with attention: a tile of head ``h`` waits only for head ``h``'s
chunks.  What the projection fusion can still win is the part the fused kernel exposes (the
first heads' arrival) and the staging copy of Q/K/V into the symmetric buffers.

The layer the share is taken of: QKV projection ``x [B, S/W, hidden] @ Wqkv`` + attention with
both all-to-alls + output projection ``[B, S/W, Hq D] @ Wo`` (no MLP: the smallest layer the
variant could be judged against, so a "does not pay" holds for any larger one).

Figures (H200, each with where it comes from):

* attention: our kernel's measured throughput (:data:`.attention_cost.ATTN_FLOPS`);
* GEMMs: :func:`.cost.gemm_time` (780 TF/s bf16, cuBLAS 8192^3) or reading/writing their
  operands at :data:`HBM_BPS`, whichever is slower;
* NCCL all-to-all: ``alpha + bytes_sent / bus_bw``, alpha and bus bandwidth of the shipped
  calibration's NCCL all-gather (``calibration/h200.json``: measured on 2 x H200; no all-to-all
  was calibrated, and the bus bandwidth is taken to hold at 4 and 8 ranks, where NVSwitch
  gives each GPU its own port);
* fused chunks: the SM peer-copy model (:func:`.cost._sm_bandwidth`: 70 GB/s with 4 comm
  programs, 190 with 16), ``alpha = 3 us`` per round; comm programs slow the compute by
  ``132 / (132 - programs)``;
* copies (the staging of Q/K/V into the symmetric buffers, the serial path's packing for
  ``all_to_all_single``): read + write at :data:`HBM_BPS`.

The timelines (one rank; every rank is alike):

* **fused** (the plan ``ulysses_all_to_all``): the chunks of local KV head ``j`` arrive in
  ``W - 1`` rounds (one source per round); query head ``i`` of the group is ready once its K,
  V and Q chunks of the last round are in.  Heads are computed in order (the grid's head axis),
  each as soon as it is ready; its output chunks leave when it is done and the rank's input
  chunks are out.
* **proj-fused** (the variant, optimistic: no wait or signal cost beyond ``alpha``): the
  projection GEMM computes the columns of one head (K, V, then the group's Q heads, for every
  destination) at a time; a head's chunks leave as its columns finish; the attention kernel
  starts after the GEMM (same stream) and waits per head, as the fused kernel does.
* **serial**: projection, NCCL all-to-alls of Q, K, V (packing copies), attention, NCCL
  all-to-all back, output projection.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..calibration import load
from ..errors import ScheduleError
from .attention_cost import PROGRAMS, attention_time
from .cost import _SM_ALPHA_S, _SYNC_S, H200_SMS, NCCL_AG_BUS_BPS, _sm_bandwidth, gemm_time

__all__ = ["HBM_BPS", "PAYS_SHARE", "UlyssesCosts", "format_decision_table", "ulysses_bytes",
           "ulysses_costs", "ulysses_decision_table", "DECISION_SHAPES", "DECISION_WORLD_SIZES"]

#: copy and memory-bound GEMM bandwidth: the same 4 TB/s assumption as
#: ``ops.gemm_ar_plan.HBM_BPS`` (H200 HBM3e peak 4.8 TB/s), not a measurement
HBM_BPS = 4.0e12
#: the variant "pays" when it saves more than this share of the fused layer
PAYS_SHARE = 0.05
#: the comm programs ``ulysses_attention`` uses unless told
OP_DEFAULT_PROGRAMS = 4
#: NCCL fixed cost per call when no calibration is found
_NCCL_ALPHA_S = 30e-6
#: issue 11's shapes: (total tokens, Hq, Hkv, D), and the world sizes the decision covers
DECISION_SHAPES = ((32768, 32, 8, 128), (65536, 32, 8, 128), (131072, 32, 8, 128))
DECISION_WORLD_SIZES = (2, 4, 8)


def ulysses_bytes(B: int, Hq: int, Hkv: int, S: int, D: int, world_size: int,
                  elem_bytes: int = 2) -> dict:
    """Bytes of one rank: ``q``/``kv``/``o`` its sequence block of Q, of K and V together, of
    O; ``in_sent`` and ``out_sent`` what leaves it in each all-to-all (all but its own share);
    ``head_unit`` one head's chunks from (or to) every other rank."""
    W = world_size
    Sl = S // W
    q = B * Hq * Sl * D * elem_bytes
    kv = 2 * B * Hkv * Sl * D * elem_bytes
    return {"q": q, "kv": kv, "o": q, "in_sent": (q + kv) * (W - 1) // W,
            "out_sent": q * (W - 1) // W, "head_unit": (W - 1) * B * Sl * D * elem_bytes}


def _gemm_s(m: int, n: int, k: int, elem_bytes: int = 2) -> float:
    return max(gemm_time(m, n, k), elem_bytes * (m * k + k * n + m * n) / HBM_BPS)


def _nccl(gpu: str | None, world_size: int) -> tuple[float, float, str]:
    """``(alpha_s, bus_bps, source)`` of an NCCL collective: the calibration's all-gather at
    the nearest calibrated world size (bus bandwidth = beta (w - 1) / w), else the defaults."""
    cal = load(gpu) if gpu else None
    if cal is not None:
        try:
            w, entry = cal.collective("all_gather", world_size)
        except KeyError:
            entry = None
        if entry is not None:
            bus = float(entry["beta_bps"]) * (w - 1) / w if w > 1 else float(entry["beta_bps"])
            return (float(entry["alpha_s"]), bus,
                    f"{gpu} calibration: NCCL all-gather at W={w} (alpha "
                    f"{float(entry['alpha_s']) * 1e6:.0f} us, bus {bus / 1e9:.0f} GB/s)")
    return (_NCCL_ALPHA_S, NCCL_AG_BUS_BPS,
            f"no {gpu or 'GPU'} calibration: NCCL alpha {_NCCL_ALPHA_S * 1e6:.0f} us, bus "
            f"{NCCL_AG_BUS_BPS / 1e9:.0f} GB/s")


def _heads(Hq: int, Hkv: int, W: int):
    """``(group j, index i in the group)`` of this rank's query heads in the grid's order."""
    R = Hq // Hkv
    return [(j, i) for j in range(Hkv // W) for i in range(R)]


def _attend(ready: list[float], start: float, per_head: float, out_free: float,
            out_unit_s: float) -> float:
    """End of the attention part: heads computed in order, each once ready (``ready`` in the
    same order), its outputs sent once it is done and the link is free."""
    t, o = start, out_free
    for r in ready:
        if r > t:
            t = r + _SYNC_S
        t += per_head
        o = max(o, t) + out_unit_s
    return max(t, o)


def _fused_attention_s(B, Hq, Hkv, S, D, W, causal, programs, eb,
                       head_major: bool = False) -> float:
    """The fused Ulysses kernel (both all-to-alls inside): the module docstring's timeline.
    ``head_major``: the plan's steps reordered head by head (each head's ``W - 1`` rounds
    before the next head's) instead of KV group by KV group: a query head is then ready after
    its K, V and own Q chunks, not after its whole group's last round."""
    by = ulysses_bytes(B, Hq, Hkv, S, D, W, eb)
    compute = attention_time(B, Hq // W, S, S, D, causal) * H200_SMS / (H200_SMS - programs)
    hq = Hq // W
    if W == 1:
        return compute
    bw = _sm_bandwidth(programs)
    R = Hq // Hkv
    unit_s = by["head_unit"] / bw
    if head_major:
        unit_s += (W - 1) * _SM_ALPHA_S
        ready = [(j * (2 + R) + 3 + i) * unit_s for j, i in _heads(Hq, Hkv, W)]
        in_done = (Hkv // W) * (2 + R) * unit_s
    else:
        group_s = (2 + R) * unit_s + (W - 1) * _SM_ALPHA_S
        ready = [j * group_s + ((W - 2) + (3 + i) / (2 + R)) / (W - 1) * group_s
                 for j, i in _heads(Hq, Hkv, W)]
        in_done = (Hkv // W) * group_s
    return _attend(ready, 0.0, compute / hq, in_done, by["head_unit"] / bw + _SM_ALPHA_S)


def _proj_fused_s(B, Hq, Hkv, S, D, W, causal, programs, eb, proj_s) -> float:
    """The QKV projection fused with the first all-to-all, then the attention (output
    all-to-all fused): the module docstring's timeline, from the projection's start."""
    by = ulysses_bytes(B, Hq, Hkv, S, D, W, eb)
    slow = H200_SMS / (H200_SMS - programs)
    gemm = proj_s * slow
    compute = attention_time(B, Hq // W, S, S, D, causal) * slow
    hq = Hq // W
    if W == 1:
        return gemm + compute
    bw = _sm_bandwidth(programs)
    unit_s = by["head_unit"] / bw + _SM_ALPHA_S
    R = Hq // Hkv
    units = (Hkv // W) * (2 + R)   # K, V, then the group's Q heads, per local KV head
    arrive, a = [], 0.0
    for u in range(units):
        a = max(a, (u + 1) / units * gemm) + unit_s
        arrive.append(a)
    ready = [arrive[j * (2 + R) + 2 + i] for j, i in _heads(Hq, Hkv, W)]
    return _attend(ready, gemm, compute / hq, max(gemm, arrive[-1]), unit_s)


@dataclass(frozen=True)
class UlyssesCosts:
    """Predicted seconds of one rank for one shape (module docstring: what each counts)."""

    B: int
    Hq: int
    Hkv: int
    S: int
    D: int
    world_size: int
    causal: bool
    hidden: int
    qkv_proj_s: float       #: x @ Wqkv, whole GPU
    out_proj_s: float       #: o @ Wo, whole GPU
    attention_s: float      #: the local attention alone, whole GPU
    nccl_a2a_s: float       #: the four NCCL all-to-alls (Q, K, V there, O back)
    serial_s: float         #: layer, serial path
    fused_s: float          #: layer, fused Ulysses at its best comm programs
    fused_programs: int
    fused_default_s: float  #: layer, fused Ulysses at the op's default comm programs
    head_major_s: float     #: layer, fused Ulysses with a head-major plan, best programs
    proj_s: float           #: layer, QKV projection fused with the first all-to-all
    proj_programs: int
    nccl_source: str

    @property
    def best_existing_s(self) -> float:
        """The faster of what exists: the serial path or fused Ulysses (best programs)."""
        return min(self.serial_s, self.fused_s)

    @property
    def gain_s(self) -> float:
        """What the projection variant saves against the best existing path."""
        return self.best_existing_s - self.proj_s

    @property
    def gain_share(self) -> float:
        return self.gain_s / self.best_existing_s

    @property
    def head_major_gain_share(self) -> float:
        """What the head-major plan (a template reorder, no new kernel) would save."""
        return (self.best_existing_s - min(self.head_major_s, self.best_existing_s)) \
            / self.best_existing_s

    @property
    def pays(self) -> bool:
        return self.gain_share > PAYS_SHARE

    def table(self) -> str:
        rows = [("serial (NCCL all-to-all + our kernel)", self.serial_s, ""),
                (f"fused Ulysses, {OP_DEFAULT_PROGRAMS} comm programs (op default)",
                 self.fused_default_s, ""),
                (f"fused Ulysses, {self.fused_programs} comm programs (best)", self.fused_s, ""),
                ("fused Ulysses, head-major plan (not built)", self.head_major_s,
                 f"saves {self.head_major_gain_share * 100:.1f}%"),
                (f"QKV projection fused with the all-to-all, {self.proj_programs} comm programs "
                 f"(not built)", self.proj_s, f"saves {self.gain_share * 100:.1f}%")]
        w = max(len(r[0]) for r in rows)
        out = [f"  {n:<{w}}  {t * 1e3:8.3f} ms  {note}".rstrip() for n, t, note in rows]
        out.append(f"  parts: QKV projection {self.qkv_proj_s * 1e3:.3f} ms, attention "
                   f"{self.attention_s * 1e3:.3f} ms, output projection "
                   f"{self.out_proj_s * 1e3:.3f} ms, NCCL all-to-alls {self.nccl_a2a_s * 1e3:.3f}"
                   f" ms ({self.nccl_source})")
        return "\n".join(out)


def ulysses_costs(B: int, Hq: int, Hkv: int, S: int, D: int, world_size: int,
                  causal: bool = False, *, hidden: int | None = None, elem_bytes: int = 2,
                  gpu: str | None = "h200") -> UlyssesCosts:
    """The layer's predicted time by path (module docstring), for ``S`` tokens over
    ``world_size`` ranks; ``hidden`` defaults to ``Hq * D``."""
    W = world_size
    problems = [f"{n} = {v} must be a positive integer" for n, v in
                (("B", B), ("Hq", Hq), ("Hkv", Hkv), ("S", S), ("D", D), ("world_size", W))
                if not isinstance(v, int) or v < 1]
    if not problems and (S % W or Hkv % W or Hq % Hkv):
        problems.append(f"Ulysses needs S ({S}) and Hkv ({Hkv}) divisible by the world size "
                        f"({W}) and Hq ({Hq}) a multiple of Hkv")
    if problems:
        raise ScheduleError([f"ulysses_costs: {p}" for p in problems])
    hidden = Hq * D if hidden is None else int(hidden)
    eb = elem_bytes
    by = ulysses_bytes(B, Hq, Hkv, S, D, W, eb)
    M = B * (S // W)
    proj = _gemm_s(M, (Hq + 2 * Hkv) * D, hidden, eb)
    oproj = _gemm_s(M, hidden, Hq * D, eb)
    attn = attention_time(B, Hq // W, S, S, D, causal)
    alpha, bus, source = _nccl(gpu, W)
    f = (W - 1) / W
    a2a = 0.0 if W == 1 else (4 * alpha + (by["q"] * f + by["kv"] * f + by["o"] * f) / bus)
    pack = 0.0 if W == 1 else 4 * (by["q"] + by["kv"] + by["o"]) / HBM_BPS  # pack + unpack
    serial = proj + a2a + pack + attn + oproj
    staging = 2 * (by["q"] + by["kv"]) / HBM_BPS       # q, k, v into the symmetric buffers
    result_copy = 2 * by["o"] / HBM_BPS                 # this rank's rows of O, cloned

    def fused(p, head_major=False):
        return proj + staging + result_copy + oproj \
            + _fused_attention_s(B, Hq, Hkv, S, D, W, causal, p, eb, head_major)

    def proj_fused(p):
        return _proj_fused_s(B, Hq, Hkv, S, D, W, causal, p, eb, proj) + result_copy + oproj
    fp = min(PROGRAMS, key=fused)
    pp = min(PROGRAMS, key=proj_fused)
    head_major = min(fused(p, True) for p in PROGRAMS)
    return UlyssesCosts(B, Hq, Hkv, S, D, W, bool(causal), hidden, proj, oproj, attn, a2a,
                        serial, fused(fp), fp, fused(OP_DEFAULT_PROGRAMS), head_major,
                        proj_fused(pp), pp, source)


def ulysses_decision_table(shapes=DECISION_SHAPES, world_sizes=DECISION_WORLD_SIZES,
                           gpu: str | None = "h200") -> list[UlyssesCosts]:
    """Every (shape, world size, causal) of the decision, in that order."""
    return [ulysses_costs(1, Hq, Hkv, S, D, W, causal, gpu=gpu)
            for S, Hq, Hkv, D in shapes for W in world_sizes for causal in (False, True)]


def format_decision_table(rows: list[UlyssesCosts]) -> str:
    """A Markdown table: the layer by path (ms; comm programs in brackets) and what the
    projection variant saves against the best existing path (serial or fused)."""
    head = ("| S | W | causal | attention | NCCL a2a | serial | fused (4 progs) | fused (best) "
            "| head-major | proj-fused (best) | proj saves |")
    lines = [head, "|" + " --- |" * 11]
    for r in rows:
        lines.append(f"| {r.S // 1024}k | {r.world_size} | {'yes' if r.causal else 'no'} | "
                     f"{r.attention_s * 1e3:.2f} | {r.nccl_a2a_s * 1e3:.2f} | "
                     f"{r.serial_s * 1e3:.2f} | {r.fused_default_s * 1e3:.2f} | "
                     f"{r.fused_s * 1e3:.2f} ({r.fused_programs}) | "
                     f"{r.head_major_s * 1e3:.2f} | "
                     f"{r.proj_s * 1e3:.2f} ({r.proj_programs}) | "
                     f"{r.gain_share * 100:.1f}% |")
    return "\n".join(lines)
