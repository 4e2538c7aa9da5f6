"""``syncopate.nn``: tensor-, sequence- and context-parallel modules over the fused ops
(docs/model.md).

Each is a thin ``torch.nn.Module`` over ``torch.ops.syncopate.*`` (autograd through them), with
``fused=False`` the same module on NCCL collectives + cuBLAS + SDPA (the unfused comparison):

* :class:`ColumnParallelLinear` (all-gather + GEMM), :class:`RowParallelLinear` (GEMM +
  reduce-scatter, or + all-reduce);
* :class:`ContextParallelAttention` (ring attention over sequence shards, causal zigzag layout);
* :class:`TransformerBlock` (Llama-style; ``layout="tp"`` tensor + sequence parallel or
  ``"cp"`` context parallel; ``moe=MoE(...)``: a mixture-of-experts MLP, inference only) and
  :class:`ReferenceBlock`, the same block unsharded in plain torch;
* :class:`TransformerStack` / :class:`ReferenceStack`: blocks in sequence;
* :func:`sync_grads` (the replicated parameters' gradients summed over the ranks),
  :func:`memory_held` (what a model holds), :class:`Parallel` (the group a model runs over).

One Communicator for the whole model: pass it as ``comm`` to every module (it is registered
for its group, so every op uses it; its buffers and fused kernels are shared by the layers of
the same shape).
"""

from .attention import ContextParallelAttention
from .block import MoE, ReferenceBlock, TransformerBlock
from .functional import layout_positions, rms_norm, rope, swiglu
from .linear import ColumnParallelLinear, RowParallelLinear
from .memory import MemoryReport, memory_held
from .parallel import Parallel, sync_grads
from .stack import ReferenceStack, TransformerStack

__all__ = ["ColumnParallelLinear", "ContextParallelAttention", "MemoryReport", "MoE", "Parallel",
           "ReferenceBlock", "ReferenceStack", "RowParallelLinear", "TransformerBlock",
           "TransformerStack", "layout_positions", "memory_held", "rms_norm", "rope", "swiglu",
           "sync_grads"]
