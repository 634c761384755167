"""Which aten ops reach the translator: torch's core aten decompositions,
except attention, which stays one op because fusecc has tensor.attention
(torch's math decomposition of it adds NaN guards, any() and full_like,
that the tensor dialect has no use for)."""

from __future__ import annotations

import torch

KEPT_WHOLE = ("_scaled_dot_product_flash_attention_for_cpu", "scaled_dot_product_attention")


def decompositions() -> dict:
    from torch._decomp import core_aten_decompositions

    table = dict(core_aten_decompositions())
    for op in KEPT_WHOLE:
        packet = getattr(torch.ops.aten, op, None)
        if packet is not None:
            table.pop(packet.default, None)
    return table


__all__ = ["decompositions"]
