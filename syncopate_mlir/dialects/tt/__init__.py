"""The ``tt`` mirror dialect: Triton 3.6.0's TTIR ops, types and attributes in xDSL.

Every op here has

* the operand, result, region and property names and types of Triton's ODS definition
  (``include/triton/Dialect/Triton/IR/TritonOps.td`` at v3.6.0), so that the generic form
  xDSL prints is parsed by Triton's MLIR as the same op (``operandSegmentSizes``, ``cache``,
  ``evict``, ``isVolatile``, ``boundaryCheck``, ``inputPrecision``, ``sem``, ``scope`` ...);
* a parser and printer for Triton's *custom* assembly syntax (the declarative
  ``assemblyFormat`` of the ``.td`` file, or the C++ printer for ``tt.func``), so that the text
  Triton prints for a TTIR module parses here and the text printed here parses in Triton.
  Where xDSL's declarative format reproduces Triton's syntax byte for byte, the op has an
  ``assembly_format`` (ODS's, with the directives of :mod:`.formats` for enum keywords,
  ``oilist`` and prefix-less ``tt`` types); the others (``tt.load``/``tt.store``,
  ``tt.histogram``, ``tt.unsplat``, ``tt.make_tensor_ptr``, ``tt.func``, the arith/scf/llvm
  overrides) keep hand-written ``parse``/``print``, each saying why;
* Python accessors with Triton's operand names (``LoadOp.ptr``, ``.mask``, ``.other``;
  ``DotOp.a/.b/.c``; ``FuncOp.sym_name`` ...) and a builder-friendly ``__init__``.

Triton's enum attributes (``CacheModifier``, ``MemSemantic`` ...) are ``I32EnumAttr``s: in
MLIR they are stored as ``i32`` integer attributes and printed as keywords by the custom
formats.  Here they are ``IntegerAttr`` properties of type ``i32`` too, and each has a Python
``IntEnum`` (:class:`CacheModifier`, :class:`EvictionPolicy`, :class:`MemSemantic`,
:class:`MemSyncScope`, :class:`RMWOp`, :class:`PaddingOption`, :class:`RoundingMode`,
:class:`PropagateNan`, :class:`InputPrecision`, :class:`ProgramIDDim`,
:class:`ScaleDotElemType`, :class:`DescriptorReduceKind`) whose values are Triton's.  Ops
expose the enum through a typed accessor next to the raw property, e.g.
``LoadOp.cache`` (the ``IntegerAttr``) and ``LoadOp.cache_modifier`` (the enum).

Also here: overrides of xDSL's ``arith.select``, ``arith.cmpi`` and ``arith.cmpf`` (Triton
compares and selects elementwise on tensors, with ``tensor<..xi1>`` results and conditions,
which xDSL's ops refuse, and attaches attributes to them), which
:func:`syncopate_mlir.context.make_context` registers in place of xDSL's.  They subclass
xDSL's classes, so ``isinstance(op, arith.CmpiOp)`` still holds.

The package is split by op family; every name is re-exported here, so
``from syncopate_mlir.dialects.tt import LoadOp`` works as before:

* :mod:`.types` -- enums, ``!tt.ptr`` / ``!tt.tensordesc`` and type helpers;
* :mod:`.formats` -- what the declarative formats need beyond xDSL's directives;
* :mod:`.parsing` -- the op base class, helpers of the hand-written parsers/printers,
  memory-effect traits;
* :mod:`.pointer`, :mod:`.shape`, :mod:`.memory`, :mod:`.descriptor`, :mod:`.compute`,
  :mod:`.reduction`, :mod:`.control` -- the ``tt`` ops by family;
* :mod:`.arith`, :mod:`.upstream` -- overrides of xDSL's ``arith``/``scf``/``gpu`` ops and
  ``llvm.intr.assume``.
"""

from __future__ import annotations

from xdsl.ir import Dialect

from .arith import *  # noqa: F403
from .arith import _ARITH_CASTS
from .compute import *  # noqa: F403
from .control import *  # noqa: F403
from .descriptor import *  # noqa: F403
from .memory import *  # noqa: F403
from .parsing import LoadEffects, PureIfPureProperty, TTOp  # noqa: F401
from .pointer import *  # noqa: F403
from .reduction import *  # noqa: F403
from .shape import *  # noqa: F403
from .types import *  # noqa: F403
from .upstream import *  # noqa: F403

globals().update({c.__name__: c for c in _ARITH_CASTS})

TT_OPS = [
    IntToPtrOp, PtrToIntOp, BitcastOp, FpToFpOp, ClampFOp, PreciseSqrtOp, PreciseDivFOp, MulhiUIOp,
    AddPtrOp, AdvanceOp, LoadOp, StoreOp, AtomicRMWOp, AtomicCASOp, SplatOp, UnsplatOp, ExpandDimsOp,
    ReshapeOp, BroadcastOp, CatOp, JoinOp, SplitOp, TransOp, GetProgramIdOp, GetNumProgramsOp, DotOp,
    DotScaledOp, ReduceOp, ReduceReturnOp, ScanOp, ScanReturnOp, MapElementwiseOp, MapElementwiseReturnOp,
    ExternElementwiseOp, MakeRangeOp, ElementwiseInlineAsmOp, HistogramOp, GatherOp, PrintOp, AssertOp,
    MakeTensorPtrOp, MakeTensorDescOp, DescriptorLoadOp, DescriptorStoreOp,
    DescriptorReduceOp, DescriptorGatherOp, DescriptorScatterOp, CallOp, FuncOp, ReturnOp,
]

TT_ATTRS = [PointerType, TensorDescType]

TT = Dialect("tt", TT_OPS, TT_ATTRS)

#: ops that replace xDSL's of the same name in the context, or that xDSL's dialects lack
#: (``llvm.intr.assume``), see the module docstring
OVERRIDE_OPS = [SelectOp, CmpiOp, CmpfOp, RemFOp, WhileOp, GpuBarrierOp, LLVMAssumeOp] + _ARITH_CASTS

__all__ = [
    "TT", "TT_OPS", "TT_ATTRS", "OVERRIDE_OPS", "PointerType", "TensorDescType",
    "CacheModifier", "EvictionPolicy", "MemSemantic", "MemSyncScope", "RMWOp", "PaddingOption",
    "RoundingMode", "PropagateNan", "InputPrecision", "ProgramIDDim", "ScaleDotElemType",
    "DescriptorReduceKind", "pointee_type", "pointer_type_like", "is_ptr_like", "element_type",
    "shape_of", "like", "i1_like",
] + [c.__name__ for c in TT_OPS + OVERRIDE_OPS]
