"""The op table of docs/language.md, generated from the tensor dialect's op
classes (their operands, attributes with defaults and choices, and docstrings),
so that the reference cannot drift from the code.

    python -m fusecc.tools.language_reference            # print the table
    python -m fusecc.tools.language_reference --write docs/language.md
    python -m fusecc.tools.language_reference --check docs/language.md   # exit 1 if stale
"""

from __future__ import annotations

import argparse
import pathlib
import sys

BEGIN = "<!-- BEGIN GENERATED OP TABLE: python -m fusecc.tools.language_reference --write docs/language.md -->"
END = "<!-- END GENERATED OP TABLE -->"


def tensor_ops() -> dict[str, type]:
    from fusecc.compiler.op_definitions import OP_REGISTRY
    import fusecc.dialects.tensor  # noqa: F401  (registers the ops)

    return {name: cls for name, cls in sorted(OP_REGISTRY.items()) if name.startswith("tensor.")}


def _operands(cls) -> str:
    parts = []
    for operand in cls.operand_defs:
        parts.append(f"`{operand.name}`" + (" …" if operand.variadic else "") + (" (optional)" if operand.optional else ""))
    return ", ".join(parts) or "–"


def _attributes(cls) -> str:
    from fusecc.compiler.op_definitions import REQUIRED

    parts = []
    for attr in cls.attr_defs:
        kind = getattr(attr.kind, "name", str(attr.kind))
        if attr.choices:
            kind = " \\| ".join(f'`"{c}"`' for c in attr.choices)
        if attr.default is REQUIRED:
            default = "required"
        elif attr.default is None:
            default = "optional"
        else:
            default = f"default `{str(attr.default).lower() if isinstance(attr.default, bool) else attr.default}`"
        parts.append(f"`{attr.name}`: {kind}, {default}")
    return "; ".join(parts) or "–"


def _semantics(cls) -> str:
    text = " ".join((cls.__doc__ or "").split())
    return text.replace("|", "\\|")


ELEMENT_CLASSES = {"float": "floats", "numeric": "integers and floats (not i1)", "any": "any"}


def _elements(cls) -> str:
    return ELEMENT_CLASSES.get(getattr(cls, "element_class", None), "per operand (the verifier says)")


def op_table() -> str:
    lines = ["| op | operands | attributes | element types | semantics (numpy) |", "|---|---|---|---|---|"]
    for name, cls in tensor_ops().items():
        lines.append(f"| `{name}` | {_operands(cls)} | {_attributes(cls)} | {_elements(cls)} | {_semantics(cls)} |")
    return "\n".join(lines) + "\n"


def rewrite(text: str) -> str:
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + op_table() + text[end:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusecc.tools.language_reference", description=__doc__.split("\n\n")[0])
    group = p.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="MD", help="rewrite the generated block of this file")
    group.add_argument("--check", metavar="MD", help="exit 1 if this file's generated block is stale")
    args = p.parse_args(argv)
    if args.write or args.check:
        path = pathlib.Path(args.write or args.check)
        text = path.read_text()
        fresh = rewrite(text)
        if args.check:
            if fresh != text:
                print(f"{path}: the op table is stale; run python -m fusecc.tools.language_reference --write {path}", file=sys.stderr)
                return 1
            return 0
        path.write_text(fresh)
        return 0
    sys.stdout.write(op_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
