"""The watchdog record (syncopate.runtime.diag): decoding the device's record, waiting for
its epoch word, turning it into a CommTimeout that names the chunk, the timeout env settings,
and the host-side record buffer and its state-word probe.

CPU only (split from tests/test_runtime_cpu.py; shared fakes in runtime_fakes.py).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from syncopate import abi, settings  # noqa: E402
from syncopate.errors import CommTimeout, LaunchError, TimeoutRecord  # noqa: E402
from syncopate.runtime import diag  # noqa: E402
from runtime_fakes import diag_words  # noqa: E402


def test_decode_empty_record_is_none():
    assert diag.decode([0] * abi.DIAG_WORDS) is None


def test_decode_incomplete_record_is_none():
    # claimed (state 1) but the epoch word, written last, is not there yet
    assert diag.decode(diag_words(state=1, rank=1, flag=3, value=2, expected=5, kind=0)) is None


def test_decode_full_record():
    rec = diag.decode(diag_words(state=1, rank=1, flag=3, value=2, expected=5, kind=abi.KIND_CHUNK,
                             program=7, epoch=5))
    assert (rec.rank, rec.chunk, rec.flag_value, rec.expected, rec.kind, rec.program) == \
        (1, 3, 2, 5, "chunk", 7)
    assert rec.epoch == 5


@pytest.mark.parametrize("kind", sorted(abi.KIND_NAMES))
def test_decode_kind_names(kind):
    rec = diag.decode(diag_words(state=1, kind=kind, epoch=1))
    assert rec.kind == abi.KIND_NAMES[kind]


def test_decode_negative_and_unsigned_words():
    # torch int32 may come back as negative python ints; uint32 views as large positives
    rec = diag.decode(diag_words(state=1, value=0xFFFFFFFF, expected=-2, epoch=3))
    assert rec.flag_value == -1 and rec.expected == -2


def test_read_record_waits_for_the_epoch_word():
    seq = [diag_words(state=1, rank=0, flag=1, kind=0),
           diag_words(state=1, rank=0, flag=1, kind=0, epoch=4)]
    calls = []

    def words():
        calls.append(1)
        return seq[min(len(calls) - 1, 1)]

    rec = diag.read_record(words, settle_s=1.0)
    assert rec is not None and rec.epoch == 4 and len(calls) >= 2


def test_read_record_gives_up_on_a_claimed_but_unwritten_record():
    rec = diag.read_record(lambda: diag_words(state=1, rank=1, flag=2, kind=1), settle_s=0.01)
    assert rec is not None and rec.kind == "entry" and rec.rank == 1 and rec.epoch == 0


def test_read_record_none_when_clear():
    assert diag.read_record(lambda: [0] * abi.DIAG_WORDS) is None


def test_make_timeout_names_the_chunk():
    lay = abi.FlagLayout(num_chunks=4, world_size=2)
    rec = TimeoutRecord(rank=0, chunk=lay.chunk(3), flag_value=6, expected=7, kind="chunk", program=2)
    rec.epoch = 7
    err = diag.make_timeout(rec, 10.0, lay)
    assert isinstance(err, CommTimeout) and err.chunk == 3
    assert "chunk 3 never arrived" in str(err) and "CHUNK[3]" in str(err) and "epoch 7" in str(err)


def test_make_timeout_produced_flag_maps_to_chunk():
    lay = abi.FlagLayout(num_chunks=4, world_size=2)
    rec = TimeoutRecord(rank=1, chunk=lay.produced(2), flag_value=0, expected=3, kind="produced")
    err = diag.make_timeout(rec, 1.0, lay)
    assert err.chunk == 2 and "PRODUCED[2]" in str(err)


def test_describe_flag_regions():
    lay = abi.FlagLayout(num_chunks=3, world_size=2)
    assert diag.describe_flag(lay.entry(1), lay).startswith("ENTRY[1]")
    assert diag.describe_flag(lay.consumed, lay).startswith("CONSUMED")
    assert diag.describe_flag(lay.words + 3, lay).endswith("(outside the layout)")
    assert diag.chunk_of(TimeoutRecord(0, lay.entry(0), 0, 1, "entry"), lay) is None


def test_timeout_env():
    assert settings.TIMEOUT_S.get({}) == 10.0
    assert settings.watchdog({"SYNCOPATE_TIMEOUT_S": "2.5"}) == (2_500_000_000, "exit")
    assert settings.watchdog({"SYNCOPATE_TIMEOUT_S": "0"})[0] == 0
    with pytest.raises(LaunchError, match="not a number"):
        settings.TIMEOUT_S.get({"SYNCOPATE_TIMEOUT_S": "ten"})
    with pytest.raises(LaunchError, match="negative"):
        settings.TIMEOUT_S.get({"SYNCOPATE_TIMEOUT_S": "-1"})


def test_timeout_action_env():
    assert settings.TIMEOUT_ACTION.get({}) == "exit"
    assert settings.TIMEOUT_ACTION.get({"SYNCOPATE_TIMEOUT_ACTION": "TRAP"}) == "trap"
    with pytest.raises(LaunchError, match="exit, trap"):
        settings.TIMEOUT_ACTION.get({"SYNCOPATE_TIMEOUT_ACTION": "abort"})


def test_new_record_is_zeroed_and_addressable():
    rec, addr = diag.new_record()
    assert rec.dtype == torch.int32 and rec.numel() == abi.DIAG_WORDS and int(rec.sum()) == 0
    assert addr != 0


def test_state_word_probe_sees_writes_to_the_record():
    rec, _ = diag.new_record()
    probe = diag.state_word(rec)
    assert probe() == 0
    rec[abi.DIAG_STATE] = 1  # what the device's claim writes
    assert probe() == 1
    rec.zero_()
    assert probe() == 0
    view = torch.zeros(16, dtype=torch.int32)[::2]  # not contiguous: the tensor read is used
    view[abi.DIAG_STATE] = 3
    assert diag.state_word(view)() == 3
