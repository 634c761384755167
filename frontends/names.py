"""Names that every front end gives the arguments it creates."""

from __future__ import annotations

import re

_SSA_UNSAFE = re.compile(r"[^A-Za-z0-9_.$\-]")


def ssa_names(names: list[str]) -> list[str]:
    """Argument names that read back as themselves: unsafe characters become
    `_`, a name starting with a digit gets a leading `_` (MLIR's suffix ids
    are all digits or start with a letter), repeats a suffix."""
    taken, out = set(), []
    for name in names:
        clean = _SSA_UNSAFE.sub("_", name) or "arg"
        if clean[0].isdigit():
            clean = "_" + clean
        candidate, n = clean, 1
        while candidate in taken:
            candidate, n = f"{clean}_{n}", n + 1
        taken.add(candidate)
        out.append(candidate)
    return out
