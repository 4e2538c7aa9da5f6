"""syncopate.dtypes: the one dtype table -- every spelling maps to one record, unknown names
raise a typed error that lists the known ones, and the module stays import-light."""

import subprocess
import sys

import pytest

from syncopate import dtypes
from syncopate.errors import DtypeError, LaunchError, ScheduleError


@pytest.mark.parametrize("spelling,name", [
    ("bf16", "bf16"), ("bfloat16", "bf16"), ("torch.bfloat16", "bf16"), ("*bf16", "bf16"),
    ("tl.bfloat16", "bf16"), ("triton.language.bfloat16", "bf16"),
    ("fp16", "fp16"), ("float16", "fp16"), ("half", "fp16"), ("f16", "fp16"),
    ("float32", "fp32"), ("f32", "fp32"), ("float", "fp32"),
    ("*fp8e4nv", "fp8e4m3"), ("float8_e4m3fn", "fp8e4m3"), ("tl.float8e4nv", "fp8e4m3"),
    ("f8E4M3FN", "fp8e4m3"), ("fp8e5", "fp8e5m2"), ("float8_e5m2", "fp8e5m2"),
    ("i32", "int32"), ("*i64", "int64"), ("u8", "uint8"), ("u32", "uint32"), ("i1", "bool"),
    ("np.float64", "fp64"), (" BF16 ", "bf16"),
])
def test_every_spelling_has_one_canonical_name(spelling, name):
    assert dtypes.canonical(spelling) == name
    assert dtypes.is_known(spelling)


def test_records_convert_to_each_layer():
    assert dtypes.element_bytes("bf16") == 2 and dtypes.element_bytes("*fp8e4nv") == 1
    assert dtypes.element_bytes("torch.int64") == 8
    assert dtypes.torch_name("fp8e4m3") == "float8_e4m3fn"
    assert dtypes.triton_sig("fp8e5m2") == "*fp8e5" and dtypes.triton_sig("int32") == "*i32"
    assert dtypes.triton_elem("bool") == "i1"
    assert dtypes.tl_name("bf16") == "tl.bfloat16"
    assert dtypes.mlir_name("fp16") == "f16" and dtypes.mlir_name("uint8") == "i8"
    assert dtypes.SIZES == {n: d.bytes for n, d in dtypes.DTYPES.items()}
    for name in dtypes.DTYPES:   # each layer's spelling round-trips to the canonical name
        d = dtypes.info(name)
        assert {dtypes.canonical(s) for s in (d.torch, "*" + d.triton, "tl." + d.tl)} == {name}


def test_torch_dtype_is_lazy_and_exact():
    torch = pytest.importorskip("torch")
    assert dtypes.torch_dtype("bf16") is torch.bfloat16
    assert dtypes.torch_dtype(torch.float16) is torch.float16
    assert dtypes.canonical(torch.float8_e4m3fn) == "fp8e4m3"
    for name in dtypes.DTYPES:
        assert dtypes.canonical(dtypes.torch_dtype(name)) == name
        assert dtypes.torch_dtype(name).itemsize == dtypes.element_bytes(name)


@pytest.mark.parametrize("bad", ["bf17", "complex64", "int", "", "*"])
def test_unknown_dtype_is_a_typed_error_listing_the_known_ones(bad):
    with pytest.raises(DtypeError, match="unknown dtype .*; use one of bf16, fp16, fp32") as e:
        dtypes.element_bytes(bad)
    # callers of the schedule layer and of the launch layer keep catching their family
    assert isinstance(e.value, ScheduleError) and isinstance(e.value, LaunchError)
    assert isinstance(e.value, ValueError) and e.value.name == bad
    assert not dtypes.is_known(bad)


def test_import_is_light():
    code = ("import sys, syncopate.dtypes; "
            "print(any(m in sys.modules for m in ('torch', 'triton')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
