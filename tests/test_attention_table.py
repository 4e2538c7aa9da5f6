"""The attention kernels' configs and per-GPU table (syncopate.kernels.attention_config), and the
choice between the fast and the fusable forward (host only, no GPU).

What must hold: a lookup takes the nearest measured entry of its kernel, dtype, head dim and
mask (the user's cache before the shipped file, or ``$SYNCOPATE_ATTENTION_TABLE`` instead of
both); a bad table is refused with the file named; the shipped tables parse; the fusable
kernels refuse warp specialisation; a launch that must take the fusable kernel says why when
its config asks for warp specialisation.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from syncopate.errors import LaunchError  # noqa: E402
from syncopate.kernels import attention_config as ac  # noqa: E402
from syncopate.kernels.attention import attention, choose_kernel, fast_path_reason  # noqa: E402
from syncopate.kernels.attention_bwd import attention_backward  # noqa: E402
from syncopate.kernels.attention_zigzag import attention_zigzag  # noqa: E402


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """No user cache, no override; tables reloaded before and after."""
    monkeypatch.setenv("SYNCOPATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SYNCOPATE_ATTENTION_TABLE", raising=False)
    ac.reload_tables()
    yield tmp_path
    ac.reload_tables()


def _entry(kernel="fwd", D=128, causal=False, S=8192, **cfg):
    config = dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)
    config.update(cfg)
    return dict(kernel=kernel, dtype="bf16", D=D, causal=causal, S=S, config=config,
                measured=True)


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_shipped_tables_parse_and_cover_every_class(fresh, gpu):
    table = ac.read_table(ac.shipped_path(gpu))
    classes = {(e["kernel"], e["D"], e["causal"]) for e in table["entries"]}
    assert classes == {(k, D, c) for k in ac.TABLE_KERNELS for D in (64, 128)
                       for c in (False, True)}
    for e in table["entries"]:
        e["config"].check(e["D"])
        assert not (e["kernel"] != "fwd" and e["config"].WARP_SPECIALIZE)


def test_lookup_takes_the_nearest_sequence_of_its_class(fresh, monkeypatch):
    path = fresh / "t.json"
    ac.write_table(path, [_entry(S=2048, BLOCK_N=32), _entry(S=16384, BLOCK_N=128),
                          _entry(causal=True, S=4096, num_stages=2),
                          _entry(kernel="bwd_dq", S=4096, BLOCK_M=64)], gpu="h100", source="t")
    monkeypatch.setenv("SYNCOPATE_ATTENTION_TABLE", str(path))
    ac.reload_tables()
    assert ac.lookup("fwd", "bf16", 128, False, 3000, "h100").BLOCK_N == 32
    assert ac.lookup("fwd", "bf16", 128, False, 12000, "h100").BLOCK_N == 128
    assert ac.lookup("fwd", "bf16", 128, True, 100000, "h100").num_stages == 2
    assert ac.lookup("bwd_dq", "bf16", 128, False, 4096, "h100").BLOCK_M == 64
    # another class, another dtype, no GPU: the heuristic
    assert ac.lookup("fwd", "bf16", 64, False, 4096, "h100") == ac.fast_default_config(64)
    assert ac.lookup("fwd", "fp16", 128, False, 4096, "h100") == ac.fast_default_config(128)
    assert ac.lookup("fwd", "bf16", 128, False, 4096, None) == ac.fast_default_config(128)


def test_user_cache_comes_before_the_shipped_table(fresh):
    shipped = ac.lookup("fwd", "bf16", 128, True, 8192, "h100")
    mine = shipped.replace(BLOCK_N=shipped.BLOCK_N // 2)
    ac.write_table(ac.cache_path("h100"), [dict(_entry(causal=True), config=mine)],
                   gpu="h100", source="t")
    assert ac.lookup("fwd", "bf16", 128, True, 8192, "h100") == mine


def test_override_off_means_the_heuristic(fresh, monkeypatch):
    monkeypatch.setenv("SYNCOPATE_ATTENTION_TABLE", "off")
    ac.reload_tables()
    assert ac.entries("h100") == ()
    assert ac.lookup("bwd_dkdv", "bf16", 64, True, 8192, "h100") == \
        ac.fast_default_config(64, True, "bwd_dkdv")


@pytest.mark.parametrize("bad,match", [
    ({"entries": [dict(_entry(), kernel="bwd")]}, "kernel 'bwd' is not one of"),
    ({"entries": [dict(_entry(), D=96)]}, "head dim 96"),
    ({"entries": [_entry(BLOCK_M=96)]}, "power of two"),
    ({"entries": [{"kernel": "fwd"}]}, "KeyError"),
    ({"format": 99, "entries": []}, "format 99"),
    ({"rows": []}, "no 'entries' list"),
])
def test_bad_tables_are_refused_naming_the_file(fresh, bad, match):
    path = fresh / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(LaunchError, match=match) as e:
        ac.read_table(path)
    assert str(path) in str(e.value)


def test_fusable_kernels_refuse_warp_specialisation():
    ws = ac.fast_default_config(128)
    assert ws.WARP_SPECIALIZE
    with pytest.raises(LaunchError, match="cannot be warp specialised"):
        ws.check(128, fusable=True)
    q = torch.randn(1, 2, 64, 128, dtype=torch.bfloat16)
    with pytest.raises(LaunchError, match="cannot be warp specialised"):
        attention(q, q, q, config=ws, fusable=True)


def _qkv(S=64, D=64):
    return (torch.randn(1, 4, S, D, dtype=torch.bfloat16),
            torch.randn(1, 2, S, D, dtype=torch.bfloat16),
            torch.randn(1, 2, S, D, dtype=torch.bfloat16))


def test_fast_path_reasons():
    q, k, v = _qkv()
    o = torch.empty_like(q)
    assert fast_path_reason(q, k, v, o, 0.125) is None
    assert "not positive" in fast_path_reason(q, k, v, o, -0.125)
    odd = torch.randn(1, 4, 64, 68, dtype=torch.bfloat16)[..., :64]  # rows of 136 bytes
    assert "multiple of 16 bytes" in fast_path_reason(odd, k, v, o, 0.125)
    shifted = torch.randn(1 * 4 * 64 * 64 + 1, dtype=torch.bfloat16)[1:].view(1, 4, 64, 64)
    assert "16-byte aligned" in fast_path_reason(shifted, k, v, o, 0.125)


def test_a_launch_that_must_take_the_fusable_kernel_refuses_warp_specialisation():
    """sm_scale < 0: the fast kernel cannot run, the fusable one takes the launch -- with a
    warp-specialised config that is refused naming the reason, never silently dropped."""
    q, k, v = _qkv()
    o = torch.empty_like(q)
    cfg, fast = choose_kernel(None, q, k, v, o, 64, False, -0.1, fusable=False)
    assert not fast and cfg == ac.default_config(64)
    with pytest.raises(LaunchError, match="sm_scale -0.1 is not positive"):
        choose_kernel(dict(WARP_SPECIALIZE=True), q, k, v, o, 64, False, -0.1, fusable=False)
    cfg, fast = choose_kernel(dict(BLOCK_N=32), q, k, v, o, 64, True, 0.1, fusable=False)
    assert fast and cfg == ac.fast_default_config(64, True).replace(BLOCK_N=32)


def test_backward_configs_are_checked():
    q, k, v = _qkv()
    o, do, lse = torch.randn_like(q), torch.randn_like(q), torch.randn(1, 4, 64)
    with pytest.raises(LaunchError, match="not warp specialised"):
        attention_backward(q, k, v, o, lse, do, config=dict(WARP_SPECIALIZE=True),
                           fusable=False)
    with pytest.raises(LaunchError, match="dq_config is for the fast kernels"):
        attention_backward(q, k, v, o, lse, do, fusable=True, dq_config=dict(BLOCK_M=32))


def test_the_defaults_are_the_fusable_kernels():
    """The fast kernels are opt-in (``fusable=False``) until they pass tests/gpu on a GPU: the
    first GPU run found the warp-specialised forward's log-sum-exp half unwritten.  A
    warp-specialised config shows which kernel a default launch chose: the fusable kernels
    refuse it (before any launch), the fast path would take it."""
    q, k, v = _qkv()
    ws = dict(WARP_SPECIALIZE=True)
    with pytest.raises(LaunchError, match="cannot be warp specialised"):
        attention(q, k, v, config=ws)
    with pytest.raises(LaunchError, match="cannot be warp specialised"):
        attention_zigzag(q, k, v, 2, config=ws)
    o, do, lse = torch.randn_like(q), torch.randn_like(q), torch.randn(1, 4, 64)
    with pytest.raises(LaunchError, match="cannot be warp specialised"):
        attention_backward(q, k, v, o, lse, do, config=ws)


@pytest.mark.parametrize("stages", [1, 3, 4])
def test_warp_specialised_forward_takes_only_the_stage_count_measured_correct(stages):
    """On an H100 (Triton 3.6) the warp-specialised forward with 3 stages gave NaN from the
    third KV block on; only ``WS_STAGES`` (2) was measured right, so any other depth is
    refused -- explicitly given, from a table, or from the heuristic."""
    ws = ac.AttentionConfig(128, 64, 4, stages, True)
    with pytest.raises(LaunchError, match="only correct with num_stages=2"):
        ws.check(128)
    ac.AttentionConfig(128, 64, 4, ac.WS_STAGES, True).check(128)
    for D in ac.SUPPORTED_HEAD_DIMS:
        for causal in (False, True):
            ac.fast_default_config(D, causal).check(D)


def test_table_entry_with_peel_diagonal_is_refused_as_removed(fresh):
    """``PEEL_DIAGONAL`` (the diagonal blocks masked after the warp-specialised loop) gave NaN
    in every causal case on an H100 and was removed; a table tuned while it existed may pick a
    peeled config, and reading it must say so rather than run the masked kernel in its place
    under the peeled kernel's timing."""
    path = fresh / "t.json"
    peel = _entry(causal=True, num_warps=4, num_stages=ac.WS_STAGES, WARP_SPECIALIZE=True,
                  PEEL_DIAGONAL=True)
    path.write_text(json.dumps({"format": ac.FORMAT, "gpu": "h100", "entries": [peel]}))
    with pytest.raises(LaunchError, match="PEEL_DIAGONAL was removed .* NaN") as e:
        ac.read_table(path)
    assert str(path) in str(e.value) and "--tune-out" in str(e.value)


def test_table_entry_with_peel_diagonal_false_reads_as_the_remaining_kernel(fresh):
    """A table written while the option existed names ``PEEL_DIAGONAL: false`` in every config
    (all fields are written): that is the kernel that remains, so it is read as such."""
    path = fresh / "t.json"
    plain = _entry(causal=True, num_warps=4, num_stages=ac.WS_STAGES, WARP_SPECIALIZE=True)
    path.write_text(json.dumps({"format": ac.FORMAT, "gpu": "h100",
                                "entries": [dict(plain, config=dict(plain["config"],
                                                                    PEEL_DIAGONAL=False))]}))
    (e,) = ac.read_table(path)["entries"]
    assert e["config"] == ac.AttentionConfig(128, 64, 4, ac.WS_STAGES, True)
