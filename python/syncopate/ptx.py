"""PTX of the watchdog spin, shared by the compiler's in-kernel waits and the runtime's
host-driven sync kernels (one source, so the record they write is the same).

Free of Triton and torch imports: the passes and the runtime both use it.
"""

from __future__ import annotations

from . import abi

#: Byte offsets of the watchdog record words (docs/fused-abi.md).
DIAG_BYTES = {n: 4 * i for n, i in (("rank", abi.DIAG_RANK), ("flag", abi.DIAG_FLAG),
                                    ("value", abi.DIAG_VALUE), ("expected", abi.DIAG_EXPECTED),
                                    ("kind", abi.DIAG_KIND), ("program", abi.DIAG_PROGRAM),
                                    ("epoch", abi.DIAG_EPOCH))}
NANOSLEEP_NS = 64


def spin_asm(bits: int, trap: bool, *, one_poller: bool = False) -> str:
    """One inline-asm block: spin until ``(int)(*flag - target) >= 0`` with the watchdog.

    Operands: $0 result (1 reached, 0 timed out / left); $1 flag address (u64); $2 target;
    $3 record address (u64); $4 timeout ns (u64, 0 = none); $5 rank; $6 flag index; $7 kind;
    $8 epoch.

    ``ld.acquire.sys`` polls compare in serial-number arithmetic (flags grow without bound and
    may wrap).  On timeout an ``atom.acq_rel.sys.cas`` on the record's state word picks the one
    spin that writes rank/flag/value/expected/kind/program, then ``fence.sc.sys`` and the epoch
    word last (the host never decodes half a record); then it leaves, or traps.  Every 256 polls
    a spin reads the state word and leaves once another spin timed out.  Everything is in one
    block because Triton evaluates scalars in every thread: a Triton-level loop would let
    threads leave at different iterations, and a scalar atomic synchronises the CTA through
    shared memory, where divergent threads would deadlock.

    ``one_poller`` (the compiler's in-kernel waits): only thread 0 polls, with ``nanosleep``
    between polls, and every thread meets it at ``bar.sync 0``, which orders their later reads
    after its acquire (CUTLASS's semaphore pattern).  Hundreds of programs x 256 threads polling
    a flag a peer updates over NVLink otherwise flood the peer (measured: a GEMM + reduce-scatter
    80x slower).  Without it (the runtime's one-warp kernels) every thread polls; a warp's
    identical loads coalesce into one request."""
    t, sgn = f"b{bits}", f"s{bits}"
    val32 = "sy_v" if bits == 32 else "sy_v32"
    cvt = "" if bits == 32 else "cvt.u32.u64 sy_v32, sy_v;\ncvt.u32.u64 sy_e32, $2;\n"
    exp32 = "$2" if bits == 32 else "sy_e32"
    extra = "" if bits == 32 else ".reg .b32 sy_v32, sy_e32;\n"
    d = DIAG_BYTES
    head = ("mov.u32 sy_pid, %tid.x;\nsetp.ne.u32 sy_p, sy_pid, 0;\n@sy_p bra SY_DONE;\n"
            if one_poller else "")
    sleep = f"nanosleep.u32 {NANOSLEEP_NS};\n" if one_poller else ""
    tail = "bar.sync 0;\n" if one_poller else ""
    return f"""{{
.reg .pred sy_p;
.reg .{t} sy_v, sy_d;
.reg .b32 sy_cnt, sy_st, sy_one, sy_zero, sy_pid;
.reg .b64 sy_t0, sy_t1;
{extra}mov.u32 $0, 1;
{head}mov.u32 sy_cnt, 0;
mov.u32 sy_one, 1;
mov.u32 sy_zero, 0;
mov.u64 sy_t0, %globaltimer;
SY_SPIN:
ld.acquire.sys.global.{t} sy_v, [$1];
sub.{sgn} sy_d, sy_v, $2;
setp.ge.{sgn} sy_p, sy_d, 0;
@sy_p bra SY_DONE;
{sleep}setp.eq.u64 sy_p, $4, 0;
@sy_p bra SY_SPIN;
mov.u64 sy_t1, %globaltimer;
sub.u64 sy_t1, sy_t1, sy_t0;
setp.gt.u64 sy_p, sy_t1, $4;
@sy_p bra SY_EXPIRED;
add.u32 sy_cnt, sy_cnt, 1;
and.b32 sy_st, sy_cnt, 255;
setp.ne.u32 sy_p, sy_st, 0;
@sy_p bra SY_SPIN;
ld.relaxed.sys.global.b32 sy_st, [$3];
setp.ne.s32 sy_p, sy_st, 0;
@sy_p bra SY_LEFT;
bra SY_SPIN;
SY_EXPIRED:
atom.acq_rel.sys.global.cas.b32 sy_st, [$3], sy_zero, sy_one;
setp.ne.s32 sy_p, sy_st, 0;
@sy_p bra SY_LEFT;
{cvt}st.relaxed.sys.global.b32 [$3+{d['rank']}], $5;
st.relaxed.sys.global.b32 [$3+{d['flag']}], $6;
st.relaxed.sys.global.b32 [$3+{d['value']}], {val32};
st.relaxed.sys.global.b32 [$3+{d['expected']}], {exp32};
st.relaxed.sys.global.b32 [$3+{d['kind']}], $7;
mov.u32 sy_pid, %ctaid.x;
st.relaxed.sys.global.b32 [$3+{d['program']}], sy_pid;
fence.sc.sys;
st.release.sys.global.b32 [$3+{d['epoch']}], $8;
{"trap;" if trap else ""}
SY_LEFT:
mov.u32 $0, 0;
SY_DONE:
{tail}}}"""
