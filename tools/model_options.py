"""Command-line options of the tools that accept ONNX models."""

from __future__ import annotations

import argparse

from fusecc.driver.frontend import parse_shapes


def add_frontend_options(parser: argparse.ArgumentParser) -> None:
    """--shape and --memory-budget, for tools that accept ONNX models (--shape: and .ir programs with `?` dims)."""
    group = parser.add_argument_group("ONNX models and dynamic dims")
    group.add_argument("--shape", action="append", metavar="NAME=DIMS", default=None,
                       help="specialise an input (or a symbolic dim) of an ONNX model, or of a .ir program with '?' dims, "
                       "e.g. --shape input_ids=1x128, --shape B=8 (driver/specialise.py)")
    group.add_argument("--memory-budget", default=None, metavar="BYTES",
                       help="refuse ONNX models declaring more tensor bytes than this (e.g. 2G; default $FUSECC_ONNX_MEMORY_BUDGET or 8G)")


def frontend_options(args) -> dict:
    budget = getattr(args, "memory_budget", None)
    if budget is not None:
        from fusecc.frontends.onnx import parse_budget

        budget = parse_budget(budget)
    return {"shapes": parse_shapes(getattr(args, "shape", None)), "memory_budget": budget}
