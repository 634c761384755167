"""The `tensor` dialect: value-semantics tensor ops with numpy's semantics.

This is the input language of `../shared/spec/tensor-ir.md`. Each op declares
its operands, attributes, traits (including its fusion class), a result type
inference that is also its main verifier, and its numbers: `evaluate`, which
the reference interpreter (`runtime/reference.py`) and constant folding both
call. The modules hold one family each:

    base          type-checking helpers, `TensorOp`, `DomainError`
    numerics      storage rounding and the shared numeric rules (pow, erf, division)
    formulas      the composite ops' formulas, once, over an arithmetic interface
    elementwise   constant, binary, unary, cast, cmp, select
    reductions    reduce_*, softmax, layernorm, rmsnorm
    contractions  matmul, attention
    layout        reshape, transpose, broadcast_to, slice, concat, gather
"""

from . import formulas, numerics
from .base import *  # noqa: F401,F403
from .contractions import *  # noqa: F401,F403
from .elementwise import *  # noqa: F401,F403
from .layout import *  # noqa: F401,F403
from .reductions import *  # noqa: F401,F403
