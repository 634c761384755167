"""Parser for the textual IR (custom and generic forms), built on lark LALR.

Parsing is two steps. lark turns the text into light syntax tuples
(`syntax.py`: the grammar, lark's tables, syntax errors), then `_IRBuilder`
resolves SSA names in scope, builds ops and reports located errors; its
base `LiteralReader` (`literals.py`) reads types, attributes and dense
literals.

The custom form of an op is uniform across dialects:

    %r = dialect.op [@sym(] operands [)] {attrs} : (types) -> types {regions} loc(...)

`func.func` and `module` have their own MLIR syntax.

The parser knows no dialect: it looks every op up by name in the op
registry (`ir.lookup_op_class`), which the dialects fill when they are
loaded (`fusecc.dialects.load_all`, called by the package root as MLIR's
tools call `registerAllDialects`). `module` and `func.func` are
`builtin.module` and `func.func` looked up the same way.
"""

from __future__ import annotations

import functools
import gc
import re

import lark

from fusecc.compiler import attributes as A
from fusecc.compiler.diagnostics import FileLineColLoc
from fusecc.compiler.ir import Block, Operation, Region, VerifyError
from fusecc.compiler.op_definitions import lookup_op_class
from fusecc.compiler.literals import LiteralReader, _attribute_dicts
from fusecc.compiler.syntax import OpSyntax, lark_parser, set_grammar_store, syntax_error, token_piece
from fusecc.compiler.dim_binding import DIMS_ATTR, bind_arguments, bind_named_results, has_unbound, refine_results, type_compatible
from fusecc.compiler.types import FunctionType, TypeSyntaxError, parse_type_token


def registered_op(name: str) -> type[Operation]:
    """The class registered for `name`; a missing core op means the
    dialects were never loaded, which is a bug of the caller."""
    cls = lookup_op_class(name)
    if cls is None:
        raise RuntimeError(f"no op '{name}' is registered: load the dialects first (fusecc.dialects.load_all())")
    return cls


# --------------------------------------------------------------------------- name resolution


class _Scope:
    """SSA names visible in a region; lookups fall through to the parent."""

    __slots__ = ("names", "parent", "isolated")

    def __init__(self, parent: "_Scope | None", isolated: bool):
        self.names: dict[str, object] = {}
        self.parent = parent
        self.isolated = isolated

    def lookup(self, name: str):
        scope = self
        while scope is not None:
            found = scope.names.get(name)
            if found is not None:
                return found
            if scope.isolated:
                return None
            scope = scope.parent
        return None


_NUMERIC = re.compile(r"^[0-9]+$")


def _hint(name: str) -> str | None:
    """Source names are kept as hints unless they are bare numbers."""
    return None if _NUMERIC.match(name) else name


class _IRBuilder(LiteralReader):
    """Ops, SSA names in scope, blocks and regions."""

    # --- ops -----------------------------------------------------------------
    def module(self, items) -> Operation:
        ModuleOp = registered_op("builtin.module")
        modules = [op for op in items if op.kind == "module"]
        if modules and len(items) > 1:
            other = next(op for op in items if op is not modules[0]) if len(modules) == 1 else modules[1]
            raise self.fail(other.token, "a file holds either one 'module { ... }' or bare top-level ops, not both")
        if modules:
            return self.op(modules[0], None)
        module = ModuleOp.build()
        module.location = FileLineColLoc(self.filename, 1 + self.line_offset, 1)
        scope = _Scope(None, True)
        for item in items:
            module.body.append(self.op(item, scope))
        only = module.body.first_op
        if len(module.body) == 1 and isinstance(only, ModuleOp):
            return only.detach()  # a module written in the generic form
        return module

    def op(self, syntax: OpSyntax, scope: _Scope | None) -> Operation:
        if syntax.kind == "func":
            return self.func(syntax)
        if syntax.kind == "module":
            return self.module_op(syntax)
        return self.generic_or_custom(syntax, scope)

    def module_op(self, syntax: OpSyntax) -> Operation:
        module = registered_op("builtin.module").build()
        module.location = self.op_location(syntax)
        module.attributes.update(self.attributes(syntax.attrs))
        self.open_resources(module, syntax)
        if syntax.symbol is not None:
            module.attributes["sym_name"] = A.StringAttr(str(syntax.symbol)[1:])
        label_token, items = syntax.regions[0]
        scope = _Scope(None, True)
        for item in items:
            if isinstance(item, tuple):
                raise self.fail(item[1], "a module's body is one block without labels")
            module.body.append(self.op(item, scope))
        return module

    def func(self, syntax: OpSyntax) -> Operation:
        FuncOp = registered_op("func.func")
        scope = _Scope(None, True)
        block = Block()
        for arg in syntax.args:
            self.define_block_arg(block, scope, arg)
        attrs = self.attributes(syntax.attrs)
        self.bind_dims(block, attrs, syntax)
        ftype = FunctionType([a.type for a in block.args], self.types(syntax.result_types))
        attrs["sym_name"] = A.StringAttr(str(syntax.symbol)[1:])
        attrs["function_type"] = A.TypeAttr(ftype)
        func = FuncOp([], [], attrs, [], self.op_location(syntax))
        region = Region()
        self.fill_region(region, syntax.regions[0], scope, entry=block)
        func.add_region(region)
        if has_unbound(ftype):
            self.bind_function_results(func, ftype)
        return func

    def bind_dims(self, block: Block, attrs: dict, syntax: OpSyntax) -> None:
        """Give each `?` of the arguments its symbol (compiler/dim_binding.py)."""
        try:
            bound = bind_arguments([a.type for a in block.args], attrs.get(DIMS_ATTR))
        except ValueError as exc:
            raise self.fail(syntax.token, str(exc)) from None
        for arg, t in zip(block.args, bound):
            arg.type = t

    def bind_function_results(self, func, ftype: FunctionType) -> None:
        """Results written `?` take the returned values' expressions."""
        last = func.regions[0].blocks[0].last_op if func.regions[0].blocks else None
        if last is None or last.name != "func.return" or len(last.operands) != len(ftype.results):
            return  # the verifier reports the missing or mismatched return
        results = [v.type if type_compatible(v.type, want) else want for v, want in zip(last.operands, ftype.results)]
        func.attributes["function_type"] = A.TypeAttr(FunctionType(ftype.inputs, results))

    def define_block_arg(self, block: Block, scope: _Scope, arg) -> None:
        value_token, type_token, _loc = arg
        name = str(value_token)[1:]
        if "#" in name:
            raise self.fail(value_token, f"block argument %{name} cannot have a result number")
        if scope.names.get(name) is not None:
            raise self.fail(value_token, f"redefinition of SSA value '%{name}'")
        scope.names[name] = block.add_argument(self.type(type_token), _hint(name))

    def fill_region(self, region: Region, syntax, scope: _Scope, entry: Block | None = None, bind_args=None) -> None:
        """Add the blocks of `syntax` to `region`. A label starts a new block;
        `entry` (a function's argument block) takes the ops before any label.
        `bind_args`, an op whose class has `region_argument_types`, gives the
        `?` dims of the first block's arguments their expressions."""
        _lbrace, items = syntax
        blocks: list[Block] = [] if entry is None else [entry]
        block = entry
        for item in items:
            if isinstance(item, tuple):
                block = Block()
                blocks.append(block)
                for arg in item[2]:
                    self.define_block_arg(block, scope, arg)
                if bind_args and len(blocks) == 1:
                    try:
                        known_types = bind_args.region_argument_types()
                    except VerifyError as exc:
                        raise self.fail(item[1], f"'{bind_args.name}' op {exc}") from None
                    for value, known in zip(block.args, known_types):
                        if has_unbound(value.type) and type_compatible(known, value.type):
                            value.type = known
                continue
            if block is None:
                block = Block()
                blocks.append(block)
            block.append(self.op(item, scope))
        for block in blocks or [Block()]:
            region.add_block(block)

    def generic_or_custom(self, syntax: OpSyntax, scope: _Scope) -> Operation:
        name = self.string(syntax.name) if syntax.kind == "generic" else str(syntax.name)
        op_class = lookup_op_class(name)
        if op_class is None:
            raise self.fail(syntax.name, f"unknown operation '{name}'")
        attrs = self.attributes(syntax.attrs)
        if syntax.symbol is not None:
            if op_class.custom_symbol is None:
                raise self.fail(syntax.symbol, f"'{name}' takes no symbol operand")
            # A defining op (`loop.kernel @k`) names itself with a string, a
            # using op (`func.call @f`) refers to a symbol.
            definition = op_class._attr_index.get(op_class.custom_symbol)
            name_only = str(syntax.symbol)[1:]
            defines = definition is not None and definition.kind.label == "string"
            attrs[op_class.custom_symbol] = A.StringAttr(name_only) if defines else A.SymbolRefAttr(name_only)

        operand_names = _split_list(syntax.operands) if syntax.operands is not None else []
        operands = [self.use(syntax.operands, name, scope) for name in operand_names]
        declared, declared_results = self.signature(syntax.signature) if syntax.signature is not None else (None, None)
        if declared is not None:
            if len(declared) != len(operands):
                raise self.fail(
                    syntax.name,
                    f"'{name}' has {len(operands)} operand{'s' * (len(operands) != 1)} but {len(declared)} operand type{'s' * (len(declared) != 1)}",
                )
            for text, value, want in zip(operand_names, operands, declared):
                if value.type is not want and not type_compatible(value.type, want):
                    raise self.fail(
                        token_piece(syntax.operands, text), f"use of value '{text}' expects type {want}, but it has type {value.type}"
                    )

        result_names = self.result_names(syntax.results)
        if declared_results is not None:
            result_types = declared_results
            if DIMS_ATTR in attrs and declared_results:
                try:
                    result_types = bind_named_results(declared_results, attrs[DIMS_ATTR])
                except ValueError as exc:
                    raise self.fail(syntax.token, f"'{name}' op {exc}") from None
            if any(has_unbound(t) for t in result_types):
                result_types = self.refine(op_class, operands, attrs, result_types, syntax)
        elif not result_names:
            result_types = []
        else:
            result_types = self.infer(op_class, operands, attrs, syntax)
        if len(result_names) != len(result_types):
            raise self.fail(
                syntax.token,
                f"'{name}' defines {len(result_names)} result name{'s' * (len(result_names) != 1)} "
                f"but has {len(result_types)} result type{'s' * (len(result_types) != 1)}",
            )

        op = op_class(operands, result_types, attrs, [], self.op_location(syntax))
        isolated = op.has_trait(_isolated_trait())
        for region_syntax in syntax.regions:
            region = Region()
            self.fill_region(region, region_syntax, _Scope(scope, isolated), bind_args=getattr(op_class, "region_argument_types", None) and op)
            op.add_region(region)
        if syntax.regions and hasattr(op_class, "bind_results_from_regions"):
            op.bind_results_from_regions()
        for (hint, token), result in zip(result_names, op.results):
            result.name_hint = hint
        self.define_results(syntax.results, op, scope)
        return op

    def infer(self, op_class, operands, attrs, syntax):
        from fusecc.compiler.verifier import check_attributes
        from fusecc.compiler.ir import VerifyError

        try:
            check_attributes(op_class, attrs)
            return op_class.infer_result_types([v.type for v in operands], attrs)
        except VerifyError as exc:
            raise self.fail(syntax.token, f"'{op_class.name}' op {exc}") from None

    def refine(self, op_class, operands, attrs, declared, syntax):
        """Bind the `?` dims of written result types to the inferred expressions."""
        from fusecc.compiler.ir import VerifyError

        try:
            return refine_results(op_class, [v.type for v in operands], attrs, declared)
        except VerifyError as exc:
            raise self.fail(syntax.token, f"'{op_class.name}' op {exc}") from None

    def result_names(self, token) -> list[tuple[str | None, object]]:
        if token is None:
            return []
        text = str(token).rstrip()[:-1].strip()
        if "," in text:
            return [(_hint(part.strip()[1:]), token) for part in text.split(",")]
        name, _, count = text[1:].partition(":")
        count = int(count) if count else 1
        return [(_hint(name), token)] + [(None, token)] * (count - 1)

    def define_results(self, token, op: Operation, scope: _Scope) -> None:
        if token is None:
            return
        text = str(token).rstrip()[:-1].strip()
        if "," in text:
            names = [part.strip()[1:] for part in text.split(",")]
            entries = [(n, r) for n, r in zip(names, op.results)]
        else:
            name = text[1:].partition(":")[0]
            entries = [(name, op.results[0] if len(op.results) == 1 else tuple(op.results))]
        for name, value in entries:
            if scope.lookup(name) is not None or scope.names.get(name) is not None:
                raise self.fail(token, f"redefinition of SSA value '%{name}'")
            scope.names[name] = value

    def use(self, token, text: str, scope: _Scope):
        """The value `text` (`%x` or `%r#1`, one name of the VALUES `token`) names."""
        name, _, number = text[1:].partition("#")
        found = scope.lookup(name)
        if found is None:
            raise self.fail(token_piece(token, text), f"use of undefined value '%{name}'")
        if isinstance(found, tuple):
            if not number:
                raise self.fail(token_piece(token, text), f"'%{name}' names {len(found)} results; pick one with '%{name}#N'")
            index = int(number)
            if index >= len(found):
                raise self.fail(token_piece(token, text), f"result number {index} is out of range: '%{name}' has {len(found)} results")
            return found[index]
        if number and int(number) != 0:
            raise self.fail(token_piece(token, text), f"'%{name}' has a single result, not #{number}")
        return found

    def signature(self, token) -> tuple[list, list | None]:
        """(operand types, result types or None) of a signature: a SIGNATURE
        or TYPE_LIST token, or the spelled-out form as type tokens."""
        if isinstance(token, tuple):
            _, operands, results = token
            return self.types(operands), (self.types(results) if results is not None else None)
        text = str(token)
        found = _signatures.get(text)
        if found is None:
            found = _read_signature(text)
            if isinstance(found, tuple) and len(found) == 2 and isinstance(found[0], str):
                piece, message = found
                raise self.fail(token_piece(token, piece), message)
            _signatures[text] = found
        return found


_signatures: dict[str, tuple[list, list | None]] = {}


def _split_list(token) -> list[str]:
    """The comma-separated items of a token's text (types may hold commas inside <>)."""
    text = str(token)
    if "<" not in text:
        return [part.strip() for part in text.split(",") if part.strip()]
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    items.append(text[start:].strip())
    return [item for item in items if item]


def _read_signature(text: str):
    """Types of `: (A, B) -> R` or `: A, B`; on a bad type, (piece, message)."""
    body = text[1:].strip()
    if body.startswith("("):
        close = body.index(")")
        inputs_text, results_text = body[1:close], body[close + 1 :].strip()[2:].strip()
        if results_text.startswith("("):
            results_text = results_text[1:-1]
        pieces = (_split_list(inputs_text), _split_list(results_text))
    else:
        pieces = (_split_list(body), None)
    out = []
    for group in pieces:
        if group is None:
            out.append(None)
            continue
        types = []
        for piece in group:
            try:
                types.append(parse_type_token(piece))
            except TypeSyntaxError as exc:
                return (piece, str(exc))
        out.append(types)
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _isolated_trait():
    from fusecc.compiler.traits import IsolatedFromAbove

    return IsolatedFromAbove


# --------------------------------------------------------------------------- entry points


def parse_module(text: str, filename: str = "<stdin>", line_offset: int = 0, resource_file: str | None = None) -> Operation:
    """Parse a whole file into a `builtin.module`. Raises `DiagnosticError`.

    `line_offset` shifts reported lines, so that split-input chunks report
    positions in the original file. `resource_file` is where
    `dense_resource` elements come from, instead of the file the module
    names (which must lie in `filename`'s folder; this one may lie anywhere).
    """
    # Parsing allocates many long-lived objects and no cycles; the cyclic
    # collector would rescan them all repeatedly (40% of the time at 20k ops).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        items = lark_parser().parse(text, start="start")
        if isinstance(items, lark.Tree):
            items = items.children
        builder = _IRBuilder(filename, line_offset)
        builder.resource_path = resource_file
        return builder.module(list(items))
    except lark.exceptions.UnexpectedInput as exc:
        raise syntax_error(exc, text, filename, line_offset) from None
    finally:
        if gc_was_enabled:
            gc.enable()


def split_input(text: str) -> list[tuple[str, int]]:
    """Cut at `// -----` lines; returns (chunk, line offset of the chunk)."""
    chunks, current, start = [], [], 0
    for number, line in enumerate(text.split("\n")):
        if line.strip() == "// -----":
            chunks.append(("\n".join(current), start))
            current, start = [], number + 1
        else:
            current.append(line)
    chunks.append(("\n".join(current), start))
    return chunks


def clear_memo_tables() -> None:
    """Forget the spellings read so far (signatures, attribute dictionaries,
    type tokens), so that a benchmark measures a cold parse."""
    _signatures.clear()
    _attribute_dicts.clear()
    clear_type_cache = getattr(parse_type_token, "cache_clear", None)
    if clear_type_cache is not None:
        clear_type_cache()


__all__ = ["clear_memo_tables", "parse_module", "registered_op", "set_grammar_store", "split_input"]
