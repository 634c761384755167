"""fusecc's IR core: types, attributes, ops, parser, printer, verifier, passes."""

from .diagnostics import DiagnosticError, InternalCompilerError
from .ir import Block, Operation, Region, Value, VerifyError
from .parser import parse_module, split_input
from .printer import print_op
from .verifier import verify

__all__ = [
    "Block",
    "DiagnosticError",
    "InternalCompilerError",
    "Operation",
    "Region",
    "Value",
    "VerifyError",
    "parse_module",
    "print_op",
    "split_input",
    "verify",
]
