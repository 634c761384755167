"""The `math` dialect: scalar transcendental functions on floats.

    %e = math.exp %x : (f32) -> f32
    %p = math.pow %x, %y : (f32, f32) -> f32
    %f = math.fma %a, %b, %c : (f32, f32, f32) -> f32    -- a·b + c, rounded once (C99 fma)
"""

from __future__ import annotations

from fusecc.compiler.ir import Operation, VerifyError
from fusecc.compiler.op_definitions import OperandDef, ResultDef, register_op
from fusecc.compiler.traits import Pure
from fusecc.compiler.types import FloatType


class MathOp(Operation):
    traits = frozenset({Pure})
    has_type_inference = True
    result_defs = (ResultDef("result"),)

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        first = operand_types[0]
        for t in operand_types:
            if not isinstance(t, FloatType):
                raise VerifyError(f"'{cls.name}' expects float operands, but got {t}")
            if t is not first:
                raise VerifyError(f"operands must have the same type, but have {first} and {t}")
        return [first]


OPERAND_NAMES = {1: ("input",), 2: ("lhs", "rhs"), 3: ("lhs", "rhs", "addend")}


def _math(op_name: str, arity: int = 1):
    operands = tuple(OperandDef(name) for name in OPERAND_NAMES[arity])
    name = op_name.split(".")[1].capitalize() + "Op"
    return register_op(type(name, (MathOp,), {"name": op_name, "operand_defs": operands}))


ExpOp = _math("math.exp")
LogOp = _math("math.log")
SqrtOp = _math("math.sqrt")
RsqrtOp = _math("math.rsqrt")
TanhOp = _math("math.tanh")
ErfOp = _math("math.erf")
AbsOp = _math("math.abs")
PowOp = _math("math.pow", 2)
# The matmul templates' multiply-accumulate: one rounding, so one FMA
# instruction on every backend and the loop interpreter agree bit for bit.
FmaOp = _math("math.fma", 3)
