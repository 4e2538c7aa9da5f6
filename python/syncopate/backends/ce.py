"""``ce``: the copy engine moves the data; the fused kernel only waits and signals (``lower-ce``),
and the host runs the protocol on a side stream (``runtime/launchers/ce.py``, with the plan of
``runtime/plan.py``): every chunk runs on the side its mode names, a ``sum`` chunk is a copy
into the owner's per-source slot, added after the kernel or by the owner's tiles
(``reduce="epilogue"``)."""

from __future__ import annotations

from .spec import BackendSpec

CE = BackendSpec(
    name="ce",
    side_stream=True,
    reduce_modes=("comm", "epilogue"),
    compiles_withheld=False,  # withheld at run time: its launcher skips the chunk's copy and flag
    op_modes={"ag": "pull", "rs": "push"},
    # copy engine peer copy on 2 x H200: 80, 320, 394 GB/s at 1, 16, 256 MB (schedule/cost.py)
    link_alpha_s=10e-6,
    link_beta_bps=400e9,
)
