"""The syncopate passes, one per module, registered by name (``syncopate-opt -p NAME``; the
pipeline, ``syncopate_mlir/pipeline.py``, builds from the same registry)."""

from __future__ import annotations

from .append_abi import AppendAbiParams
from .attach_schedule import AttachSchedule
from .check_accesses import CheckAccesses
from .insert_epilogue_reduce import InsertEpilogueReduce
from .insert_signals import InsertSignals
from .insert_trace import InsertTrace
from .insert_waits import InsertWaits
from .load_epoch import LoadEpoch
from .lower_ce import LowerCe
from .lower_nvshmem import LowerNvshmem
from .lower_sm import LowerSm
from .partition_sms import PartitionSms
from .resolve_chunks import ResolveChunks
from .self_advance_epoch import SelfAdvanceEpoch
from .structurize_returns import StructurizeReturns
from .tile_remap import TileRemap

#: pass name -> ModulePass class
REGISTRY = {p.name: p for p in (
    AttachSchedule, StructurizeReturns, CheckAccesses, AppendAbiParams, TileRemap, InsertWaits,
    InsertSignals, InsertEpilogueReduce, PartitionSms, ResolveChunks, LowerSm, LowerCe,
    LowerNvshmem, InsertTrace, LoadEpoch, SelfAdvanceEpoch)}

