"""Chunk schedules: how tensors move between ranks, cut into chunks (pure Python).

* :mod:`.model` -- :class:`Region`, :class:`Placement`, :class:`TensorSpec`, :class:`Chunk`,
  :class:`Schedule` (frozen dataclasses) and dtype names (``Region`` and the box algebra are
  defined in :mod:`.geometry`, ``Placement``, ``TensorSpec`` and the dtype names in
  :mod:`.tensor_spec`; :mod:`.model` re-exports them);
* :mod:`.json_io` -- the JSON interchange format, version 1 (:func:`loads`, :func:`dumps`,
  :func:`as_schedule`, ...);
* :mod:`.verify` -- :func:`verify`, the symbolic execution that proves a schedule correct (its
  docstring defines the ordering semantics of ``step`` and ``after``), with
  :mod:`.verify_structure` (structural checks) and :mod:`.verify_graph` (order, cycles);
* :mod:`.templates` -- all-gather, reduce-scatter, all-reduce, all-to-all, ring pass;
* :mod:`.cost` -- the alpha-beta cost model (:func:`estimate`, :func:`best_split`).

Typical use::

    from syncopate.schedule import all_gather, verify, estimate
    s = all_gather((8192, 4096), "bf16", world_size=2, split=2)
    verify(s)
    s.arrival_order(0, "A")        # regions of A in the order they become complete on rank 0
"""

from .cost import CostEstimate, LinkModel, best_split, chunk_time, estimate, gemm_time, link_model
from .json_io import FORMAT, VERSION, as_schedule, dump, dumps, from_dict, load, loads, to_dict
from .model import (DTYPE_SIZES, Chunk, Placement, Region, Schedule, TensorSpec, dtype_size,
                    normalize_dtype, verify)
from .templates import (PLANS, TEMPLATES, all_gather, all_reduce, all_to_all, reduce_scatter,
                        ring_pass, ulysses_all_to_all)
from .kv_gather import kv_all_gather
from .scaled_gather import scaled_all_gather
from .verify import Analysis, analyze

__all__ = [
    "Region", "Placement", "TensorSpec", "Chunk", "Schedule", "DTYPE_SIZES", "dtype_size",
    "normalize_dtype",
    "FORMAT", "VERSION", "loads", "load", "dumps", "dump", "as_schedule", "from_dict", "to_dict",
    "verify", "analyze", "Analysis",
    "all_gather", "reduce_scatter", "all_reduce", "all_to_all", "ring_pass", "kv_all_gather",
    "scaled_all_gather", "TEMPLATES", "ulysses_all_to_all", "PLANS",
    "estimate", "best_split", "chunk_time", "link_model", "gemm_time", "CostEstimate",
    "LinkModel",
]
