"""Matmuls and attentions in canonical form, and what their kernels need.

The tile choosers (`gpu_matmul_tiles.py`, `cpu_matmul_tiles.py`,
`attention_tiles.py`), the fusion cost model and the lowering templates all
start here:

* `MatmulShape`, `AttentionShape`: a contraction in canonical form (the
  templates' `MatmulProblem` and `AttentionProblem` add the indexing);
  `at_hints` puts a problem's `?` dims at their --shape-hint sizes;
* `KernelResources`: the registers and shared memory a choice of tiles
  needs, and `resource_problem`: which hardware limit they break.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

from fusecc.compiler.dims import hinted, hinted_shape
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.types import ScalarType, broadcast_shapes
from fusecc.passes.backends.hardware import Hardware
from fusecc.passes.tiling.shapes import compute_type, concat_boundaries


# The most specialised copies of the inner loops one kernel gets for the
# pieces of its concatenated operands (ranges along M x N x K); the cost model
# merges at most this many sibling matmuls (cost_model.sibling_merge_refusal).
MAX_SPECIALISED_COPIES = 16


@dataclass(frozen=True)
class MatmulShape:
    """One matmul in canonical form: [batch] × (M×K) · (K×N): what its tiles
    and costs depend on (the lowering's `MatmulProblem` adds the indexing)."""

    op: Operation  # the tensor.matmul
    batch: tuple[int, ...]
    m: int
    n: int
    k: int
    # The group's ops where the operands' producers are not yet a group's
    # region (a candidate group of the cost model): `concat_boundaries`' `inside`.
    inside: frozenset | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of_op(cls, op: Operation, inside=None) -> "MatmulShape":
        a, b = cls._logical(op.lhs.type.shape, op.attr("transpose_a")), cls._logical(op.rhs.type.shape, op.attr("transpose_b"))
        m = a[-2] if len(a) >= 2 else 1
        n = b[-1] if len(b) >= 2 else 1
        batch = broadcast_shapes(a[:-2], b[:-2])
        return cls(op, tuple(batch), m, n, a[-1], frozenset(inside) if inside is not None else None)

    @staticmethod
    def _logical(shape, transposed: bool) -> tuple[int, ...]:
        return (*shape[:-2], shape[-1], shape[-2]) if transposed else tuple(shape)

    @property
    def lhs(self) -> Value:
        return self.op.lhs

    @property
    def rhs(self) -> Value:
        return self.op.rhs

    @property
    def result(self) -> Value:
        return self.op.result

    @property
    def batch_size(self) -> int:
        return math.prod(self.batch)

    @property
    def accumulator(self) -> ScalarType:
        return compute_type(self.result.type.element_type)

    def piece_bounds(self) -> dict[str, tuple[int, ...]]:
        """Per axis of the product ("m", "n", "k"): 0, the offsets where a
        concatenated operand changes pieces (`concat_boundaries`), the extent.
        Sibling matmuls merged on concatenated weights cut N; at most
        MAX_SPECIALISED_COPIES combinations of ranges are specialised (N
        first, then K, then M), the other axes keep one range."""
        cuts: dict[str, set[int]] = {"m": set(), "n": set(), "k": set()}
        for operand, transposed, (row, col) in ((self.lhs, self.op.attr("transpose_a"), "mk"), (self.rhs, self.op.attr("transpose_b"), "kn")):
            rank = operand.type.rank
            if rank == 1:
                cuts["k"] |= concat_boundaries(operand, 0, self.inside)
                continue
            row_axis, col_axis = (rank - 1, rank - 2) if transposed else (rank - 2, rank - 1)
            cuts[row] |= concat_boundaries(operand, row_axis, self.inside)
            cuts[col] |= concat_boundaries(operand, col_axis, self.inside)
        extents = {"m": self.m, "n": self.n, "k": self.k}
        bounds, copies = {}, 1
        for axis in "nkm":
            inner = sorted(cuts[axis])
            if copies * (len(inner) + 1) > MAX_SPECIALISED_COPIES:
                inner = []
            copies *= len(inner) + 1
            bounds[axis] = (0, *inner, extents[axis])
        return bounds

    @property
    def k_splittable(self) -> bool:
        """Can the GPU FMA template sum K in separate ranges (split-K)? Only
        where it reads K as one range: it does not cut the pieces of an
        operand concatenated along K (`piece_bounds`). The one predicate the
        tile chooser, the cost model (through it) and the lowering ask, so
        such a matmul is tiled and costed as it runs: unsplit."""
        return len(self.piece_bounds()["k"]) == 2


@dataclass(frozen=True)
class AttentionShape:
    """One attention in canonical form: [batch] × S queries, T keys, depth D,
    value depth Dv (the lowering's `AttentionProblem` adds the indexing)."""

    op: Operation  # the tensor.attention
    batch: tuple[int, ...]
    s: int
    t: int
    d: int
    dv: int

    @classmethod
    def of_op(cls, op: Operation) -> "AttentionShape":
        q, k, v = (x.type.shape for x in (op.query, op.key, op.value))
        batch = broadcast_shapes(q[:-2], k[:-2], v[:-2])
        return cls(op, tuple(batch), q[-2], k[-2], q[-1], v[-1])

    @property
    def batch_size(self) -> int:
        return math.prod(self.batch)

    @property
    def mask(self) -> Value | None:
        return self.op.mask

    @property
    def scale(self) -> float:
        return self.op.effective_scale()

    @property
    def causal(self) -> bool:
        return bool(self.op.attr("causal"))


def at_hints(problem):
    """A matmul or attention problem with its dynamic sizes at the
    --shape-hint sizes (compiler/dims.py): what a cost or a choice that
    compares sizes sees of a group with `?` dims."""
    changes = {}
    for field in fields(problem):
        value = getattr(problem, field.name)
        if isinstance(value, tuple) and not all(type(d) is int for d in value):
            changes[field.name] = hinted_shape(value)
        elif hasattr(value, "free_symbols"):
            changes[field.name] = hinted(value)
    return replace(problem, **changes) if changes else problem


@dataclass(frozen=True)
class KernelResources:
    """Estimated per-block needs of a kernel (the tiler, the cost model and the templates ask);
    on the CPU, registers are vector lanes and shared memory the tiles a
    worker keeps in cache."""

    threads: int
    registers_per_thread: int
    shared_bytes: int


# Registers a thread needs besides its tile values: indices, addresses, loop
# counters, the guard and staging temporaries (ptxas reports ~20-30 for such kernels).
BASE_REGISTERS = 32


def resource_problem(resources: KernelResources, hardware: Hardware, what: str) -> str | None:
    """The first limit of `hardware` that `resources` break, as a sentence, or None."""
    if not 0 < resources.threads <= hardware.max_threads_per_block:
        return f"{what} tiles need {resources.threads} threads per block; {hardware.name} allows 1..{hardware.max_threads_per_block}"
    if resources.registers_per_thread > hardware.registers_per_thread:
        return f"{what} tiles need ~{resources.registers_per_thread} registers per thread; {hardware.name} has {hardware.registers_per_thread}"
    if resources.registers_per_thread * resources.threads > hardware.registers_per_sm:
        return f"{what} tiles need ~{resources.registers_per_thread * resources.threads} registers per block; {hardware.name} has {hardware.registers_per_sm} per SM"
    if resources.shared_bytes > hardware.shared_memory_per_block:
        return f"{what} tiles need {resources.shared_bytes} bytes of shared memory; {hardware.name} allows {hardware.shared_memory_per_block} per block"
    return None
