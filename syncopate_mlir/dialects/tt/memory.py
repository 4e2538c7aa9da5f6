"""Loads, stores and atomics through pointers (and block pointers)."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import BoolAttr, DenseArrayBase, IntegerAttr, i1, i32
from xdsl.ir import Attribute
from xdsl.irdl import (
    AttrSizedOperandSegments,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect
from xdsl.utils.exceptions import VerifyException

from .formats import enums, tt_op_definition
from .types import (
    CacheModifier,
    EvictionPolicy,
    MemSemantic,
    MemSyncScope,
    PaddingOption,
    RMWOp,
    i1_like,
    pointee_type,
    pointer_type_like,
)
from .parsing import (
    LoadEffects,
    TTOp,
    _CACHE_NONE,
    _EMPTY_I32_ARRAY,
    _EVICT_NORMAL,
    _FALSE,
    _SEGMENTS,
    _addr_space,
    view,
    _parse_attr_dict,
    _parse_cache_evict,
    _print_cache_evict,
    _print_operands,
    _resolve,
    _value,
)


class _PtrAccessOp(TTOp):
    """``tt.load`` and ``tt.store``: operands, ``cacheModifier`` / ``evictionPolicy`` keywords,
    the other properties, then only the pointer type (the other types derive from it)."""

    def print(self, printer: Printer):
        printer.print_string(" ")
        _print_operands(printer, self.operands)
        _print_cache_evict(printer, self)
        self._print_dict(printer, ("cache", "evict"))
        printer.print_string(" : ")
        printer.print_attribute(self.ptr.type)

    @classmethod
    def _parse_tail(cls, parser: Parser) -> tuple[dict, dict, Attribute]:
        """The properties, the discardable attributes and the pointer type after the operands."""
        props: dict = {}
        _parse_cache_evict(parser, props)
        p2, attrs = _parse_attr_dict(parser, cls)
        props.update(p2)
        parser.parse_punctuation(":")
        return props, attrs, parser.parse_type()


def _access_props(boundary_check: Sequence[int], cache, evict) -> dict[str, Attribute]:
    return {"boundaryCheck": DenseArrayBase.from_list(i32, list(boundary_check)),
            "cache": CacheModifier.coerce(cache).attr(),
            "evict": EvictionPolicy.coerce(evict).attr()}


@irdl_op_definition
class LoadOp(_PtrAccessOp):
    """``tt.load``: load from a pointer, a tensor of pointers, or a block pointer.

    Operands: ``ptr``, optional ``mask`` and ``other``.  Properties (ODS names):
    ``boundaryCheck`` (block pointers), ``padding``, ``cache``, ``evict``, ``isVolatile``."""

    name = "tt.load"
    traits = traits_def(LoadEffects())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    ptr = operand_def()
    mask = opt_operand_def()
    other = opt_operand_def()
    result = result_def()

    boundary_check = prop_def(DenseArrayBase, _EMPTY_I32_ARRAY, prop_name="boundaryCheck")
    padding = opt_prop_def(IntegerAttr)
    cache = prop_def(IntegerAttr, _CACHE_NONE)
    evict = prop_def(IntegerAttr, _EVICT_NORMAL)
    is_volatile = prop_def(BoolAttr, _FALSE, prop_name="isVolatile")

    def __init__(self, ptr, mask=None, other=None, *, boundary_check: Sequence[int] = (),
                 padding: PaddingOption | str | None = None,
                 cache: CacheModifier | str = CacheModifier.NONE,
                 evict: EvictionPolicy | str = EvictionPolicy.NORMAL, is_volatile: bool = False,
                 result_type: Attribute | None = None):
        ptr = _value(ptr)
        if result_type is None:
            result_type = pointee_type(ptr.type)
        props = {**_access_props(boundary_check, cache, evict),
                 "isVolatile": BoolAttr(bool(is_volatile), i1)}
        if padding is not None:
            props["padding"] = PaddingOption.coerce(padding).attr()
        super().__init__(operands=[ptr, [mask] if mask is not None else [],
                                   [other] if other is not None else []],
                         result_types=[result_type], properties=props)

    cache_modifier = view("cache", CacheModifier)
    eviction_policy = view("evict", EvictionPolicy)
    padding_option = view("padding", PaddingOption)
    volatile = view("is_volatile", bool)

    # Hand-written: the mask and other types are derived from the pointer type (i1 of its
    # shape, its pointee), which xDSL's format can only infer through equal-type variables.
    @classmethod
    def parse(cls, parser: Parser):
        ptr = parser.parse_unresolved_operand()
        rest = []
        while parser.parse_optional_punctuation(",") is not None:
            rest.append(parser.parse_unresolved_operand())
        if len(rest) > 2:
            parser.raise_error("tt.load takes at most a mask and an other value")
        props, attrs, pt = cls._parse_tail(parser)
        val_t = pointee_type(pt)
        types = [pt, i1_like(val_t), val_t][: 1 + len(rest)]
        ops = _resolve(parser, [ptr] + rest, types)
        segs = [1, 1 if len(rest) > 0 else 0, 1 if len(rest) > 1 else 0]
        props[_SEGMENTS] = DenseArrayBase.from_list(i32, segs)
        return cls.create(operands=ops, result_types=[val_t], properties=props, attributes=attrs)

    def verify_(self):
        if self.result.type != pointee_type(self.ptr.type):
            raise VerifyException(f"tt.load result type {self.result.type} does not match the "
                                  f"pointer type {self.ptr.type}")
        if self.mask is not None and self.mask.type != i1_like(self.result.type):
            raise VerifyException("tt.load mask must be i1 of the result's shape")
        if self.other is not None and self.other.type != self.result.type:
            raise VerifyException("tt.load other must have the result type")


@irdl_op_definition
class StoreOp(_PtrAccessOp):
    """``tt.store``: store ``value`` through ``ptr`` under an optional ``mask``.

    Properties (ODS names): ``boundaryCheck``, ``cache``, ``evict``."""

    name = "tt.store"
    traits = traits_def(MemoryWriteEffect())

    ptr = operand_def()
    value = operand_def()
    mask = opt_operand_def()

    boundary_check = prop_def(DenseArrayBase, _EMPTY_I32_ARRAY, prop_name="boundaryCheck")
    cache = prop_def(IntegerAttr, _CACHE_NONE)
    evict = prop_def(IntegerAttr, _EVICT_NORMAL)

    def __init__(self, ptr, value, mask=None, *, boundary_check: Sequence[int] = (),
                 cache: CacheModifier | str = CacheModifier.NONE,
                 evict: EvictionPolicy | str = EvictionPolicy.NORMAL):
        super().__init__(operands=[ptr, value, [mask] if mask is not None else []],
                         properties=_access_props(boundary_check, cache, evict))

    cache_modifier = view("cache", CacheModifier)
    eviction_policy = view("evict", EvictionPolicy)

    # Hand-written: the value and mask types are derived from the pointer type (see LoadOp).
    @classmethod
    def parse(cls, parser: Parser):
        ptr = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        val = parser.parse_unresolved_operand()
        rest = []
        if parser.parse_optional_punctuation(",") is not None:
            rest.append(parser.parse_unresolved_operand())
        props, attrs, pt = cls._parse_tail(parser)
        val_t = pointee_type(pt)
        ops = _resolve(parser, [ptr, val] + rest, [pt, val_t, i1_like(val_t)][: 2 + len(rest)])
        return cls.create(operands=ops, properties=props, attributes=attrs)

    def verify_(self):
        if self.value.type != pointee_type(self.ptr.type):
            raise VerifyException(f"tt.store value type {self.value.type} does not match the "
                                  f"pointer type {self.ptr.type}")
        if self.mask is not None and self.mask.type != i1_like(self.value.type):
            raise VerifyException("tt.store mask must be i1 of the value's shape")


@tt_op_definition
class AtomicRMWOp(TTOp):
    """``tt.atomic_rmw <op>, <sem>, <scope>, %ptr, %val (, %mask)? : (types) -> type``.

    Returns the old value.  Properties: ``atomic_rmw_op``, ``sem``, ``scope``."""

    name = "tt.atomic_rmw"
    assembly_format = 'custom<RMWOp>($atomic_rmw_op) `,` custom<MemSemantic>($sem) `,` custom<MemSyncScope>($scope) `,` $ptr `,` $val (`,` $mask^)? attr-dict `:` functional-type(operands, $result)'
    custom_directives = enums(RMWOp, MemSemantic, MemSyncScope)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    ptr = operand_def()
    val = operand_def()
    mask = opt_operand_def()
    result = result_def()

    atomic_rmw_op = prop_def(IntegerAttr)
    sem = prop_def(IntegerAttr)
    scope = prop_def(IntegerAttr)

    def __init__(self, rmw_op: RMWOp | str, ptr, val, mask=None, *,
                 sem: MemSemantic | str = MemSemantic.ACQUIRE_RELEASE,
                 scope: MemSyncScope | str = MemSyncScope.GPU, result_type: Attribute | None = None):
        val = _value(val)
        super().__init__(
            operands=[ptr, val, [mask] if mask is not None else []],
            result_types=[result_type or val.type],
            properties={"atomic_rmw_op": RMWOp.coerce(rmw_op).attr(),
                        "sem": MemSemantic.coerce(sem).attr(),
                        "scope": MemSyncScope.coerce(scope).attr()})

    rmw_op = view("atomic_rmw_op", RMWOp)
    mem_semantic = view("sem", MemSemantic)
    mem_scope = view("scope", MemSyncScope)

    def verify_(self):
        if self.ptr.type != pointer_type_like(self.val.type, _addr_space(self.ptr.type)):
            raise VerifyException("tt.atomic_rmw pointer type must match the value type")
        if self.mask is not None and self.mask.type != i1_like(self.val.type):
            raise VerifyException("tt.atomic_rmw mask must be i1 of the value's shape")


@tt_op_definition
class AtomicCASOp(TTOp):
    """``tt.atomic_cas <sem>, <scope>, %ptr, %cmp, %val : (types) -> type``: compare and swap,
    returns the old value.  Properties: ``sem``, ``scope``."""

    name = "tt.atomic_cas"
    assembly_format = 'custom<MemSemantic>($sem) `,` custom<MemSyncScope>($scope) `,` $ptr `,` $cmp `,` $val attr-dict `:` functional-type(operands, $result)'
    custom_directives = enums(MemSemantic, MemSyncScope)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    ptr = operand_def()
    cmp = operand_def()
    val = operand_def()
    result = result_def()

    sem = prop_def(IntegerAttr)
    scope = prop_def(IntegerAttr)

    def __init__(self, ptr, cmp, val, *, sem: MemSemantic | str = MemSemantic.ACQUIRE_RELEASE,
                 scope: MemSyncScope | str = MemSyncScope.GPU, result_type: Attribute | None = None):
        val = _value(val)
        super().__init__(operands=[ptr, cmp, val], result_types=[result_type or val.type],
                         properties={"sem": MemSemantic.coerce(sem).attr(),
                                     "scope": MemSyncScope.coerce(scope).attr()})

    mem_semantic = view("sem", MemSemantic)
    mem_scope = view("scope", MemSyncScope)

    def verify_(self):
        if self.cmp.type != self.val.type or self.result.type != self.val.type:
            raise VerifyException("tt.atomic_cas cmp, val and result must have one type")

