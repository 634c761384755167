"""The text of the IR, read by lark: the grammar and its first step.

lark's LALR parser, with an inline transformer that builds no parse tree,
turns the text into light syntax tuples and `OpSyntax` records, which the
IR builder (`parser.py`) resolves into ops. Types are single tokens
(`tensor<4x8xf32>`), and operand lists, signatures and attribute
dictionaries lex as single tokens too, which keeps the token count, and so
the parse time, low; their spelled-out rules serve error reporting. A
syntax error becomes a located diagnostic naming what was expected.
"""

from __future__ import annotations

import functools
import hashlib
import io
import re
from typing import Callable

import lark

from fusecc.compiler.diagnostics import DiagnosticError, FileLineColLoc, error

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
    "ATTR_DICT": "an attribute dictionary '{name = value, ...}'",
    "ATTRIBUTES": "'attributes'",
    "DENSE": "'dense<...>'",
    "DENSE_RESOURCE": "'dense_resource<...>'",
    "TRUE": "'true'",
    "FALSE": "'false'",
    "UNIT": "'unit'",
    "UNKNOWN": "'unknown'",
    "FUSED": "'fused'",
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


# The LALR tables take ~200 ms to build. Whoever owns a cache folder (the
# package root hands in the runtime's digest-checked cache) may keep them:
# `store(key, build)` returns the tables' bytes, calling `build()` on a miss.
# The bytes are a pickle, so they must come from a checked store, never from
# a file anyone could write (lark's own `cache=path` unpickles unchecked).
_grammar_store: Callable[[str, Callable[[], bytes]], bytes] | None = None


def set_grammar_store(store: Callable[[str, Callable[[], bytes]], bytes] | None) -> None:
    """Keep the parser tables through `store` (None: build them in each process)."""
    global _grammar_store
    _grammar_store = store
    lark_parser.cache_clear()


def _build_parser() -> lark.Lark:
    return lark.Lark(
        GRAMMAR,
        parser="lalr",
        lexer="contextual",
        transformer=_Reader(),
        maybe_placeholders=True,
        start=["start", "attributes_only"],
    )


def _tables_of(parser: lark.Lark) -> bytes:
    buffer = io.BytesIO()
    parser.save(buffer)
    return buffer.getvalue()


@functools.lru_cache(maxsize=1)
def lark_parser() -> lark.Lark:
    if _grammar_store is None:
        return _build_parser()
    key = hashlib.sha256(f"{GRAMMAR}\0lark {lark.__version__}".encode()).hexdigest()
    try:
        tables = _grammar_store(key, lambda: _tables_of(_build_parser()))
    except OSError:  # no usable cache folder: build the tables in this process
        return _build_parser()
    return lark.Lark.load(io.BytesIO(tables))


class Piece:
    """A located part of a token, for error messages."""

    __slots__ = ("line", "column", "text")

    def __init__(self, line, column, text):
        self.line, self.column, self.text = line, column, text

    def __str__(self):
        return self.text


def token_piece(token, text: str) -> Piece:
    """Where `text` starts inside `token` (first occurrence as a whole item)."""
    whole = str(token)
    offset = 0
    for match in re.finditer(re.escape(text) + r"(?![A-Za-z0-9_.$#\-])", whole):
        offset = match.start()
        break
    before = whole[:offset]
    line = token.line + before.count("\n")
    column = offset - before.rfind("\n") if "\n" in before else token.column + offset
    return Piece(line, column, text)


# --------------------------------------------------------------------------- errors


# Terminals that can start an operation; listed together they read "an operation".
_OP_STARTS = {"RESULTS", "OP_NAME", "STRING", "FUNC_KW", "MODULE_KW"}


def _describe_expected(expected) -> str:
    expected = set(expected)
    names = []
    if len(expected & _OP_STARTS) >= 3:
        expected -= _OP_STARTS
        names.append("an operation")
    names += sorted({_terminal_name(e) for e in expected})
    if len(names) > 6:
        names = names[:6] + ["..."]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _terminal_name(name: str) -> str:
    """What a user calls a terminal: never the grammar's own name (ATTR_DICT,
    __ANON_3). A terminal missing from the table shows its literal text if it
    has one."""
    if name in _TERMINAL_NAMES:
        return _TERMINAL_NAMES[name]
    pattern = next((t.pattern for t in lark_parser().terminals if t.name == name), None)
    if isinstance(pattern, lark.lexer.PatternStr):
        return f"'{pattern.value}'"
    return "another token"


# `tensor.constant dense<1.0> : tensor<4xf32>` (MLIR's arith.constant form) and
# `arith.constant 1.0 : f32`: say what to write instead of what the grammar expected.
_CONSTANT_OP = re.compile(r"((?:tensor|arith)\.constant)\s*$")
_CONSTANT_REST = re.compile(r"^\s*((?:dense|dense_resource)<.*>|[-+0-9.eE]+|true|false)\s*:\s*(\S+)")


def _constant_hint(text: str, line: int, column: int) -> str | None:
    lines = text.split("\n")
    if not 1 <= line <= len(lines):
        return None
    before, after = lines[line - 1][: column - 1], lines[line - 1][column - 1 :]
    op = _CONSTANT_OP.search(before)
    if op is None:
        return None
    rest = _CONSTANT_REST.match(after)
    value, type_text = (rest.group(1), rest.group(2)) if rest else ("dense<...>", "tensor<...>")
    if not type_text.startswith("tensor<"):
        element = type_text
        type_text = f"tensor<{element}>"
        if not value.startswith("dense"):
            value = f"dense<{value}>"
    elif not value.startswith("dense"):
        value = f"dense<{value}>"
    return (f"a constant takes its value as the 'value' attribute: write "
            f"'tensor.constant {{value = {value} : {type_text}}} : () -> {type_text}'"
            + (f" ('{op.group(1)} <value> : <type>' is MLIR's spelling, not this language's)" if rest else ""))


def describe_unexpected(exc: lark.exceptions.UnexpectedInput) -> str:
    """The message of a syntax error, in the user's terms, without a position."""
    if isinstance(exc, lark.exceptions.UnexpectedCharacters):
        char = getattr(exc, "char", "?")
        return "unterminated string" if char == '"' else f"unexpected character '{char}'"
    if isinstance(exc, lark.exceptions.UnexpectedToken) and exc.token.type != "$END":
        return f"expected {_describe_expected(exc.expected)}, got '{exc.token}'"
    expected = getattr(exc, "expected", None)
    return "unexpected end of input" + (f"; expected {_describe_expected(expected)}" if expected else "")


def _end_position(text: str) -> tuple[int, int]:
    """Just after the last non-blank character: where more input was expected."""
    stripped = text.rstrip()
    line = stripped.count("\n") + 1
    return line, len(stripped) - (stripped.rfind("\n") + 1) + 1


def syntax_error(exc: lark.exceptions.UnexpectedInput, text: str, filename: str, line_offset: int) -> DiagnosticError:
    line = getattr(exc, "line", 1)
    column = getattr(exc, "column", 1)
    message = describe_unexpected(exc)
    if not isinstance(exc, lark.exceptions.UnexpectedCharacters) and not (isinstance(exc, lark.exceptions.UnexpectedToken) and exc.token.type != "$END"):
        line, column = _end_position(text)
    if line in (None, -1):
        line, column = 1, 1
    message = _constant_hint(text, line, column) or message
    return error(FileLineColLoc(filename, line + line_offset, column), message)
