"""The Ulysses cost model (schedule/ulysses_cost.py): its byte counts, the parts each path adds
up, how the predictions move with the link and the sequence, the decision table that
docs/ulysses.md quotes, and ``syncopate explain ulysses``."""

from __future__ import annotations

import os

import pytest

from syncopate.errors import ScheduleError
from syncopate.schedule import ulysses_cost as uc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bytes_of_one_rank():
    """Rank r holds S/W tokens of every head; it sends all but its own 1/W of them."""
    b = uc.ulysses_bytes(2, 8, 4, 64, 16, 4, elem_bytes=2)
    q = 2 * 8 * 16 * 16 * 2      # B * Hq * S/W * D * bytes
    kv = 2 * 2 * 4 * 16 * 16 * 2
    assert (b["q"], b["kv"], b["o"]) == (q, kv, q)
    assert b["in_sent"] == (q + kv) * 3 // 4 and b["out_sent"] == q * 3 // 4
    assert b["head_unit"] == 3 * 2 * 16 * 16 * 2


def test_serial_is_the_sum_of_its_parts_and_fused_paths_cannot_beat_compute():
    for c in uc.ulysses_decision_table():
        pack = 4 * (uc.ulysses_bytes(1, c.Hq, c.Hkv, c.S, c.D, c.world_size)["q"] * 2
                    + uc.ulysses_bytes(1, c.Hq, c.Hkv, c.S, c.D, c.world_size)["kv"]) / uc.HBM_BPS
        assert c.serial_s == pytest.approx(c.qkv_proj_s + c.nccl_a2a_s + pack + c.attention_s
                                           + c.out_proj_s)
        floor = c.qkv_proj_s + c.attention_s + c.out_proj_s
        assert min(c.fused_s, c.fused_default_s, c.head_major_s, c.proj_s) > floor
        assert c.fused_s <= c.fused_default_s  # the best program count includes the default


def test_a_faster_link_shrinks_what_fused_exposes(monkeypatch):
    """With a 10x faster SM copy the fused kernel exposes less of the all-to-all, and the
    projection variant has less left to win."""
    before = uc.ulysses_costs(1, 32, 8, 32768, 128, 8, True)
    real = uc._sm_bandwidth
    monkeypatch.setattr(uc, "_sm_bandwidth", lambda p: 10 * real(p))
    after = uc.ulysses_costs(1, 32, 8, 32768, 128, 8, True)
    assert after.fused_s < before.fused_s
    assert after.gain_s < before.gain_s


def test_the_variant_matters_less_as_the_sequence_grows():
    """Attention grows with the square of the sequence, the all-to-all linearly."""
    for W in (2, 4, 8):
        for causal in (False, True):
            shares = [uc.ulysses_costs(1, 32, 8, S, 128, W, causal).gain_share
                      for S in (32768, 65536, 131072)]
            assert shares == sorted(shares, reverse=True), (W, causal, shares)


def test_world_size_one_has_no_communication():
    c = uc.ulysses_costs(1, 32, 8, 4096, 128, 1)
    assert c.nccl_a2a_s == 0.0
    assert c.serial_s == pytest.approx(c.qkv_proj_s + c.attention_s + c.out_proj_s)


def test_bad_shapes_are_refused():
    with pytest.raises(ScheduleError, match="divisible by the world size"):
        uc.ulysses_costs(1, 32, 6, 32768, 128, 4)
    with pytest.raises(ScheduleError, match="S = 0 must be a positive integer"):
        uc.ulysses_costs(1, 32, 8, 0, 128, 4)


def test_docs_quote_the_models_decision_table():
    """docs/ulysses.md's table is what the model computes now (regenerate it with
    ``format_decision_table(ulysses_decision_table())`` when the model or the calibration
    changes, and revisit the decision written under it)."""
    table = uc.format_decision_table(uc.ulysses_decision_table())
    doc = open(os.path.join(ROOT, "docs", "ulysses.md")).read()
    assert table in doc
    rows = uc.ulysses_decision_table()
    assert sum(r.pays for r in rows) == 1 and "at one of the 18" in doc


def test_explain_ulysses(capsys):
    from syncopate.cli import main
    assert main(["explain", "ulysses", "--shape", "131072,32,8,128", "--world-size", "8"]) == 0
    out = capsys.readouterr().out
    assert "per rank 16384 tokens, 4 query heads" in out and "non-causal" in out
    assert "QKV-projection variant: does not pay" in out and "calibration" in out
    assert main(["explain", "ulysses", "--shape", "32768,32,8,128", "--world-size", "4",
                 "--causal"]) == 0
    assert "QKV-projection variant: pays" in capsys.readouterr().out
    assert main(["explain", "ulysses", "--shape", "32768,32,8", "--world-size", "4"]) == 1
    assert "wants --shape S,Hq,Hkv,D" in capsys.readouterr().err
    assert main(["explain", "ulysses", "--shape", "32768,32,6,128", "--world-size", "4"]) == 1
    assert "divisible by the world size" in capsys.readouterr().err
    assert main(["explain", "gemm_rs", "--shape", "1024,4096,14336,8", "--world-size", "2"]) == 1
    assert "three integers" in capsys.readouterr().err
