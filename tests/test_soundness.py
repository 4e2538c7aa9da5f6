"""The soundness policy (docs/soundness.md) on kernels written in other styles than ours.

Each case of issue 8's five classes of silent miscompiles is compiled end to end for sm_90 on
this CPU: it must either be refused with a CompileError that names the access and what to
change, or compile to a kernel whose remap / waits / launch checks make it sound.  The
emulator tests (``tests/test_emulate_unseen.py``) then execute the ones that compile.
"""

from __future__ import annotations

import pytest

import syncopate
from syncopate import abi as abimod
from syncopate.errors import CompileError, LaunchError
from syncopate.kernels import compile_args, compile_attrs, default_config, kernel_fn
from syncopate.schedule import all_gather, reduce_scatter

from corpus import unseen as U

PTRS = {n: "*bf16" for n in ("a_ptr", "b_ptr", "c_ptr", "x_ptr", "y_ptr", "inp_ptr", "out_ptr")}
PTRS["idx_ptr"] = "*i32"
PTRS["scale"] = "fp32"
PTRS["value"] = "fp32"


def fused(fn, constexprs, schedule, operand, backend="sm"):
    sig = {n: ("constexpr" if n in constexprs else PTRS.get(n, "i32")) for n in fn.arg_names}
    return syncopate.compile(fn, signature=sig, constexprs=constexprs, schedule=schedule,
                             operand=operand, backend=backend, comm_programs=4)


def remarks(fc) -> str:
    return fc.ir_after["tile-remap"]


# ----------------------------------------------------------------- 1. derived coordinates

@pytest.mark.parametrize("mode", ["pull", "push"])
def test_derived_column_coordinate_is_not_remapped(mode):
    """``j = pid - i * n``: remapping ``i`` alone moved ``j`` off the grid on rank 1."""
    fc = fused(U.bp_gemm_derived, dict(BM=64, BN=64, BK=32),
               all_gather([256, 128], "bf16", 2, mode=mode), "a_ptr")
    assert "syncopate.remap" not in fc.ir_after["tile-remap"]
    assert "uses a value computed from the tile coordinate" in remarks(fc)
    # still waits for the rows it reads
    assert "syncopate.wait_region" in fc.ir_after["insert-waits"]


def test_independent_coordinates_are_remapped():
    """``pm = tile // n; pn = tile % n`` in a persistent loop: both follow the linear tile id
    independently, so remapping ``pm`` is a bijection on tiles and is kept."""
    fc = fused(U.persistent_rowmajor_gemm, dict(BM=64, BN=64, BK=32, NUM_PROGS=8),
               all_gather([256, 128], "bf16", 2, mode="pull"), "a_ptr")
    assert "syncopate.remap" in fc.ir_after["tile-remap"]


@pytest.mark.parametrize("name", ["matmul_tma_persistent_kernel", "matmul_ptr_kernel"])
def test_project_gemms_keep_their_remap(name):
    cfg = default_config(1024, 512, 256, "bf16", "tma" if "tma" in name else "ptr")
    sig, cx = compile_args(name, "bf16", cfg)
    fc = syncopate.compile(kernel_fn(name), signature=sig, constexprs=cx,
                           schedule=all_gather([1024, 256], "bf16", 2), operand="a_ptr",
                           backend="sm", comm_programs=4, attrs=compile_attrs(name),
                           **cfg.options())
    assert "syncopate.remap" in fc.ir_after["tile-remap"]
    assert "not remapped" not in fc.ir_after["tile-remap"]


# ----------------------------------------------------------------- 2. grids of several dims

def test_two_dimensional_grid_runs_the_comm_plan_once():
    """Only programs (p < comm, 0, 0) run the comm plan: every row of axis 1 ran it before and
    over-signalled, so from launch 2 on waits passed before the rows arrived."""
    fc = fused(U.xt_gemm_2d, dict(BM=64, BN=64, BK=32),
               all_gather([128, 256], "bf16", 2, mode="pull"), "x_ptr")
    text = fc.ir_after["partition-sms"]
    head = text[text.index("tt.func public @xt_gemm_2d"):text.index("syncopate.comm %")]
    assert "tt.get_program_id y" in head and "tt.get_program_id z" in head
    assert fc.abi.grid_axes == [0, 1]
    # the waits sit inside the K loop (the gathered dim is K)
    assert fc.abi.grid((2, 4)) == (2 + 4, 4, 1)


def test_grid_along_an_axis_the_kernel_never_reads_is_refused():
    fc = fused(U.masked_rows, dict(BLOCK=64), all_gather([512, 64], "bf16", 2), "inp_ptr")
    assert fc.abi.grid_axes == [0]
    with pytest.raises(LaunchError, match="never reads .*program_id\\(1\\)"):
        fc.abi.grid((512, 2))
    # an ABI written before the field existed keeps working
    old = abimod.FusedABI.from_json({k: v for k, v in fc.abi.to_json().items()
                                     if k != "grid_axes"})
    assert old.grid((512, 2)) == (512 + 4, 2, 1)


# ----------------------------------------------------------------- 3. loaded indices

@pytest.mark.parametrize("fn", [U.row_gather, U.row_gather_hinted])
def test_loaded_row_index_is_never_remapped(fn):
    fc = fused(fn, dict(BLOCK=64), all_gather([512, 64], "bf16", 2), "inp_ptr")
    assert "syncopate.remap" not in fc.ir_after["tile-remap"]
    assert "depends on a value loaded from memory" in remarks(fc)
    # the wait is resolved at run time from the loaded row
    waits = fc.ir_after["insert-waits"]
    assert "syncopate.wait_region" in waits


# ----------------------------------------------------------------- 4. roles

def test_consumed_operand_that_the_kernel_writes_is_refused():
    with pytest.raises(CompileError, match="writes 'c_ptr', but the schedule delivers"):
        fused(U.bp_gemm_derived, dict(BM=64, BN=64, BK=32),
              all_gather([256, 256], "bf16", 2), "c_ptr")
    with pytest.raises(CompileError, match="writes 'x_ptr'") as e:
        fused(U.scale_rows_inplace, dict(BLOCK=64), all_gather([512, 64], "bf16", 2), "x_ptr")
    assert e.value.location and "unseen.py" in e.value.location


def test_produced_operand_that_the_kernel_reads_is_refused():
    with pytest.raises(CompileError, match="reads 'inp_ptr', which holds tensor"):
        fused(U.masked_rows, dict(BLOCK=64), reduce_scatter([512, 64], "bf16", 2), "inp_ptr")


def test_operand_the_kernel_never_touches_is_refused():
    with pytest.raises(CompileError, match="never accesses memory through 'inp_ptr'"):
        fused(U.fill_rows, dict(BLOCK=64), all_gather([512, 64], "bf16", 2), "inp_ptr")


# ----------------------------------------------------------------- 5. bounds

@pytest.mark.parametrize("row", [64, 128])
def test_access_past_the_end_of_a_row_is_refused(row):
    with pytest.raises(CompileError, match=r"reads indices \[0, 128\), past the end of the dim"):
        fused(U.wide_rows, dict(BLOCK=128, ROW=row), all_gather([512, 64], "bf16", 2), "inp_ptr")


def test_unbounded_column_tile_is_refused():
    with pytest.raises(CompileError, match="cannot prove that .* stays inside the dim"):
        fused(U.col_tiles, dict(ROW=64, BLOCK=32), all_gather([512, 64], "bf16", 2), "inp_ptr")


def test_mask_bound_becomes_a_launch_check():
    fc = fused(U.masked_rows, dict(BLOCK=128), all_gather([512, 64], "bf16", 2), "inp_ptr")
    assert fc.abi.upper_bounds == {"n_cols": 64}
    assert abimod.launch_violations({"n_cols": 64}, fc.abi.requirements,
                                    fc.abi.upper_bounds) == []
    with pytest.raises(LaunchError, match="n_cols=100"):
        abimod.check_launch({"n_cols": 100, "stride": 64}, fc.abi.requirements,
                            fc.abi.upper_bounds)


def test_project_gemm_bounds_are_launch_checks():
    """The pointer GEMM masks rows by M and K by K: both become upper bounds."""
    name = "matmul_ptr_kernel"
    cfg = default_config(1024, 512, 256, "bf16", "ptr")
    sig, cx = compile_args(name, "bf16", cfg)
    fc = syncopate.compile(kernel_fn(name), signature=sig, constexprs=cx,
                           schedule=all_gather([1024, 256], "bf16", 2), operand="a_ptr",
                           backend="sm", comm_programs=4, attrs=compile_attrs(name),
                           **cfg.options())
    assert fc.abi.upper_bounds == {"M": 1024, "K": 256}


def test_remap_can_be_switched_off():
    """The escape hatch for a tiling the rules accept but that is not a grid."""
    sched = all_gather([256, 128], "bf16", 2, mode="pull")
    sig = {n: ("constexpr" if n in ("BM", "BN", "BK", "NUM_PROGS") else PTRS.get(n, "i32"))
           for n in U.persistent_rowmajor_gemm.arg_names}
    cx = dict(BM=64, BN=64, BK=32, NUM_PROGS=8)
    fc = syncopate.compile(U.persistent_rowmajor_gemm, signature=sig, constexprs=cx,
                           schedule=sched, operand="a_ptr", backend="sm", comm_programs=4,
                           remap=False)
    assert "= syncopate.remap " not in fc.ir_after["tile-remap"]
    assert "tile-remap: off (remap=False)" in fc.ir_after["tile-remap"]
    assert "syncopate.wait_region" in fc.ir_after["insert-waits"]


# ----------------------------------------------------------------- 6. session 15's styles

def test_tutorial_gemm_compiles_with_its_k_mask_as_a_launch_check():
    """Triton's tutorial GEMM (loop-carried pointers, ``offs_k < K - k * BLOCK_K``): the mask,
    written from the induction variable, bounds the address, which is in iteration counts."""
    from corpus import kernels as CK
    sig = {n: ("constexpr" if n in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M") else
               {"c_ptr": "*fp16"}.get(n, PTRS.get(n, "i32"))) for n in CK.matmul_ptr.arg_names}
    fc = syncopate.compile(CK.matmul_ptr, signature=sig,
                           constexprs=dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=4),
                           schedule=all_gather([512, 256], "bf16", 2), operand="a_ptr",
                           backend="sm", comm_programs=4)
    assert fc.abi.upper_bounds == {"K": 256}


@pytest.mark.parametrize("backend", ["sm", "ce"])
def test_early_return_kernel_compiles_as_one_block(backend):
    """``if pid * BM >= M: return`` is a CFG in TTIR; structurize-returns makes it one block, so
    the comm programs (sm) and the self-advancing epoch's done-counter sit where every program
    reaches them."""
    cx = dict(BM=16, BLOCK=64)
    sig = {n: ("constexpr" if n in cx else PTRS.get(n, "i32"))
           for n in U.early_exit_rows.arg_names}
    fc = syncopate.compile(U.early_exit_rows, signature=sig, constexprs=cx,
                           schedule=all_gather([512, 64], "bf16", 2), operand="inp_ptr",
                           backend=backend, comm_programs=4, self_advance=True)
    after = fc.ir_after["structurize-returns"]
    assert "cf.cond_br" not in after and "scf.if" in after
    assert fc.abi.self_advance


def test_rows_from_a_size_and_strided_tiles_are_refused_saying_what_to_do():
    with pytest.raises(CompileError, match=r"multiplies two integer arguments \(M \* stride\)"):
        fused(U.reversed_rows, dict(BM=16, BLOCK=64), all_gather([512, 64], "bf16", 2),
              "inp_ptr")
    with pytest.raises(CompileError, match="reads one index in every 2 .*hint_region2"):
        fused(U.interleaved_rows, dict(BM=16, BLOCK=64), all_gather([512, 64], "bf16", 2),
              "inp_ptr")
