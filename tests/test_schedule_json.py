"""The JSON interchange format (version 1): round trips, the normative example, and errors
that name the key path and say what to write."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from syncopate.errors import ScheduleError
from syncopate.schedule import (Region, Schedule, all_gather, all_reduce, all_to_all,
                                as_schedule, dump, dumps, from_dict, load, loads, reduce_scatter,
                                ring_pass, to_dict, verify)

EXAMPLE = """
{"format": "syncopate.schedule", "version": 1, "world_size": 2,
 "tensors": {"A": {"shape": [8192, 4096], "dtype": "bf16",
   "initial": [{"rank": 0, "offsets": [0, 0], "sizes": [4096, 4096]},
               {"rank": 1, "offsets": [4096, 0], "sizes": [4096, 4096]}],
   "final":   [{"rank": 0, "offsets": [0, 0], "sizes": [8192, 4096]},
               {"rank": 1, "offsets": [0, 0], "sizes": [8192, 4096]}]}},
 "chunks": [{"id": 0, "tensor": "A", "offsets": [4096, 0], "sizes": [4096, 4096],
             "src": 1, "dst": 0, "mode": "pull", "step": 0, "reduce": "none", "after": []},
            {"id": 1, "tensor": "A", "offsets": [0, 0], "sizes": [4096, 4096],
             "src": 0, "dst": 1, "mode": "pull", "step": 0, "reduce": "none", "after": []}]}
"""


def _doc():
    return json.loads(EXAMPLE)


def _problems(doc) -> list[str]:
    with pytest.raises(ScheduleError) as e:
        from_dict(doc)
    return e.value.problems


def test_normative_example_loads_and_verifies():
    s = loads(EXAMPLE)
    assert s.world_size == 2 and list(s.tensors) == ["A"]
    assert s.chunks[0].region == Region((4096, 0), (4096, 4096))
    assert s.chunks[0].src == 1 and s.chunks[0].mode == "pull"
    verify(s)
    # The template makes the same schedule (up to meta and chunk order).
    t = all_gather((8192, 4096), "bf16", 2)
    assert {(c.src, c.dst, c.region) for c in t.chunks} == \
        {(c.src, c.dst, c.region) for c in s.chunks}


@pytest.mark.parametrize("make", [
    lambda: all_gather((100, 7), "bf16", 3, split=3, order="ring", mode="push"),
    lambda: reduce_scatter((9, 4, 2), "fp32", 4, dim=1, split=2),
    lambda: all_reduce((33, 5), "fp16", 3, order="ring"),
    lambda: all_to_all((6, 8, 3), "int32", 2, 0, 1, split=2),
    lambda: ring_pass((10, 4), "fp8e4m3", 5),
])
def test_round_trip(make, tmp_path: Path):
    s = make()
    text = dumps(s)
    assert loads(text) == s
    assert loads(dumps(s, compact=True)) == s
    assert "\n" not in dumps(s, compact=True)
    path = tmp_path / "s.json"
    dump(s, path)
    assert load(path) == s
    assert load(str(path)).content_hash() == s.content_hash()
    assert json.loads(text) == to_dict(s)
    # The readable layout has one chunk per line.
    assert sum(1 for line in text.splitlines() if '"id":' in line) == s.num_chunks


def test_extra_keys_preserved():
    doc = _doc()
    doc["comment"] = "made by hand"
    doc["template"] = {"name": "custom"}
    doc["tensors"]["A"]["layout"] = "row-major"
    doc["tensors"]["A"]["initial"][0]["note"] = "rank 0's shard"
    doc["chunks"][0]["priority"] = 3
    s = from_dict(doc)
    assert s.meta == {"comment": "made by hand", "template": {"name": "custom"}}
    assert s.tensors["A"].extra == {"layout": "row-major"}
    assert s.tensors["A"].initial[0].extra == {"note": "rank 0's shard"}
    assert s.chunks[0].extra == {"priority": 3}
    again = loads(dumps(s))
    assert again == s and to_dict(again) == to_dict(s)
    assert to_dict(s)["chunks"][0]["priority"] == 3


def test_partial_placements():
    s = reduce_scatter((8, 2), "bf16", 2)
    doc = to_dict(s)
    assert doc["tensors"]["C"]["initial"][0]["partial"] is True
    assert "partial" not in doc["tensors"]["C"]["final"][0]  # written only when true
    assert from_dict(doc).tensors["C"].initial[0].partial


def test_dtype_aliases_normalized():
    doc = _doc()
    doc["tensors"]["A"]["dtype"] = "bfloat16"
    assert from_dict(doc).tensors["A"].dtype == "bf16"


# --- errors ---------------------------------------------------------------------------------

def test_malformed_json():
    with pytest.raises(ScheduleError, match="not valid JSON: .* at line 1 column"):
        loads('{"format": ')


def test_not_an_object():
    with pytest.raises(ScheduleError, match="a schedule is a JSON object, got a list"):
        loads("[]")


def test_format_and_version():
    doc = _doc()
    doc["format"] = "something.else"
    assert _problems(doc) == ['format: is "something.else", not a Syncopate schedule; '
                              'a schedule has "format": "syncopate.schedule"']
    doc = _doc()
    del doc["format"]
    assert 'add "format": "syncopate.schedule"' in _problems(doc)[0]
    doc = _doc()
    doc["version"] = 2
    assert _problems(doc) == ['version: 2 is not supported; this Syncopate reads version 1 '
                              '(write "version": 1)']
    doc = _doc()
    del doc["version"]
    assert _problems(doc) == ['version: missing; add "version": 1']
    doc = _doc()
    doc["version"] = True
    assert "not supported" in _problems(doc)[0]


def test_missing_keys_named_with_path():
    doc = _doc()
    del doc["chunks"][0]["step"]
    del doc["chunks"][0]["after"]
    del doc["tensors"]["A"]["final"][1]["sizes"]
    probs = _problems(doc)
    assert "tensors.A.final[1]: missing required key 'sizes'; add \"sizes\"" in probs
    assert "chunks[0]: missing required keys 'step', 'after'; add \"step\", \"after\"" in probs
    doc = _doc()
    del doc["world_size"]
    assert _problems(doc) == ["(top level): missing required key 'world_size'; add "
                              "\"world_size\""]


def test_wrong_types_all_reported():
    doc = _doc()
    doc["world_size"] = "2"
    doc["tensors"]["A"]["shape"] = [8192, 0]
    doc["tensors"]["A"]["dtype"] = "bf17"
    doc["chunks"][0]["sizes"] = [4096, -1]
    doc["chunks"][0]["mode"] = "send"
    doc["chunks"][1]["after"] = "0"
    doc["chunks"][1]["step"] = 1.5
    doc["chunks"][1]["src"] = True
    probs = _problems(doc)
    assert 'world_size: expected an integer, got "2"' in probs
    assert "tensors.A.shape[1]: must be >= 1, got 0" in probs
    assert any(p.startswith('tensors.A.dtype: unknown dtype "bf17"; use one of bf16') for p in probs)
    assert "chunks[0].sizes[1]: must be >= 1, got -1" in probs
    assert "chunks[0].mode: expected one of 'push', 'pull', got \"send\"" in probs
    assert 'chunks[1].after: expected a list of integers, got "0"' in probs
    assert "chunks[1].step: expected an integer, got 1.5" in probs
    assert "chunks[1].src: expected an integer, got true" in probs
    assert len(probs) == 8


def test_region_dims_mismatch_in_json():
    doc = _doc()
    doc["chunks"][0]["offsets"] = [0]
    assert _problems(doc) == ["chunks[0]: offsets has 1 entries but sizes has 2; give one "
                              "offset and one size per tensor dim"]


def test_partial_must_be_bool():
    doc = _doc()
    doc["tensors"]["A"]["initial"][0]["partial"] = "yes"
    assert _problems(doc) == ['tensors.A.initial[0].partial: expected true or false, got "yes"']


def test_load_missing_file(tmp_path: Path):
    with pytest.raises(ScheduleError, match="cannot read schedule file .*nope.json"):
        load(tmp_path / "nope.json")


def test_load_prefixes_path(tmp_path: Path):
    p = tmp_path / "bad.json"
    p.write_text('{"format": "syncopate.schedule"}')
    with pytest.raises(ScheduleError) as e:
        load(p)
    assert e.value.problems[0].startswith(f"{p}: version: missing")


# --- as_schedule ----------------------------------------------------------------------------

def test_as_schedule_accepts_three_forms(tmp_path: Path):
    s = all_gather((16, 4), "bf16", 2, split=2)
    path = tmp_path / "ag.json"
    dump(s, path)
    assert as_schedule(s) is s
    assert as_schedule(dumps(s)) == s
    assert as_schedule("  \n" + dumps(s)) == s
    assert as_schedule(str(path)) == s
    assert as_schedule(path) == s
    assert as_schedule(dumps(s).encode()) == s
    assert as_schedule(to_dict(s)) == s
    assert as_schedule(path, verify=True) == s
    with pytest.raises(ScheduleError, match="expected a Schedule, JSON text or a path"):
        as_schedule(42)
    with pytest.raises(ScheduleError, match="cannot read schedule file"):
        as_schedule(str(tmp_path / "missing.json"))


def test_as_schedule_verify_flag():
    doc = _doc()
    doc["chunks"] = doc["chunks"][:1]  # rank 1 never gets block 0
    s = as_schedule(copy.deepcopy(doc))  # loads fine: verification is separate
    assert isinstance(s, Schedule)
    with pytest.raises(ScheduleError, match="final placement not met: rank 1"):
        as_schedule(doc, verify=True)
