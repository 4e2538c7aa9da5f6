"""A region hint must name as many dims as the tensor it describes has (passes/access.py): a
2-d hint on a 3-d tensor, or a 3-d hint on a 2-d one, is refused with a message that counts both
and names the hint to use.
"""

from __future__ import annotations

import pytest
import triton
import triton.language as tl

import syncopate
from syncopate.errors import CompileError
from syncopate.language import hint_region2, hint_region3
from syncopate.schedule import all_gather


@triton.jit
def hinted_rows_3d(inp_ptr, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    offs = (pid * BLOCK + cols) * 2 // 2  # a division the analysis cannot follow: hint it
    hint_region2(inp_ptr, pid, pid + 1, 0, BLOCK)  # two dims of a [4, 8, 32] tensor
    x = tl.load(inp_ptr + offs)
    tl.store(out_ptr + pid * BLOCK + cols, x)


@triton.jit
def hinted_rows_2d(inp_ptr, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    offs = (pid * BLOCK + cols) * 2 // 2
    hint_region3(inp_ptr, pid, pid + 1, 0, BLOCK, 0, 1)  # three dims of a [8, 32] tensor
    x = tl.load(inp_ptr + offs)
    tl.store(out_ptr + pid * BLOCK + cols, x)


@pytest.mark.parametrize("kernel, shape, given, has", [
    (hinted_rows_3d, [4, 8, 32], 2, 3),
    (hinted_rows_2d, [8, 32], 3, 2),
])
def test_a_hint_with_another_number_of_dims_is_refused_with_both_counts(kernel, shape, given,
                                                                         has):
    with pytest.raises(CompileError, match=rf"hint_region for inp_ptr gives {given} dims but "
                                           rf"tensor 'A' has {has}: use hint_region{has}"):
        syncopate.compile(kernel, signature={"inp_ptr": "*bf16", "out_ptr": "*bf16",
                                             "BLOCK": "constexpr"},
                          constexprs={"BLOCK": 32}, schedule=all_gather(shape, "bf16", 2),
                          operand="inp_ptr", backend="sm", comm_programs=2)
