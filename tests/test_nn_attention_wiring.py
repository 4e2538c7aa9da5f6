"""The fused path of ``syncopate.ops.ring_attention_backward`` on the CPU: the op's own code --
its symmetric buffers, the staging of this rank's K/V into its rows, the dK/dV kernel's and the
dQ kernel's argument lists, the launch order (the dQ kernel loaded before the fused launch, run
after it on the gathered buffers), the copy of this rank's rows of the reduced dK/dV -- with the
real local kernels under Triton's interpreter and only the fused dK/dV kernel stood in for by
its effect (tests/nn_interp_worker.py: the gather, the unfused kernel per rank on the arguments
the op built, the sum into this rank's rows). Every rank's dq, dk, dv against autograd through
fp32 attention on the whole sequence. The fused kernel itself is the emulator's
(tests/test_emulate_attention_backward.py) and the GPU test's."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from interp_runner import run_interpreter_worker  # noqa: E402

WORKER = Path(__file__).with_name("nn_interp_worker.py")
CASES = [dict(name="W2-zigzag", W=2, causal=True, B=1, Hq=4, Hkv=2, Sl=32, D=64, seed=1),
         dict(name="W2-contiguous", W=2, causal=False, B=2, Hq=2, Hkv=1, Sl=32, D=64, seed=2),
         dict(name="W4-zigzag", W=4, causal=True, B=1, Hq=2, Hkv=1, Sl=32, D=64, seed=3)]
#: world size 1 with a gradient into lse (the fusable kernels on the op's own arguments): a
#: causal sequence of 65 tokens (a last block starting at 2 * (65 // 2), past two "segments")
#: runs in order
W1_CASES = [dict(name="W1-dlse-causal-ragged", W=1, causal=True, B=1, Hq=4, Hkv=2, Sl=65, D=64,
                 seed=4)]
#: normwise, bf16 inputs with P and dS rounded to bf16 (as the emulator test's)
TOL = 3e-2


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_interpreter_worker(WORKER, CASES + W1_CASES,
                                  tmp_path_factory.mktemp("nn_wiring"), timeout=900)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_fused_backward_wiring_gives_the_whole_sequence_gradients(results, case):
    r = results[case["name"]]
    assert "error" not in r, r["error"]
    for me in range(case["W"]):
        assert r[f"events{me}"] == ["preload dq", "before_staging", "fused dkdv", "local dq"]
        for name in ("dq", "dk", "dv"):
            assert r[f"{name}{me}_dtype"] == "torch.bfloat16"
            assert r[f"{name}{me}_rel"] <= TOL, (me, name, r[f"{name}{me}_rel"])


@pytest.mark.parametrize("case", W1_CASES, ids=[c["name"] for c in W1_CASES])
def test_world_size_one_with_a_gradient_into_lse(results, case):
    r = results[case["name"]]
    assert "error" not in r, r["error"]
    for name in ("dq", "dk", "dv"):
        assert r[f"{name}0_dtype"] == "torch.bfloat16"
        assert r[f"{name}0_rel"] <= TOL, (name, r[f"{name}0_rel"])
