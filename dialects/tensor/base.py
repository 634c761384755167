"""What every tensor op shares: type checking helpers, the op base class and
its evaluation contract."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from fusecc.compiler import attributes as A
from fusecc.compiler.ir import Operation, VerifyError
from fusecc.compiler.op_definitions import REQUIRED, ResultDef
from fusecc.compiler.types import ScalarType, TensorType, Type, broadcast_shapes, i1


class DomainError(ArithmeticError):
    """The operands lie outside the op's domain (for example a maximum over
    an empty axis). `evaluate` raises it, and only it, for operands it
    refuses: constant folding leaves such an op for run time, the reference
    interpreter reports it as an error of the program."""


def shape_str(shape: Sequence[int]) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def expect_tensor(t: Type, what: str) -> TensorType:
    if not isinstance(t, TensorType):
        raise VerifyError(f"{what} must be a tensor, but has type {t}")
    return t


def expect_same_element_type(types: Sequence[TensorType], what: str = "operands") -> ScalarType:
    first = types[0].element_type
    for t in types[1:]:
        if t.element_type is not first:
            names = ", ".join(str(x.element_type) for x in types)
            raise VerifyError(f"{what} must have the same element type, but have {names}")
    return first


def broadcast_or_fail(types: Sequence[TensorType]) -> tuple[int, ...]:
    shape = broadcast_shapes(*(t.shape for t in types))
    if shape is None:
        shapes = " and ".join(shape_str(t.shape) for t in types)
        raise VerifyError(f"operand shapes {shapes} do not broadcast")
    return shape


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank or rank == 0:
        raise VerifyError(f"{what} {axis} is out of range for a rank-{rank} tensor")
    return axis % rank


FLOAT_ONLY = "float"
NUMERIC = "numeric"  # any integer or float, not i1
ANY_ELEMENT = "any"


def check_element_class(element: ScalarType, allowed: str) -> None:
    if allowed == FLOAT_ONLY and not element.is_float:
        raise VerifyError(f"expects a floating-point element type, but got {element}")
    if allowed == NUMERIC and element is i1:
        raise VerifyError("expects a numeric element type, but got i1")


class TensorOp(Operation):
    """Base of the tensor ops: one tensor result, type inference as verifier.

    Each op defines its numbers with `evaluate(arrays) -> [array]`: numpy
    arrays in the storage dtype of the operand types in, one array per
    result in its storage dtype out. The reference interpreter and constant
    folding both call it; operands outside the op's domain raise DomainError.
    """

    has_type_inference = True
    result_defs = (ResultDef("result"),)

    @classmethod
    def get(cls, attributes: dict[str, A.Attribute], name: str):
        """An attribute's Python value from a raw dict, default filled in."""
        definition = cls._attr_index[name]
        found = attributes.get(name)
        if found is None:
            return None if definition.default is REQUIRED else definition.default
        return definition.kind.to_python(found)

    def evaluate(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError(f"'{self.name}' defines no evaluation")

    def evaluate_dynamic(self, args: Sequence[np.ndarray], result_shapes: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
        """`evaluate` where the result types have `?` dims: `result_shapes`
        are their sizes in this run. Only ops whose numbers depend on the
        result's shape beyond their operands' (reshape) override it."""
        return self.evaluate(args)

    def result_element(self, index: int = 0) -> ScalarType:
        return self.results[index].type.element_type


__all__ = [
    "ANY_ELEMENT",
    "FLOAT_ONLY",
    "NUMERIC",
    "DomainError",
    "TensorOp",
    "broadcast_or_fail",
    "broadcast_shapes",
    "check_element_class",
    "expect_same_element_type",
    "expect_tensor",
    "normalize_axis",
    "shape_str",
]
