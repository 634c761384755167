"""Parser for the textual IR (custom and generic forms), built on lark LALR.

Parsing is two steps. lark turns the text into light syntax tuples (its
LALR parser with an inline transformer builds no parse tree), then
`_IRBuilder` resolves SSA names in scope, builds ops and reports located
errors. Types are single tokens (`tensor<4x8xf32>`), which keeps the token
count, and so the parse time, low.

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
import os
import re
from typing import Callable

import lark
import numpy as np

from fusecc.compiler import attributes as A
from fusecc.compiler.diagnostics import DiagnosticError, FileLineColLoc, FusedLoc, Location, NameLoc, UNKNOWN_LOC, error
from fusecc.compiler.ir import Block, Operation, Region, lookup_op_class
from fusecc.compiler.types import FunctionType, ScalarType, ShapedType, TypeSyntaxError, f32, i1, i64, parse_type_token

GRAMMAR = r"""
start: operation*
attributes_only: ATTR_LBRACE [attr_entry ("," attr_entry)*] "}" -> attr_dict

?operation: custom_op | generic_op | func_op | module_op

custom_op: [RESULTS] OP_NAME [custom_operands] [attr_dict] [type_sig] region* [loc]
custom_operands: SYMBOL ["(" [VALUES] ")"] -> symbol_operands
               | VALUES                    -> plain_operands
generic_op: [RESULTS] STRING "(" [VALUES] ")" [generic_regions] [free_attr_dict] type_sig [loc]
func_op: FUNC_KW SYMBOL "(" [typed_arg ("," typed_arg)*] ")" ["->" result_types] ["attributes" free_attr_dict] region [loc]
module_op: MODULE_KW [SYMBOL] ["attributes" free_attr_dict] region [loc]

generic_regions: "(" region ("," region)* ")"
region: LBRACE region_item* "}"
?region_item: operation | block_label
block_label: CARET_ID ["(" typed_arg ("," typed_arg)* ")"] ":"
typed_arg: VALUE ":" TYPE [loc]

// Well-formed signatures lex as one token; the spelled-out rules below
// only see text those tokens reject, and give the precise syntax error.
type_sig: SIGNATURE                -> sig_token
        | TYPE_LIST                -> sig_token
        | ":" function_type        -> sig_function
        | ":" TYPE ("," TYPE)*     -> sig_types
function_type: "(" [TYPE ("," TYPE)*] ")" "->" result_types
result_types: TYPE                 -> one_type
            | "(" [TYPE ("," TYPE)*] ")" -> type_list

// After a custom op's operands '{' may open an attribute dictionary or a
// region; ATTR_LBRACE only matches when what follows reads as attributes.
// Elsewhere no region can follow, so any '{' opens the dictionary.
attr_dict: ATTR_DICT -> attr_dict_token
         | ATTR_LBRACE [attr_entry ("," attr_entry)*] "}"
free_attr_dict: ATTR_DICT -> attr_dict_token
              | (ATTR_LBRACE | LBRACE) [attr_entry ("," attr_entry)*] "}" -> attr_dict
attr_entry: BARE_ID ["=" attr_value]
?attr_value: INT [":" TYPE]        -> int_attr
    | FLOAT [":" TYPE]             -> float_attr
    | HEX [":" TYPE]               -> hex_attr
    | STRING                       -> string_attr
    | "true"                       -> true_attr
    | "false"                      -> false_attr
    | "unit"                       -> unit_attr
    | "[" [attr_value ("," attr_value)*] "]" -> array_attr
    | "dense" "<" [attr_value] ">" ":" TYPE  -> dense_attr
    | "dense_resource" "<" (BARE_ID | STRING) ">" ":" TYPE -> dense_resource_attr
    | SYMBOL                       -> symbol_attr
    | TYPE                         -> type_attr
    | function_type                -> function_type_attr

loc: LOC_KW "(" loc_body ")"
?loc_body: STRING ":" INT ":" INT  -> file_loc
    | "unknown"                    -> unknown_loc
    | STRING ["(" loc_body ")"]    -> name_loc
    | "fused" "[" loc_body ("," loc_body)* "]" -> fused_loc

// Operand lists and type signatures are single tokens: they make up most
// of a program's text, and lark's time is per token. The builder splits
// them (and memoises signatures, which repeat).
RESULTS.4: /%[A-Za-z0-9_.$\-]+(:[0-9]+)?(\s*,\s*%[A-Za-z0-9_.$\-]+)*\s*=(?!=)\s*/
VALUES.3: /%[A-Za-z0-9_.$\-]+(#[0-9]+)?(\s*,\s*%[A-Za-z0-9_.$\-]+(#[0-9]+)?)*\s*/
VALUE.3: /%[A-Za-z0-9_.$\-]+(#[0-9]+)?/
SIGNATURE.4: /:\s*\([^()]*\)\s*->\s*(\([^()]*\)|(tensor|memref|vector)<[^<>]*>|(f16|bf16|f32|f64|i1|i8|i32|i64|index)(?![A-Za-z0-9_$.]))\s*/
TYPE_LIST.3: /:\s*((tensor|memref|vector)<[^<>]*>|(f16|bf16|f32|f64|i1|i8|i32|i64|index)(?![A-Za-z0-9_$.]))(\s*,\s*((tensor|memref|vector)<[^<>]*>|(f16|bf16|f32|f64|i1|i8|i32|i64|index)(?![A-Za-z0-9_$.])))*\s*/
FUNC_KW.5: "func.func"
MODULE_KW.5: "module"
LOC_KW.5: "loc"
OP_NAME.2: /[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z0-9_$]+)+/
SYMBOL: /@[A-Za-z0-9_.$\-]+/
CARET_ID: /\^[A-Za-z0-9_.$\-]+/
TYPE.3: /(tensor|memref|vector)<[^<>]*>/ | /(f16|bf16|f32|f64|i1|i8|i32|i64|index)(?![A-Za-z0-9_$.])/
BARE_ID.1: /[A-Za-z_][A-Za-z0-9_$.]*/
HEX.4: /0x[0-9A-Fa-f]+/
FLOAT.3: /[-+]?[0-9]+\.[0-9]*([eE][-+]?[0-9]+)?/ | /[-+]?[0-9]+[eE][-+]?[0-9]+/
INT.2: /[-+]?[0-9]+/
STRING: /"([^"\\\n]|\\.)*"/
// A whole attribute dictionary without nested braces is one token too; the
// builder reads it once per distinct spelling with the rules below.
ATTR_DICT.6: /\{(?=\s*(\}|[A-Za-z_][A-Za-z0-9_$.]*\s*=|[A-Za-z_][A-Za-z0-9_$]*\s*[,}]))[^{}"]*("([^"\\\n]|\\.)*"[^{}"]*)*\}\s*/
ATTR_LBRACE.5: /\{(?=\s*(\}|[A-Za-z_][A-Za-z0-9_$.]*\s*=|[A-Za-z_][A-Za-z0-9_$]*\s*[,}]))/
LBRACE: "{"
COMMENT: /\/\/[^\n]*/
%import common.WS
%ignore WS
%ignore COMMENT
"""

# Human names for terminals in "expected ..." messages.
_TERMINAL_NAMES = {
    "RESULTS": "result names",
    "VALUE": "an SSA value",
    "VALUES": "SSA values",
    "SIGNATURE": "a type signature ': (...) -> ...'",
    "TYPE_LIST": "': types'",
    "OP_NAME": "an operation name",
    "SYMBOL": "a symbol (@name)",
    "CARET_ID": "a block label",
    "TYPE": "a type",
    "BARE_ID": "an attribute name",
    "HEX": "a hex literal",
    "FLOAT": "a float",
    "INT": "an integer",
    "STRING": "a string",
    "ATTR_LBRACE": "'{'",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "LPAR": "'('",
    "RPAR": "')'",
    "LSQB": "'['",
    "RSQB": "']'",
    "COMMA": "','",
    "COLON": "':'",
    "EQUAL": "'='",
    "MORETHAN": "'>'",
    "LESSTHAN": "'<'",
    "__ANON_0": "'->'",
    "FUNC_KW": "'func.func'",
    "MODULE_KW": "'module'",
    "LOC_KW": "'loc'",
    "$END": "end of input",
}


class OpSyntax:
    """One op as read, before names are resolved."""

    __slots__ = ("kind", "results", "name", "symbol", "operands", "attrs", "signature", "result_types", "regions", "loc", "token", "args")

    def __init__(self, kind, token):
        self.kind = kind  # "custom", "generic", "func", "module"
        self.token = token
        self.results = None
        self.name = None
        self.symbol = None
        self.operands = None  # a VALUES token, or None
        self.attrs = ()
        self.signature = None  # a SIGNATURE or TYPE_LIST token, or None
        self.result_types = None
        self.regions = ()
        self.loc = None
        self.args = ()


class _Reader(lark.Transformer):
    """lark callbacks: turn each rule into a tuple or an `OpSyntax`."""

    # --- ops -----------------------------------------------------------------
    def custom_op(self, c):
        results, name, operands, attrs, sig, *rest = c
        op = OpSyntax("custom", results or name)
        op.results = results
        op.name = name
        if operands is not None:
            op.symbol, op.operands = operands
        op.attrs = attrs or ()
        op.signature = sig
        op.regions = rest[:-1]
        op.loc = rest[-1]
        return op

    def generic_op(self, c):
        results, name, values, regions, attrs, signature, loc = c
        op = OpSyntax("generic", results or name)
        op.results = results
        op.name = name
        op.operands = values
        op.regions = regions or ()
        op.attrs = attrs or ()
        op.signature = signature
        op.loc = loc
        return op

    def func_op(self, c):
        keyword, symbol, *rest = c
        loc = rest.pop()
        region = rest.pop()
        attrs = rest.pop()
        result_types = rest.pop()
        op = OpSyntax("func", keyword)
        op.symbol = symbol
        op.args = [a for a in rest if a is not None]
        op.result_types = result_types or []
        op.attrs = attrs or ()
        op.regions = (region,)
        op.loc = loc
        return op

    def module_op(self, c):
        keyword, symbol, attrs, region, loc = c
        op = OpSyntax("module", keyword)
        op.symbol = symbol
        op.attrs = attrs or ()
        op.regions = (region,)
        op.loc = loc
        return op

    def symbol_operands(self, c):
        return (c[0], c[1])  # `@k` alone, `@k()` and `@k(%a)` all parse

    def plain_operands(self, c):
        return (None, c[0])

    def generic_regions(self, c):
        return c

    def region(self, c):
        return (c[0], c[1:])

    def block_label(self, c):
        return ("label", c[0], [a for a in c[1:] if a is not None])

    def typed_arg(self, c):
        return c  # [VALUE, TYPE, loc]

    # --- types ---------------------------------------------------------------
    def sig_token(self, c):
        return c[0]

    def sig_function(self, c):
        return ("spelled", c[0][0], c[0][1])

    def sig_types(self, c):
        return ("spelled", list(c), None)

    def function_type(self, c):
        return ([t for t in c[:-1] if t is not None], c[-1])

    def one_type(self, c):
        return [c[0]]

    def type_list(self, c):
        return [t for t in c if t is not None]

    # --- attributes ------------------------------------------------------------
    def attr_dict(self, c):
        return [e for e in c[1:] if e is not None]

    def attr_dict_token(self, c):
        return ("token", c[0])

    def attr_entry(self, c):
        return (c[0], c[1])

    def int_attr(self, c):
        return ("int", c[0], c[1])

    def float_attr(self, c):
        return ("float", c[0], c[1])

    def hex_attr(self, c):
        return ("hex", c[0], c[1])

    def string_attr(self, c):
        return ("string", c[0])

    def true_attr(self, c):
        return ("bool", True)

    def false_attr(self, c):
        return ("bool", False)

    def unit_attr(self, c):
        return ("unit",)

    def array_attr(self, c):
        return ("array", [e for e in c if e is not None])

    def dense_attr(self, c):
        return ("dense", c[0], c[1])

    def dense_resource_attr(self, c):
        return ("dense_resource", c[0], c[1])

    def symbol_attr(self, c):
        return ("symbol", c[0])

    def type_attr(self, c):
        return ("type", c[0])

    def function_type_attr(self, c):
        return ("function_type", c[0])

    # --- locations -------------------------------------------------------------
    def loc(self, c):
        return c[1]

    def file_loc(self, c):
        return ("file", c[0], c[1], c[2])

    def unknown_loc(self, c):
        return ("unknown",)

    def name_loc(self, c):
        return ("name", c[0], c[1])

    def fused_loc(self, c):
        return ("fused", c)


# Where lark keeps the LALR tables between processes (~60 ms per process):
# a function giving the file, set by whoever owns the cache folder (the
# package root hands in the runtime's); None builds the tables each time.
_grammar_cache: Callable[[], str] | None = None


def set_grammar_cache(path_of: Callable[[], str] | None) -> None:
    """Use `path_of()` as lark's table cache (called on the first parse)."""
    global _grammar_cache
    _grammar_cache = path_of
    _lark_parser.cache_clear()


@functools.lru_cache(maxsize=1)
def _lark_parser() -> lark.Lark:
    # lark checks the grammar's hash itself and rebuilds a stale or unreadable file.
    cache: str | bool = False
    if _grammar_cache is not None:
        try:
            cache = _grammar_cache()
        except OSError:  # no writable cache folder: build the tables each time
            cache = False
    return lark.Lark(
        GRAMMAR,
        parser="lalr",
        lexer="contextual",
        transformer=_Reader(),
        maybe_placeholders=True,
        cache=cache,
        start=["start", "attributes_only"],
    )


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


class _IRBuilder:
    def __init__(self, filename: str, line_offset: int):
        self.filename = filename
        self.line_offset = line_offset
        # While reading text parsed on its own (an attribute dictionary
        # token), the (line, column) where that text starts in the file.
        self._origin: tuple[int, int] | None = None
        # The file behind `dense_resource<...>`: given by the caller, or
        # named by the module's `fusecc.resources` (compiler/resources.py).
        self.resource_path: str | None = None
        self._resources = None

    # --- locations -----------------------------------------------------------
    def at(self, token) -> FileLineColLoc:
        line, column = token.line, token.column
        if self._origin is not None:
            origin_line, origin_column = self._origin
            column = column + origin_column - 1 if line == 1 else column
            line += origin_line - 1
        return FileLineColLoc(self.filename, line + self.line_offset, column)

    def fail(self, token, message: str) -> DiagnosticError:
        return error(self.at(token), message)

    def location(self, syntax) -> Location:
        kind = syntax[0]
        if kind == "file":
            return FileLineColLoc(self.string(syntax[1]), int(syntax[2]), int(syntax[3]))
        if kind == "unknown":
            return UNKNOWN_LOC
        if kind == "name":
            return NameLoc(self.string(syntax[1]), self.location(syntax[2]) if syntax[2] else None)
        return FusedLoc(tuple(self.location(s) for s in syntax[1]))

    def op_location(self, op: OpSyntax) -> Location:
        return self.location(op.loc) if op.loc is not None else self.at(op.token)

    # --- types -------------------------------------------------------------
    def type(self, token):
        try:
            return parse_type_token(str(token))
        except TypeSyntaxError as exc:
            raise self.fail(token, str(exc)) from None

    def types(self, tokens):
        return [self.type(t) for t in tokens]

    # --- literals ------------------------------------------------------------
    def string(self, token) -> str:
        try:
            return A.unquote_string(str(token))
        except ValueError as exc:
            raise self.fail(token, str(exc)) from None

    def integer(self, token, t: ScalarType) -> int:
        value = int(str(token))
        if not A.integer_in_range(value, t):
            raise self.fail(token, f"integer {value} is out of range for {t}")
        return value

    def hex_float(self, token, t: ScalarType) -> float:
        try:
            return A.float_from_bits(int(str(token), 16), t)
        except ValueError as exc:
            raise self.fail(token, str(exc)) from None

    # --- attributes --------------------------------------------------------
    def attributes(self, entries) -> dict[str, A.Attribute]:
        if isinstance(entries, tuple) and entries:  # ("token", ATTR_DICT)
            return self.attribute_token(entries[1])
        out = {}
        for key, value in entries:
            if key in out:
                raise self.fail(key, f"duplicate attribute '{key}'")
            out[str(key)] = A.UnitAttr() if value is None else self.attribute(value, key)
        return out

    def attribute(self, syntax, anchor) -> A.Attribute:
        kind = syntax[0]
        if kind == "int":
            t = self.type(syntax[2]) if syntax[2] else i64
            if t.is_float:
                return A.FloatAttr(float(int(syntax[1])), t)
            if t is i1:
                return A.BoolAttr(bool(self.integer(syntax[1], t)))
            return A.IntegerAttr(self.integer(syntax[1], t), t)
        if kind == "float":
            t = self.type(syntax[2]) if syntax[2] else f32
            if not t.is_float:
                raise self.fail(syntax[1], f"float literal {syntax[1]} with non-float type {t}")
            return A.FloatAttr(float(syntax[1]), t)
        if kind == "hex":
            t = self.type(syntax[2]) if syntax[2] else i64
            if t.is_float:
                return A.FloatAttr(self.hex_float(syntax[1], t), t)
            return A.IntegerAttr(self.hex_integer(syntax[1], t), t)
        if kind == "string":
            return A.StringAttr(self.string(syntax[1]))
        if kind == "bool":
            return A.BoolAttr(syntax[1])
        if kind == "unit":
            return A.UnitAttr()
        if kind == "array":
            return A.ArrayAttr(tuple(self.attribute(e, anchor) for e in syntax[1]))
        if kind == "symbol":
            return A.SymbolRefAttr(str(syntax[1])[1:])
        if kind == "type":
            return A.TypeAttr(self.type(syntax[1]))
        if kind == "function_type":
            inputs, results = syntax[1]
            return A.TypeAttr(FunctionType(self.types(inputs), self.types(results)))
        if kind == "dense":
            return self.dense(syntax[1], syntax[2], anchor)
        if kind == "dense_resource":
            return self.dense_resource(syntax[1], syntax[2])
        raise AssertionError(kind)

    def hex_integer(self, token, t: ScalarType) -> int:
        value = int(str(token), 16)
        if not A.integer_in_range(value, t):
            raise self.fail(token, f"integer {token} is out of range for {t}")
        return value

    def dense(self, body, type_token, anchor) -> A.DenseElementsAttr:
        t = self.type(type_token)
        if not isinstance(t, ShapedType):
            raise self.fail(type_token, f"dense elements need a tensor type, not {t}")
        dtype = t.element_type.numpy_dtype
        if body is None:
            if t.num_elements != 0:
                raise self.fail(type_token, f"empty dense<> for {t}, which has {t.num_elements} elements")
            return A.DenseElementsAttr(np.zeros(t.shape, dtype), t)
        if body[0] == "string":
            return self.dense_hex(body[1], t)
        values = self.dense_values(body, t.element_type, type_token)
        array = np.array(values, dtype=dtype)
        if array.ndim == 0:
            return A.DenseElementsAttr(array, t)  # a splat
        if array.shape != tuple(t.shape):
            raise self.fail(type_token, f"dense literal has shape {list(array.shape)} but the type {t} needs {list(t.shape)}")
        return A.DenseElementsAttr(array, t)

    def dense_hex(self, token, t: ShapedType) -> A.DenseElementsAttr:
        """MLIR's `dense<"0x...">`: raw little-endian elements, or one splat element."""
        text = self.string(token)
        if not text.startswith("0x"):
            raise self.fail(token, "a dense string must be hex data starting with 0x")
        try:
            raw = bytes.fromhex(text[2:])
        except ValueError:
            raise self.fail(token, "dense hex data has a character that is not a hex digit, or an odd number of digits") from None
        element_bytes = max(1, t.element_type.bitwidth // 8)
        if len(raw) % element_bytes:
            raise self.fail(token, f"dense hex data of {len(raw)} bytes is not a whole number of {t.element_type} elements")
        flat = A.elements_from_bytes(raw, t.element_type)
        if flat.size == 1:
            return A.DenseElementsAttr(flat[0], t)  # a splat
        if flat.size != t.num_elements:
            raise self.fail(token, f"hex data holds {flat.size} elements but {t} needs {t.num_elements}")
        return A.DenseElementsAttr(flat.reshape(t.shape), t)

    def open_resources(self, module: Operation, syntax: OpSyntax) -> None:
        """Open the resource file of a top-level module: the caller's, else
        the one its `fusecc.resources` names, inside the module's folder."""
        from fusecc.compiler import paths, resources

        named = module.attributes.get(resources.RESOURCES_ATTR)
        if self._resources is not None or (named is None and self.resource_path is None):
            return
        anchor = syntax.token
        if named is not None:
            attrs = syntax.attrs
            anchor = _piece(attrs[1], resources.RESOURCES_ATTR) if isinstance(attrs, tuple) else next((k for k, _ in attrs if str(k) == resources.RESOURCES_ATTR), anchor)
        try:
            if self.resource_path is not None:
                path = self.resource_path
            elif not isinstance(named, A.StringAttr):
                raise resources.ResourceError(f"'{resources.RESOURCES_ATTR}' must be a string naming a safetensors or .npz file")
            else:
                folder = os.path.dirname(os.path.abspath(self.filename)) if not self.filename.startswith("<") else os.getcwd()
                path = paths.resolve_inside(folder, named.value, "resource file")
            self._resources = resources.ResourceFile(path)
        except (resources.ResourceError, paths.PathOutsideFolder) as exc:
            raise self.fail(anchor, str(exc)) from None

    def dense_resource(self, name_token, type_token) -> A.DenseResourceElementsAttr:
        from fusecc.compiler import resources

        t = self.type(type_token)
        if not isinstance(t, ShapedType):
            raise self.fail(type_token, f"dense_resource needs a tensor type, not {t}")
        name = self.string(name_token) if str(name_token).startswith('"') else str(name_token)
        if self._resources is None:
            raise self.fail(
                name_token,
                f"dense_resource<{name}> needs a resource file, and the module names none: "
                f"write 'module attributes {{{resources.RESOURCES_ATTR} = \"weights.safetensors\"}} {{ ... }}'",
            )
        try:
            return self._resources.attribute(name, t)
        except resources.ResourceError as exc:
            raise self.fail(name_token, str(exc)) from None

    def dense_values(self, syntax, element: ScalarType, anchor):
        kind = syntax[0]
        if kind == "array":
            items = [self.dense_values(e, element, anchor) for e in syntax[1]]
            shapes = {np.shape(i) for i in items}
            if len(shapes) > 1:
                raise self.fail(anchor, "dense literal rows have different lengths")
            return items
        if kind == "bool":
            return syntax[1]
        if kind in ("int", "float"):
            if syntax[2] is not None:
                raise self.fail(syntax[2], "elements of a dense literal take no type; the tensor type gives it")
            text = str(syntax[1])
            if element.is_float:
                return float(text)
            if kind == "float":
                raise self.fail(syntax[1], f"float {text} in a dense literal of {element}")
            return self.integer(syntax[1], element) != 0 if element is i1 else self.integer(syntax[1], element)
        if kind == "hex":
            return self.hex_float(syntax[1], element) if element.is_float else self.hex_integer(syntax[1], element)
        raise self.fail(anchor, "expected a number, a boolean or a nested list in dense<...>")

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
        ftype = FunctionType([a.type for a in block.args], self.types(syntax.result_types))
        attrs = self.attributes(syntax.attrs)
        attrs["sym_name"] = A.StringAttr(str(syntax.symbol)[1:])
        attrs["function_type"] = A.TypeAttr(ftype)
        func = FuncOp([], [], attrs, [], self.op_location(syntax))
        region = Region()
        self.fill_region(region, syntax.regions[0], scope, entry=block)
        func.add_region(region)
        return func

    def define_block_arg(self, block: Block, scope: _Scope, arg) -> None:
        value_token, type_token, _loc = arg
        name = str(value_token)[1:]
        if "#" in name:
            raise self.fail(value_token, f"block argument %{name} cannot have a result number")
        if scope.names.get(name) is not None:
            raise self.fail(value_token, f"redefinition of SSA value '%{name}'")
        scope.names[name] = block.add_argument(self.type(type_token), _hint(name))

    def fill_region(self, region: Region, syntax, scope: _Scope, entry: Block | None = None) -> None:
        """Add the blocks of `syntax` to `region`. A label starts a new block;
        `entry` (a function's argument block) takes the ops before any label."""
        _lbrace, items = syntax
        blocks: list[Block] = [] if entry is None else [entry]
        block = entry
        for item in items:
            if isinstance(item, tuple):
                block = Block()
                blocks.append(block)
                for arg in item[2]:
                    self.define_block_arg(block, scope, arg)
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
                if value.type is not want:
                    raise self.fail(
                        _piece(syntax.operands, text), f"use of value '{text}' expects type {want}, but it has type {value.type}"
                    )

        result_names = self.result_names(syntax.results)
        if declared_results is not None:
            result_types = declared_results
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
            self.fill_region(region, region_syntax, _Scope(scope, isolated))
            op.add_region(region)
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
            raise self.fail(_piece(token, text), f"use of undefined value '%{name}'")
        if isinstance(found, tuple):
            if not number:
                raise self.fail(_piece(token, text), f"'%{name}' names {len(found)} results; pick one with '%{name}#N'")
            index = int(number)
            if index >= len(found):
                raise self.fail(_piece(token, text), f"result number {index} is out of range: '%{name}' has {len(found)} results")
            return found[index]
        if number and int(number) != 0:
            raise self.fail(_piece(token, text), f"'%{name}' has a single result, not #{number}")
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
                raise self.fail(_piece(token, piece), message)
            _signatures[text] = found
        return found


    def attribute_token(self, token) -> dict[str, A.Attribute]:
        """The attributes of an ATTR_DICT token, read once per spelling."""
        text = str(token).rstrip()
        found = _attribute_dicts.get(text)
        if found is None:
            try:
                entries = _lark_parser().parse(text, start="attributes_only")
            except lark.exceptions.UnexpectedInput as exc:  # pragma: no cover - the token's regex admits only dictionaries
                raise self.fail(token, f"malformed attribute dictionary: {exc}") from None
            # Positions inside `text` are relative; errors point at the token.
            saved, self._origin = self._origin, (token.line, token.column)
            try:
                found = self.attributes(entries)
            finally:
                self._origin = saved
            if len(text) < 512 and "dense_resource" not in text:  # do not keep large constants (or another file's resources) alive
                _attribute_dicts[text] = found
        return dict(found)


_signatures: dict[str, tuple[list, list | None]] = {}
_attribute_dicts: dict[str, dict[str, A.Attribute]] = {}


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


class _Piece:
    """A located part of a token, for error messages."""

    __slots__ = ("line", "column", "text")

    def __init__(self, line, column, text):
        self.line, self.column, self.text = line, column, text

    def __str__(self):
        return self.text


def _piece(token, text: str) -> _Piece:
    """Where `text` starts inside `token` (first occurrence as a whole item)."""
    whole = str(token)
    offset = 0
    for match in re.finditer(re.escape(text) + r"(?![A-Za-z0-9_.$#\-])", whole):
        offset = match.start()
        break
    before = whole[:offset]
    line = token.line + before.count("\n")
    column = offset - before.rfind("\n") if "\n" in before else token.column + offset
    return _Piece(line, column, text)


@functools.lru_cache(maxsize=1)
def _isolated_trait():
    from fusecc.compiler.traits import IsolatedFromAbove

    return IsolatedFromAbove


# --------------------------------------------------------------------------- errors


# Terminals that can start an operation; listed together they read "an operation".
_OP_STARTS = {"RESULTS", "OP_NAME", "STRING", "FUNC_KW", "MODULE_KW"}


def _describe_expected(expected) -> str:
    expected = set(expected)
    names = []
    if len(expected & _OP_STARTS) >= 3:
        expected -= _OP_STARTS
        names.append("an operation")
    names += sorted({_TERMINAL_NAMES.get(e, f"'{e.lower()}'" if e.isupper() and len(e) < 12 else e) for e in expected})
    if len(names) > 6:
        names = names[:6] + ["..."]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _end_position(text: str) -> tuple[int, int]:
    """Just after the last non-blank character: where more input was expected."""
    stripped = text.rstrip()
    line = stripped.count("\n") + 1
    return line, len(stripped) - (stripped.rfind("\n") + 1) + 1


def _syntax_error(exc: lark.exceptions.UnexpectedInput, text: str, filename: str, line_offset: int) -> DiagnosticError:
    line = getattr(exc, "line", 1)
    column = getattr(exc, "column", 1)
    if isinstance(exc, lark.exceptions.UnexpectedCharacters):
        char = getattr(exc, "char", "?")
        message = "unterminated string" if char == '"' else f"unexpected character '{char}'"
    elif isinstance(exc, lark.exceptions.UnexpectedToken) and exc.token.type != "$END":
        message = f"expected {_describe_expected(exc.expected)}, got '{exc.token}'"
    else:
        expected = getattr(exc, "expected", None)
        message = "unexpected end of input" + (f"; expected {_describe_expected(expected)}" if expected else "")
        line, column = _end_position(text)
    if line in (None, -1):
        line, column = 1, 1
    return error(FileLineColLoc(filename, line + line_offset, column), message)


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
        items = _lark_parser().parse(text, start="start")
        if isinstance(items, lark.Tree):
            items = items.children
        builder = _IRBuilder(filename, line_offset)
        builder.resource_path = resource_file
        return builder.module(list(items))
    except lark.exceptions.UnexpectedInput as exc:
        raise _syntax_error(exc, text, filename, line_offset) from None
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
