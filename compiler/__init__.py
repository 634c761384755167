"""fusecc's IR core: types, attributes, ops, parser, printer, verifier, passes."""

from fusecc.compiler.diagnostics import DiagnosticError, InternalCompilerError
from fusecc.compiler.ir import Block, Operation, Region, Value, VerifyError
from fusecc.compiler.parser import parse_module, split_input
from fusecc.compiler.printer import print_op
from fusecc.compiler.verifier import verify

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
