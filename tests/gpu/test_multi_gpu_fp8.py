"""The FP8 ops on GPUs (issue 13, section 3): ``ag_gemm_fp8`` and ``gemm_rs_fp8`` against
``torch._scaled_mm`` on the collected inputs and bitwise against their unfused paths, three
launches per case with fresh inputs. >= 2 CUDA GPUs, or W virtual ranks on one GPU with
``SYNCOPATE_GPU_LOOPBACK=W`` (docs/loopback.md); skipped otherwise. The same constructions are
emulated on the CPU by tests/test_emulate_fp8.py. Sizes keep W x (tiles + comm programs)
co-resident in loopback with W = 4; K and N multiples of 16 (TMA, torch._scaled_mm)."""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.dirname(__file__))
from dist_harness import loopback_world, run_ranks  # noqa: E402

LOOPBACK = loopback_world()

if not torch.cuda.is_available():
    pytest.skip("needs 2 CUDA GPUs (or 1 with SYNCOPATE_GPU_LOOPBACK=2); this torch sees none. "
                "The CPU emulation of the FP8 ops is tests/test_emulate_fp8.py",
                allow_module_level=True)
if not LOOPBACK and torch.cuda.device_count() < 2:
    pytest.skip(f"needs 2 CUDA GPUs, found {torch.cuda.device_count()}; on one GPU run the same "
                f"tests in loopback: SYNCOPATE_GPU_LOOPBACK=2 (docs/loopback.md)",
                allow_module_level=True)
if torch.cuda.get_device_capability(0)[0] < 9:
    pytest.skip("the FP8 kernels need sm_90+ (FP8 wgmma)", allow_module_level=True)

import gpu_workers_fp8 as w  # noqa: E402

pytestmark = pytest.mark.gpu
W = LOOPBACK or int(os.environ.get("SYNCOPATE_GPU_WORLD", torch.cuda.device_count()))


def _assert_clean(results):
    problems = [p for r in results for p in r]
    assert not problems, "\n".join(problems)


def test_ag_gemm_fp8():
    # (backend, M/W, N, K, split, kernel, scales): ragged M/W, per-rank tensor-wise scales
    cases = []
    for backend in ("sm", "ce"):
        for mode in ("tensor", "row"):
            cases.append((backend, 200, 320, 144, 2, "tma", mode))
        cases.append((backend, 77, 160, 96, 1, "ptr", "row"))
    cases.append(("sm", 512, 1024, 512, 4, "tma", "row"))
    _assert_clean(run_ranks(w.ag_gemm_fp8_cases, cases, world_size=W, timeout=300))


def test_gemm_rs_fp8():
    # (backend[+reduce], M, N, K/W, split, kernel, scales); ce+epilogue needs M/W whole groups
    cases = []
    for backend in ("sm", "ce"):
        for mode in ("tensor", "row"):
            cases.append((backend, 400, 320, 144, 2, "tma", mode))
        cases.append((backend, 152, 160, 96, 1, "ptr", "tensor"))
    for mode in ("tensor", "row"):
        cases.append(("ce+epilogue", W * 1024, 320, 144, 2, "tma", mode))
    _assert_clean(run_ranks(w.gemm_rs_fp8_cases, cases, world_size=W, timeout=300))
