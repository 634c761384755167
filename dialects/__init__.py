"""Dialects: one module per dialect. Importing a module registers its ops."""

from __future__ import annotations

import importlib

DIALECT_MODULES = ("builtin", "func", "tensor", "fusion", "arith", "math", "loop_kernel", "loop_schedule", "loop", "nvgpu", "loop_vector")


def load_all() -> None:
    """Register every dialect's ops (the parser needs all of them)."""
    for name in DIALECT_MODULES:
        importlib.import_module(f"fusecc.dialects.{name}")
