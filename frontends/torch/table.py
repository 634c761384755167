"""The aten op table: `translation("aten.mm", ...)` registers a handler
`(cx, args, kwargs) -> entry | tuple of entries` for an op packet
(`aten.add` covers add.Tensor and add.Scalar) or one overload
(`aten.add.Tensor`). Arguments arrive with FX nodes replaced by what they
produced: SSA values, numpy arrays (known at import time) or Python values."""

from __future__ import annotations

from typing import Callable

TABLE: dict[str, Callable] = {}


def translation(*names: str):
    def register(handler):
        for name in names:
            TABLE[name] = handler
        return handler

    return register


def handler_for(name: str) -> Callable | None:
    """`aten.add.Tensor` first, then its packet `aten.add`."""
    found = TABLE.get(name)
    if found is None and name.count(".") == 2:
        found = TABLE.get(name.rsplit(".", 1)[0])
    return found


def supported_ops() -> list[str]:
    return sorted(TABLE)


__all__ = ["TABLE", "handler_for", "supported_ops", "translation"]
