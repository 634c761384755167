"""The IR's data structures: values with use lists, operations, blocks, regions.

Ops are declared as classes (see `OpDef` users in `fusecc.dialects`):

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

Blocks keep their ops in a doubly linked list so that insertion and erasure
are O(1); passes stay linear in program size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterable, Iterator, Sequence

from fusecc.compiler import attributes as A
from fusecc.compiler.diagnostics import UNKNOWN_LOC, Location
from fusecc.compiler.traits import IsolatedFromAbove, Symbol, SymbolTable, Terminator, Trait
from fusecc.compiler.types import Type


from fusecc.compiler.errors import VerifyError  # noqa: E402 (re-exported: ops raise it from here)


# --------------------------------------------------------------------------- values


class Value:
    """An SSA value. `uses` maps (op, operand index) pairs in insertion order."""

    __slots__ = ("type", "_uses", "name_hint")

    def __init__(self, type: Type, name_hint: str | None = None):
        self.type = type
        self._uses: dict[tuple[Operation, int], None] = {}
        self.name_hint = name_hint

    @property
    def uses(self) -> list[tuple["Operation", int]]:
        return list(self._uses)

    @property
    def users(self) -> list["Operation"]:
        """Ops using this value, each once, in first-use order."""
        return list(dict.fromkeys(op for op, _ in self._uses))

    @property
    def num_uses(self) -> int:
        return len(self._uses)

    def has_uses(self) -> bool:
        return bool(self._uses)

    def has_one_use(self) -> bool:
        return len(self._uses) == 1

    def replace_all_uses_with(self, new: "Value") -> None:
        if new is self:
            return
        for op, index in list(self._uses):
            op.set_operand(index, new)

    def replace_uses_where(self, new: "Value", predicate: Callable[["Operation"], bool]) -> None:
        for op, index in list(self._uses):
            if predicate(op):
                op.set_operand(index, new)

    @property
    def owner(self):
        raise NotImplementedError

    @property
    def defining_op(self) -> "Operation | None":
        return None


class OpResult(Value):
    __slots__ = ("op", "index")

    def __init__(self, type: Type, op: "Operation", index: int):
        super().__init__(type)
        self.op = op
        self.index = index

    @property
    def owner(self) -> "Operation":
        return self.op

    @property
    def defining_op(self) -> "Operation":
        return self.op

    @property
    def parent_block(self) -> "Block | None":
        return self.op.parent

    def __repr__(self) -> str:
        return f"<result {self.index} of {self.op.name}: {self.type}>"


class BlockArgument(Value):
    __slots__ = ("block", "index")

    def __init__(self, type: Type, block: "Block", index: int, name_hint: str | None = None):
        super().__init__(type, name_hint)
        self.block = block
        self.index = index

    @property
    def owner(self) -> "Block":
        return self.block

    @property
    def parent_block(self) -> "Block":
        return self.block

    def __repr__(self) -> str:
        return f"<block argument {self.index}: {self.type}>"


# --------------------------------------------------------------------------- op declarations


@dataclass(frozen=True)
class OperandDef:
    """A named operand; `variadic` takes zero or more, `optional` zero or one."""

    name: str
    variadic: bool = False
    optional: bool = False


@dataclass(frozen=True)
class ResultDef:
    name: str
    variadic: bool = False


@dataclass(frozen=True)
class AttrDef:
    """A declared attribute.

    `kind` is checked by the verifier; `default` is what the accessor returns
    when the attribute is absent (`REQUIRED` makes absence an error);
    `choices` restricts string values.
    """

    name: str
    kind: "AttrKind"
    default: Any = None
    choices: tuple = ()
    doc: str = ""


REQUIRED = object()


class AttrKind:
    """How to check an attribute and turn it into a Python value."""

    def __init__(self, label: str, check: Callable[[A.Attribute], bool], to_python: Callable[[A.Attribute], Any] = lambda a: a.value):
        self.label = label
        self.check = check
        self.to_python = to_python

    def __repr__(self) -> str:
        return self.label


def _is_int(a):
    return isinstance(a, A.IntegerAttr)


INT = AttrKind("integer", _is_int)
FLOAT = AttrKind("float", lambda a: isinstance(a, (A.FloatAttr, A.IntegerAttr)), lambda a: float(a.value))
BOOL = AttrKind("bool", lambda a: isinstance(a, (A.BoolAttr, A.UnitAttr)))
STRING = AttrKind("string", lambda a: isinstance(a, A.StringAttr))
INT_ARRAY = AttrKind(
    "array of integers",
    lambda a: isinstance(a, A.ArrayAttr) and all(isinstance(e, A.IntegerAttr) for e in a.elements),
    lambda a: [e.value for e in a.elements],
)
STRING_ARRAY = AttrKind(
    "array of strings",
    lambda a: isinstance(a, A.ArrayAttr) and all(isinstance(e, A.StringAttr) for e in a.elements),
    lambda a: [e.value for e in a.elements],
)
DENSE = AttrKind("dense elements", lambda a: isinstance(a, A.DenseElementsAttr), lambda a: a)
TYPE = AttrKind("type", lambda a: isinstance(a, A.TypeAttr))
SYMBOL = AttrKind("symbol reference", lambda a: isinstance(a, A.SymbolRefAttr))
ANY = AttrKind("attribute", lambda a: True, lambda a: a)


OP_REGISTRY: dict[str, type["Operation"]] = {}


def register_op(cls: type["Operation"]) -> type["Operation"]:
    if cls.name in OP_REGISTRY and OP_REGISTRY[cls.name] is not cls:
        raise ValueError(f"operation {cls.name} registered twice")
    OP_REGISTRY[cls.name] = cls
    return cls


def lookup_op_class(name: str) -> type["Operation"] | None:
    return OP_REGISTRY.get(name)


# --------------------------------------------------------------------------- operations


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
        _install_accessors(cls)

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


def _install_accessors(cls: type[Operation]) -> None:
    """Named properties for declared operands, results and attributes.

    A name the class defines itself, or one the base `Operation` already
    uses (`name`, `body`, `result`, ...), is left alone."""

    def free(name: str) -> bool:
        return name not in cls.__dict__ and not hasattr(Operation, name)

    for index, definition in enumerate(cls.operand_defs):
        if free(definition.name):
            setattr(cls, definition.name, property(_operand_getter(cls, index)))
    for index, definition in enumerate(cls.result_defs):
        if free(definition.name):
            setattr(cls, definition.name, property(_result_getter(cls, index)))
    for definition in cls.attr_defs:
        if free(definition.name):
            setattr(cls, definition.name, property(lambda self, _n=definition.name: self.attr(_n)))


def _group_ranges(defs: Sequence, count: int) -> list[tuple[int, int]]:
    """Split `count` actual values among declared groups (at most one variadic
    or optional group takes what the fixed ones leave)."""
    fixed = sum(1 for d in defs if not (d.variadic or getattr(d, "optional", False)))
    flexible = count - fixed
    ranges, position = [], 0
    for d in defs:
        size = flexible if (d.variadic or getattr(d, "optional", False)) else 1
        ranges.append((position, position + size))
        position += size
    return ranges


def _operand_getter(cls, index):
    definition = cls.operand_defs[index]
    simple = all(not (d.variadic or d.optional) for d in cls.operand_defs)

    if simple:
        return lambda self: self._operands[index]

    def get(self):
        start, stop = _group_ranges(cls.operand_defs, len(self._operands))[index]
        values = self._operands[start:stop]
        if definition.variadic:
            return values
        return values[0] if values else None

    return get


def _result_getter(cls, index):
    definition = cls.result_defs[index]
    if not any(d.variadic for d in cls.result_defs):
        return lambda self: self.results[index]

    def get(self):
        start, stop = _group_ranges(cls.result_defs, len(self.results))[index]
        values = self.results[start:stop]
        return values if definition.variadic else values[0]

    return get


def check_operand_count(cls: type[Operation], count: int) -> str | None:
    """An error message when `count` operands do not fit the declaration."""
    if cls._fixed_operand_count == count:
        return None
    defs = cls.operand_defs
    fixed = sum(1 for d in defs if not (d.variadic or d.optional))
    variadic = any(d.variadic for d in defs)
    optional = sum(1 for d in defs if d.optional)
    if variadic:
        if count < fixed:
            return f"expects at least {fixed} operand{'s' * (fixed != 1)}, but got {count}"
        return None
    if not fixed <= count <= fixed + optional:
        expected = str(fixed) if not optional else f"{fixed} or {fixed + optional}"
        return f"expects {expected} operand{'s' * (fixed + optional != 1)}, but got {count}"
    return None


# --------------------------------------------------------------------------- blocks and regions


class Block:
    """A list of ops with arguments. Ops are linked; iterate with `for op in block`."""

    __slots__ = ("args", "parent", "_first", "_last", "_size", "_order_valid")

    def __init__(self, arg_types: Iterable[Type] = ()):
        self.args: list[BlockArgument] = []
        self.parent: Region | None = None
        self._first: Operation | None = None
        self._last: Operation | None = None
        self._size = 0
        self._order_valid = True
        for t in arg_types:
            self.add_argument(t)

    def add_argument(self, type: Type, name_hint: str | None = None) -> BlockArgument:
        arg = BlockArgument(type, self, len(self.args), name_hint)
        self.args.append(arg)
        return arg

    def erase_argument(self, index: int) -> None:
        if self.args[index]._uses:
            raise ValueError("cannot erase a block argument that is still used")
        del self.args[index]
        for i, arg in enumerate(self.args):
            arg.index = i

    @property
    def parent_op(self) -> Operation | None:
        return self.parent.parent if self.parent else None

    def __iter__(self) -> Iterator[Operation]:
        op = self._first
        while op is not None:
            nxt = op._next
            yield op
            op = nxt

    def __reversed__(self) -> Iterator[Operation]:
        op = self._last
        while op is not None:
            prev = op._prev
            yield op
            op = prev

    def __len__(self) -> int:
        return self._size

    @property
    def ops(self) -> list[Operation]:
        return list(self)

    @property
    def first_op(self) -> Operation | None:
        return self._first

    @property
    def last_op(self) -> Operation | None:
        return self._last

    @property
    def terminator(self) -> Operation | None:
        last = self._last
        return last if last is not None and last.has_trait(Terminator) else None

    def _link(self, op: Operation, before: Operation | None) -> None:
        if op.parent is not None:
            raise ValueError(f"{op.name} is already in a block")
        op.parent = self
        if before is None:
            op._prev, op._next = self._last, None
            if self._last is not None:
                self._last._next = op
                op._order = self._last._order + 1
            else:
                self._first = op
                op._order = 0
            self._last = op
        else:
            if before.parent is not self:
                raise ValueError("insertion point is not in this block")
            op._prev, op._next = before._prev, before
            if before._prev is not None:
                before._prev._next = op
            else:
                self._first = op
            before._prev = op
            self._order_valid = False
        self._size += 1

    def _unlink(self, op: Operation) -> None:
        if op._prev is not None:
            op._prev._next = op._next
        else:
            self._first = op._next
        if op._next is not None:
            op._next._prev = op._prev
        else:
            self._last = op._prev
        op._prev = op._next = None
        op.parent = None
        self._size -= 1

    def _ensure_order(self) -> None:
        if not self._order_valid:
            for i, op in enumerate(self):
                op._order = i
            self._order_valid = True

    def append(self, op: Operation) -> Operation:
        self._link(op, None)
        return op

    def insert_before(self, op: Operation, anchor: Operation) -> Operation:
        self._link(op, anchor)
        return op

    def insert_after(self, op: Operation, anchor: Operation) -> Operation:
        self._link(op, anchor._next)
        return op

    def clone_into(self, region: "Region", value_map: dict[Value, Value]) -> "Block":
        new = Block()
        region.add_block(new)
        for arg in self.args:
            value_map[arg] = new.add_argument(arg.type, arg.name_hint)
        for op in self:
            new.append(op.clone(value_map))
        return new


class Region:
    __slots__ = ("blocks", "parent")

    def __init__(self, blocks: Iterable[Block] = ()):
        self.blocks: list[Block] = []
        self.parent: Operation | None = None
        for block in blocks:
            self.add_block(block)

    def add_block(self, block: Block) -> Block:
        block.parent = self
        self.blocks.append(block)
        return block

    @property
    def block(self) -> Block:
        """The region's only block, created on first access when empty."""
        if not self.blocks:
            self.add_block(Block())
        return self.blocks[0]

    def clone(self, value_map: dict[Value, Value]) -> "Region":
        new = Region()
        for block in self.blocks:
            block.clone_into(new, value_map)
        return new


# --------------------------------------------------------------------------- symbols


def nearest_symbol_table(op: Operation) -> Operation | None:
    current = op.parent_op
    while current is not None and not current.has_trait(SymbolTable):
        current = current.parent_op
    return current


def lookup_symbol(from_op: Operation, name: str) -> Operation | None:
    """Find the op named `@name` in the symbol table enclosing `from_op`."""
    table = from_op if from_op.has_trait(SymbolTable) else nearest_symbol_table(from_op)
    while table is not None:
        for candidate in table.body:
            if candidate.has_trait(Symbol) and candidate.attr("sym_name") == name:
                return candidate
        table = nearest_symbol_table(table)
    return None


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
