"""How the ONNX importer reports a model it cannot take.

Every problem is a `UsageError` (the tools print `fusecc: error: ...` and
exit with 1) that names the model file and, where there is one, the node
(`node 'name' (OpType)`), so that a message points into the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusecc.compiler.diagnostics import UsageError


class ModelError(UsageError):
    """The model file is unreadable, hostile, or outside what we import."""


def node_label(op_type: str, name: str) -> str:
    return f"node '{name}' ({op_type})"


class NodeError(ModelError):
    """One node cannot be imported; the message names it."""

    def __init__(self, path: str, op_type: str, name: str, message: str):
        super().__init__(f"{path}: {node_label(op_type, name)}: {message}")
        self.op_type = op_type
        self.node_name = name


@dataclass(frozen=True)
class Unsupported:
    op_type: str
    name: str
    reason: str


class UnsupportedNodes(ModelError):
    """Every node of the model we cannot import, listed at once."""

    def __init__(self, path: str, found: list[Unsupported]):
        lines = [f"  {node_label(u.op_type, u.name)}: {u.reason}" for u in found]
        count = f"{len(found)} node{'s' * (len(found) != 1)}"
        super().__init__(f"{path}: the model has {count} that fusecc cannot import:\n" + "\n".join(lines))
        self.found = found
