"""Operations, the IR's central data structure, and the structure's public
surface: `Value`, `Block` and `Region` live in `values` and `blocks` and are
re-exported here, so that `from fusecc.compiler.ir import Block, Operation,
Value` names the whole structure. How ops are declared (`OperandDef`,
`AttrDef`, `register_op`) is in `op_definitions`; symbol lookup in `symbols`.

Ops are declared as classes (see the users in `fusecc.dialects`):

    @register_op
    class AddOp(Operation):
        name = "tensor.add"
        traits = frozenset({Pure, Elementwise, Broadcasting, Commutative})
        operand_defs = (OperandDef("lhs"), OperandDef("rhs"))
        result_defs = (ResultDef("result"),)

        @classmethod
        def infer_result_types(cls, operand_types, attributes): ...

Named operands, results and attributes become properties (`op.lhs`,
`op.result`, `op.axes`), attribute properties return plain Python values
with the declared default filled in.
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

from fusecc.compiler import attributes as A
from fusecc.compiler.blocks import Block, Region
from fusecc.compiler.diagnostics import UNKNOWN_LOC, Location
from fusecc.compiler.errors import VerifyError
from fusecc.compiler.op_definitions import REQUIRED, AttrDef, OperandDef, ResultDef, install_accessors
from fusecc.compiler.traits import IsolatedFromAbove, Trait
from fusecc.compiler.types import Type
from fusecc.compiler.values import BlockArgument, OpResult, Value

__all__ = ["Block", "BlockArgument", "OpResult", "Operation", "Region", "Value", "VerifyError", "defined_above", "is_isolated"]


class Operation:
    """An operation: operands, results, attributes, regions, a location."""

    __slots__ = ("_operands", "results", "attributes", "regions", "parent", "location", "_prev", "_next", "_order")

    name: ClassVar[str] = "builtin.unregistered"
    traits: ClassVar[frozenset[type[Trait]]] = frozenset()
    operand_defs: ClassVar[tuple[OperandDef, ...]] = ()
    result_defs: ClassVar[tuple[ResultDef, ...]] = ()
    attr_defs: ClassVar[tuple[AttrDef, ...]] = ()
    region_count: ClassVar[int] = 0
    # The custom form may put one symbol first (`func.call @f(%a)`): its attribute name.
    custom_symbol: ClassVar[str | None] = None
    _attr_index: ClassVar[dict[str, AttrDef]] = {}
    _required_attrs: ClassVar[tuple[str, ...]] = ()
    _fixed_operand_count: ClassVar[int | None] = 0

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._attr_index = {d.name: d for d in cls.attr_defs}
        cls._required_attrs = tuple(d.name for d in cls.attr_defs if d.default is REQUIRED)
        flexible = any(d.variadic or d.optional for d in cls.operand_defs)
        cls._fixed_operand_count = None if flexible else len(cls.operand_defs)
        install_accessors(cls, Operation)

    def __init__(
        self,
        operands: Sequence[Value] = (),
        result_types: Sequence[Type] = (),
        attributes: dict[str, A.Attribute] | None = None,
        regions: Sequence["Region"] | int = 0,
        location: Location = UNKNOWN_LOC,
    ):
        self._operands: list[Value] = []
        self.results = [OpResult(t, self, i) for i, t in enumerate(result_types)]
        self.attributes: dict[str, A.Attribute] = dict(attributes) if attributes else {}
        self.parent: Block | None = None
        self.location = location
        self._prev: Operation | None = None
        self._next: Operation | None = None
        self._order = 0
        if isinstance(regions, int):
            regions = [Region() for _ in range(regions)]
        self.regions: list[Region] = []
        for region in regions:
            self.add_region(region)
        for operand in operands:
            self._append_operand(operand)

    # --- construction with inference ---------------------------------------
    @classmethod
    def create(
        cls,
        operands: Sequence[Value] = (),
        attributes: dict[str, Any] | None = None,
        result_types: Sequence[Type] | None = None,
        regions: Sequence["Region"] | int | None = None,
        location: Location = UNKNOWN_LOC,
    ):
        """Build an op, wrapping plain Python attribute values and inferring
        result types when they are not given."""
        attrs = {k: A.from_python(v) for k, v in (attributes or {}).items()}
        if result_types is None:
            result_types = cls.infer_result_types([v.type for v in operands], attrs)
        return cls(operands, result_types, attrs, cls.region_count if regions is None else regions, location)

    @classmethod
    def infer_result_types(cls, operand_types: list[Type], attributes: dict[str, A.Attribute]) -> list[Type]:
        if not cls.result_defs:
            return []  # terminators and other ops without results
        raise VerifyError("cannot infer its result types; give them explicitly")

    has_type_inference: ClassVar[bool] = False

    def verify_(self) -> None:
        """Op-specific checks beyond counts, attribute kinds and inference."""

    def fold(self, constant_operands: list[Any]) -> list[Any] | None:
        """Fold to constants or existing values; see passes.canonicalize."""
        return None

    # --- operands ---------------------------------------------------------
    @property
    def operands(self) -> tuple[Value, ...]:
        return tuple(self._operands)

    @property
    def num_operands(self) -> int:
        return len(self._operands)

    def operand(self, index: int) -> Value:
        return self._operands[index]

    def _append_operand(self, value: Value) -> None:
        index = len(self._operands)
        self._operands.append(value)
        value._uses[(self, index)] = None

    def set_operand(self, index: int, value: Value) -> None:
        old = self._operands[index]
        del old._uses[(self, index)]
        self._operands[index] = value
        value._uses[(self, index)] = None

    def set_operands(self, values: Sequence[Value]) -> None:
        self.drop_operand_uses()
        self._operands = []
        for value in values:
            self._append_operand(value)

    def drop_operand_uses(self) -> None:
        for index, value in enumerate(self._operands):
            value._uses.pop((self, index), None)

    # --- results ----------------------------------------------------------
    @property
    def result(self) -> OpResult:
        if len(self.results) != 1:
            raise ValueError(f"{self.name} has {len(self.results)} results, not one")
        return self.results[0]

    @property
    def result_types(self) -> list[Type]:
        return [r.type for r in self.results]

    # --- attributes -------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        """A declared attribute's Python value, or its declared default."""
        found = self.attributes.get(name)
        definition = self._attr_index.get(name)
        if found is None:
            if definition is not None and definition.default is not REQUIRED:
                return definition.default
            return default
        return definition.kind.to_python(found) if definition else found.value

    # --- regions ----------------------------------------------------------
    def add_region(self, region: "Region") -> "Region":
        region.parent = self
        self.regions.append(region)
        return region

    @property
    def body(self) -> "Block":
        """The single block of the first region."""
        return self.regions[0].block

    # --- structure --------------------------------------------------------
    def has_trait(self, trait: type[Trait]) -> bool:
        return trait in self.traits

    @property
    def parent_op(self) -> "Operation | None":
        block = self.parent
        if block is None or block.parent is None:
            return None
        return block.parent.parent

    def parent_of_type(self, op_class: type["Operation"]) -> "Operation | None":
        op = self.parent_op
        while op is not None and not isinstance(op, op_class):
            op = op.parent_op
        return op

    @property
    def next_op(self) -> "Operation | None":
        return self._next

    @property
    def prev_op(self) -> "Operation | None":
        return self._prev

    def is_before_in_block(self, other: "Operation") -> bool:
        block = self.parent
        if block is None or block is not other.parent:
            raise ValueError("ops are not in the same block")
        block._ensure_order()
        return self._order < other._order

    def is_ancestor_of(self, other: "Operation") -> bool:
        op = other
        while op is not None:
            if op is self:
                return True
            op = op.parent_op
        return False

    def walk(self, include_self: bool = True) -> list["Operation"]:
        """All ops nested in this one, in pre-order, as a list safe to mutate under."""
        out: list[Operation] = []
        stack = [self]
        while stack:
            op = stack.pop()
            out.append(op)
            for region in reversed(op.regions):
                for block in reversed(region.blocks):
                    stack.extend(reversed(block))
        return out if include_self else out[1:]

    def detach(self) -> "Operation":
        if self.parent is not None:
            self.parent._unlink(self)
        return self

    def erase(self) -> None:
        """Remove the op and everything nested; its results must be unused."""
        for result in self.results:
            if result._uses:
                users = ", ".join(sorted({u.name for u, _ in result._uses}))
                raise ValueError(f"cannot erase {self.name}: its result is still used by {users}")
        self.detach()
        self._drop_all_references()

    def _drop_all_references(self) -> None:
        self.drop_operand_uses()
        for region in self.regions:
            for block in region.blocks:
                for op in block:
                    op._drop_all_references()

    def clone(self, value_map: dict[Value, Value] | None = None) -> "Operation":
        """Deep copy; operands found in `value_map` are remapped, and the map
        is extended with this op's results and nested values."""
        value_map = {} if value_map is None else value_map
        new = type(self).__new__(type(self))
        Operation.__init__(
            new,
            [value_map.get(v, v) for v in self._operands],
            [r.type for r in self.results],
            self.attributes,
            0,
            self.location,
        )
        for old_result, new_result in zip(self.results, new.results):
            new_result.name_hint = old_result.name_hint
            value_map[old_result] = new_result
        for region in self.regions:
            new.add_region(region.clone(value_map))
        return new

    def __repr__(self) -> str:
        return f"<{self.name} at {self.location}>"


# --------------------------------------------------------------------------- structure queries


def defined_above(value: Value, region: Region) -> bool:
    """True when `value` is defined outside `region`."""
    block = value.parent_block
    while block is not None:
        if block.parent is region:
            return False
        parent_op = block.parent.parent if block.parent else None
        block = parent_op.parent if parent_op else None
    return True


def is_isolated(op: Operation) -> bool:
    return op.has_trait(IsolatedFromAbove)
