"""What one op costs in flops and where its multiply-adds run: the per-op
half of the fusion cost model (`cost_model.py` adds up groups; it re-exports
these names).

Sizes are the static ones, or a dynamic dim's --shape-hint size
(compiler/dims.py `hinted`). A contraction runs on tensor cores, TF32 tensor
cores or the FMA units as its template decides (`contraction_unit`).
"""

from __future__ import annotations

from fusecc.compiler.dims import hinted, hinted_shape
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.traits import Composite, ConstantLike, Contraction, Injective, Reduction
from fusecc.compiler.types import TensorType
from fusecc.passes.backends.hardware import Hardware

# Per-element work, in "flops" (one add or multiply = 1). Ops not listed
# cost 1 if Elementwise, 0 if Injective, 1 per input element if a Reduction.
FLOPS_PER_ELEMENT = {
    "tensor.div": 4,
    "tensor.reciprocal": 4,
    "tensor.sqrt": 4,
    "tensor.rsqrt": 4,
    "tensor.exp": 8,
    "tensor.log": 8,
    "tensor.tanh": 8,
    "tensor.erf": 8,
    "tensor.sigmoid": 10,
    "tensor.silu": 11,
    "tensor.gelu": 14,
    "tensor.pow": 16,
    "tensor.softmax": 16,
    "tensor.layernorm": 12,
    "tensor.rmsnorm": 8,
}


def numel(value: Value) -> int:
    t = value.type
    return hinted(t.num_elements) if isinstance(t, TensorType) else 1


def byte_size(value: Value) -> int:
    t = value.type
    return hinted(t.byte_size) if isinstance(t, TensorType) else 8


def shape_of(value: Value) -> tuple[int, ...]:
    """The value's shape, a dynamic dim at its --shape-hint size (compiler/dims.py)."""
    return hinted_shape(value.type.shape)


def flops_per_element(op: Operation) -> float:
    weight = FLOPS_PER_ELEMENT.get(op.name)
    if weight is not None:
        return weight
    if op.has_trait(Injective) or op.has_trait(ConstantLike):
        return 0
    return 1


def is_cheap(op: Operation) -> bool:
    """At most one flop per element: casts, scales, adds, layout changes."""
    return flops_per_element(op) <= 1


def is_attention(op: Operation) -> bool:
    return op.name == "tensor.attention"


def is_row_composite(op: Operation) -> bool:
    """softmax, layernorm, rmsnorm: composites that normalise rows."""
    return op.has_trait(Composite) and not is_attention(op)


def is_float16(value: Value) -> bool:
    t = value.type
    return isinstance(t, TensorType) and t.element_type.name in ("f16", "bf16")


# sm_80 (A100) brought f16/bf16/TF32 mma.sync with f32 accumulators.
MMA_MIN_SM = 80


# The tensor-core attention template keeps Q fragments, S and O in registers
# up to this head dimension (lowering/attention_mma.py MAX_HEAD_DIM; a test
# checks the two rules agree).
MMA_MAX_HEAD_DIM = 128


def contraction_unit(op: Operation, hardware: Hardware) -> str:
    """Where a contraction's multiply-adds run, as the templates choose
    (lowering/matmul_mma.py `mma_kind`, attention_mma.py `attention_mma_kind`):
    "tensor" for a GPU matmul of two f16 or two bf16 operands, or an
    attention whose q, k, v are all f16 or all bf16 with heads of at most
    128, on sm_80+; "tf32" for a matmul of two f32 operands where TF32 is
    allowed (`--allow-tf32`); else "fma" (and every CPU kernel)."""
    if not hardware.is_gpu or not hardware.arch.startswith("sm_") or int(hardware.arch[3:]) < MMA_MIN_SM:
        return "fma"
    if is_attention(op):
        q, k, v = op.operands[:3]
        types = {x.type.element_type.name for x in (q, k, v)}
        heads_fit = 0 < q.type.shape[-1] <= MMA_MAX_HEAD_DIM and 0 < v.type.shape[-1] <= MMA_MAX_HEAD_DIM
        return "tensor" if len(types) == 1 and types <= {"f16", "bf16"} and heads_fit else "fma"
    if not op.has_trait(Contraction):
        return "fma"
    a, b = (v.type.element_type for v in op.operands[:2])
    if a is not b:
        return "fma"
    if a.name in ("f16", "bf16"):
        return "tensor"
    if a.name == "f32" and hardware.tf32_matmuls:
        return "tf32"
    return "fma"


def unit_peak(unit: str, hardware: Hardware) -> float:
    """FLOP/s of `contraction_unit`'s answer."""
    return {"tensor": hardware.peak_tensor_flops, "tf32": hardware.peak_tf32_flops}.get(unit, hardware.peak_flops)


def op_flops(op: Operation, hardware: Hardware) -> tuple[float, float]:
    """(flops on tensor cores, other flops) for one evaluation of `op`."""
    if op.has_trait(Contraction):
        lhs, rhs = op.operands
        a = shape_of(lhs)
        k = a[-2] if op.attr("transpose_a") and len(a) >= 2 else a[-1]
        work = 2.0 * numel(op.result) * k
        return (work, 0.0) if contraction_unit(op, hardware) != "fma" else (0.0, work)
    if is_attention(op):
        q, k, v = op.operands[:3]
        s, t, d, dv = shape_of(q)[-2], shape_of(k)[-2], shape_of(q)[-1], shape_of(v)[-1]
        batch = numel(op.result) // max(1, s * dv)
        matmuls = 2.0 * batch * s * t * (d + dv)
        softmax = 6.0 * batch * s * t
        return (matmuls, softmax) if contraction_unit(op, hardware) == "tensor" else (0.0, matmuls + softmax)
    if op.has_trait(Reduction):
        return 0.0, float(numel(op.operands[0]))
    return 0.0, flops_per_element(op) * numel(op.results[0]) if op.results else 0.0
