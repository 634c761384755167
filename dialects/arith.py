"""The `arith` dialect: scalar arithmetic for the loop level.

One op per operation, typed by its operands (`arith.add` adds floats or
integers alike), since every value's type is explicit:

    %c = arith.constant {value = 1.0} : () -> f32
    %s = arith.add %a, %b : (f32, f32) -> f32
    %p = arith.cmp %i, %n {predicate = "lt"} : (index, index) -> i1
    %h = arith.cast %x : (f32) -> f16

Integer division and remainder truncate toward zero, as in C; comparisons of
integers are signed; `max`/`min` of floats follow fmaxf/fminf.
"""

from __future__ import annotations

from fusecc.compiler import attributes as A
from fusecc.compiler.ir import Operation, VerifyError
from fusecc.compiler.op_definitions import ANY, REQUIRED, STRING, AttrDef, OperandDef, ResultDef, register_op
from fusecc.compiler.traits import Commutative, ConstantLike, Pure
from fusecc.compiler.types import ScalarType, Type, i1


def expect_scalar(t: Type, what: str) -> ScalarType:
    if not isinstance(t, ScalarType):
        raise VerifyError(f"{what} must be a scalar, but has type {t}")
    return t


class ScalarOp(Operation):
    has_type_inference = True
    result_defs = (ResultDef("result"),)


@register_op
class ConstantOp(ScalarOp):
    name = "arith.constant"
    traits = frozenset({Pure, ConstantLike})
    attr_defs = (AttrDef("value", ANY, REQUIRED),)

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        value = attributes.get("value")
        if isinstance(value, A.BoolAttr):
            return [i1]
        if not isinstance(value, (A.IntegerAttr, A.FloatAttr)):
            raise VerifyError(f"'value' must be a number or a boolean, not {value}")
        return [value.type]

    @classmethod
    def of(cls, value, type: ScalarType, location=None) -> "ConstantOp":
        if type is i1:
            attr = A.BoolAttr(bool(value))
        elif type.is_float:
            attr = A.FloatAttr(float(value), type)
        else:
            attr = A.IntegerAttr(int(value), type)
        kwargs = {} if location is None else {"location": location}
        return cls.create([], {"value": attr}, **kwargs)


class BinaryOp(ScalarOp):
    traits = frozenset({Pure})
    operand_defs = (OperandDef("lhs"), OperandDef("rhs"))
    allows = "any"  # "any", "int" (integers and i1), "float"

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        a = expect_scalar(operand_types[0], "lhs")
        b = expect_scalar(operand_types[1], "rhs")
        if a is not b:
            raise VerifyError(f"operands must have the same type, but have {a} and {b}")
        if cls.allows == "int" and a.is_float:
            raise VerifyError(f"'{cls.name}' expects integer operands, but got {a}")
        if cls.allows == "float" and not a.is_float:
            raise VerifyError(f"'{cls.name}' expects float operands, but got {a}")
        return [a]


def _binary(op_name: str, commutative: bool = False, allows: str = "any"):
    traits = BinaryOp.traits | ({Commutative} if commutative else set())
    name = op_name.split(".")[1].capitalize() + "Op"
    return register_op(type(name, (BinaryOp,), {"name": op_name, "traits": frozenset(traits), "allows": allows}))


AddOp = _binary("arith.add", True)
SubOp = _binary("arith.sub")
MulOp = _binary("arith.mul", True)
DivOp = _binary("arith.div")
RemOp = _binary("arith.rem", allows="int")
MaxOp = _binary("arith.max", True)
MinOp = _binary("arith.min", True)
AndOp = _binary("arith.and", True, allows="int")
OrOp = _binary("arith.or", True, allows="int")
XorOp = _binary("arith.xor", True, allows="int")


@register_op
class NegOp(ScalarOp):
    name = "arith.neg"
    traits = frozenset({Pure})
    operand_defs = (OperandDef("input"),)

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        return [expect_scalar(operand_types[0], "operand")]


CMP_PREDICATES = ("eq", "ne", "lt", "le", "gt", "ge")


@register_op
class CmpOp(ScalarOp):
    name = "arith.cmp"
    traits = frozenset({Pure})
    operand_defs = (OperandDef("lhs"), OperandDef("rhs"))
    attr_defs = (AttrDef("predicate", STRING, REQUIRED, choices=CMP_PREDICATES),)

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        a = expect_scalar(operand_types[0], "lhs")
        b = expect_scalar(operand_types[1], "rhs")
        if a is not b:
            raise VerifyError(f"operands must have the same type, but have {a} and {b}")
        return [i1]


@register_op
class SelectOp(ScalarOp):
    name = "arith.select"
    traits = frozenset({Pure})
    operand_defs = (OperandDef("condition"), OperandDef("true_value"), OperandDef("false_value"))

    @classmethod
    def infer_result_types(cls, operand_types, attributes):
        c, a, b = (expect_scalar(t, n) for t, n in zip(operand_types, ("condition", "true value", "false value")))
        if c is not i1:
            raise VerifyError(f"condition must be i1, but is {c}")
        if a is not b:
            raise VerifyError(f"true and false values must have the same type, but have {a} and {b}")
        return [a]


@register_op
class CastOp(ScalarOp):
    """Convert between scalar types: float<->float rounds to nearest, float->int
    truncates toward zero, int->float rounds, x->i1 is x != 0."""

    name = "arith.cast"
    traits = frozenset({Pure})
    operand_defs = (OperandDef("input"),)
    has_type_inference = False

    def verify_(self):
        expect_scalar(self.input.type, "operand")
        expect_scalar(self.result.type, "result")
