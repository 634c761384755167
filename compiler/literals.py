"""Literals of the IR text: types, attributes, dense elements, locations.

`LiteralReader` turns the syntax tuples of `syntax.py` into typed,
located values: every error points at the token that caused it (inside an
attribute dictionary read as one token too). `dense_resource<name>` reads
the module's resource file (compiler/resources.py) inside the module's
folder (compiler/paths.py).
"""

from __future__ import annotations

import os

import lark
import numpy as np

from fusecc.compiler import attributes as A
from fusecc.compiler.diagnostics import DiagnosticError, FileLineColLoc, FusedLoc, Location, NameLoc, UNKNOWN_LOC, error
from fusecc.compiler.ir import Operation
from fusecc.compiler.syntax import OpSyntax, Piece, describe_unexpected, lark_parser, token_piece
from fusecc.compiler.types import FunctionType, ScalarType, ShapedType, TypeSyntaxError, f32, i1, i64, parse_type_token


class LiteralReader:
    """Tokens to located types, attributes and dense literals; the base of
    the IR builder, which adds ops, names and regions (`parser.py`)."""

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
            anchor = token_piece(attrs[1], resources.RESOURCES_ATTR) if isinstance(attrs, tuple) else next((k for k, _ in attrs if str(k) == resources.RESOURCES_ATTR), anchor)
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

    def attribute_token(self, token) -> dict[str, A.Attribute]:
        """The attributes of an ATTR_DICT token, read once per spelling."""
        text = str(token).rstrip()
        found = _attribute_dicts.get(text)
        if found is None:
            try:
                entries = lark_parser().parse(text, start="attributes_only")
            except lark.exceptions.UnexpectedInput as exc:  # the token's regex admits {name = <anything>}
                saved, self._origin = self._origin, (token.line, token.column)
                try:
                    where = self.at(Piece(getattr(exc, "line", 1), getattr(exc, "column", 1), ""))
                finally:
                    self._origin = saved
                raise error(where, f"malformed attribute dictionary: {describe_unexpected(exc)}") from None
            # Positions inside `text` are relative; errors point at the token.
            saved, self._origin = self._origin, (token.line, token.column)
            try:
                found = self.attributes(entries)
            finally:
                self._origin = saved
            if len(text) < 512 and "dense_resource" not in text:  # do not keep large constants (or another file's resources) alive
                _attribute_dicts[text] = found
        return dict(found)


# Attribute dictionaries read, by spelling (`clear_memo_tables` empties it).
_attribute_dicts: dict[str, dict[str, A.Attribute]] = {}
