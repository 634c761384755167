"""The function a fuzz program grows in: its arguments, ops and values
(names and types), with the draws every op family shares: an operand
(mostly a recent value), a shape (small, or large on one seed in ten), a
broadcast partner, a constant (NaN/±inf/-0 among its values, a quarter of
them dense_resource)."""

from __future__ import annotations

import random

import numpy as np

from fusecc.tools.fuzz.program import FLOATS, INTS, Invalid, Op, Type, result_types

MAX_ELEMENTS = 256
DIMS = (1, 1, 2, 3, 4, 5, 8)
# One seed in ten is large: rows longer than a vector or a tile, matmuls that
# pack, reductions that split, odd sizes that leave remainders.
LARGE_MAX_ELEMENTS = 8192
LARGE_DIMS = (1, 3, 16, 33, 64, 130)
SPECIALS = (np.nan, np.inf, -np.inf, -0.0, 0.0)
RESOURCE_FRACTION = 0.25  # of the constants drawn: dense_resource (docs/resources.md) instead of dense


class ProgramBuilder:
    """A function under construction: its arguments, ops and values (names
    and types), drawing names, shapes and constants from `rng`."""

    def __init__(self, rng: random.Random, float_type: str, empty: bool, large: bool = False):
        self.rng = rng
        self.dims, self.max_elements = (LARGE_DIMS, LARGE_MAX_ELEMENTS) if large else (DIMS, MAX_ELEMENTS)
        self.float = float_type
        self.empty = empty
        self.args: list[tuple[str, Type]] = []
        self.ops: list[Op] = []
        self.values: list[tuple[str, Type]] = []
        self.counter = 0
        self.features: set[str] = set()

    # --- names and values -------------------------------------------------------
    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def arg(self, t: Type, prefix: str = "a") -> str:
        name = self.fresh(prefix)
        self.args.append((name, t))
        self.values.append((name, t))
        return name

    def emit(self, kind: str, operands: list[str], attrs: dict | None = None, results: int = 1, callee_types=None, callee=None) -> list[str]:
        types = [self.type_of(v) for v in operands]
        op = Op(kind, operands, [self.fresh() for _ in range(results)], attrs or {})
        found = result_types(op, types, callee, callee_types)  # raises Invalid: the caller drew badly
        if any(t.size > self.max_elements * 4 for t in found):
            raise Invalid("too large")
        self.ops.append(op)
        for name, t in zip(op.results, found):
            self.values.append((name, t))
        self.features.add(kind)
        if kind == "pow" and found[0].dtype in INTS:
            self.features.add("pow:int")
        return op.results

    def type_of(self, name: str) -> Type:
        for n, t in reversed(self.values):
            if n == name:
                return t
        raise KeyError(name)

    def pick(self, accept=lambda t: True, recent: int = 4) -> str | None:
        """A value whose type `accept`s: mostly one of the last few."""
        found = [(n, t) for n, t in self.values if accept(t)]
        if not found:
            return None
        if self.rng.random() < 0.75:
            return self.rng.choice(found[-recent:])[0]
        return self.rng.choice(found)[0]

    def shape(self, rank: int | None = None) -> tuple[int, ...]:
        rank = self.rng.choice((1, 2, 2, 3, 3, 4)) if rank is None else rank
        dims = [self.rng.choice(self.dims) for _ in range(rank)]
        if self.empty and self.rng.random() < 0.3:
            dims[self.rng.randrange(rank)] = 0
        while int(np.prod(dims)) > self.max_elements:
            dims[dims.index(max(dims))] //= 2
        return tuple(dims)

    def float_value(self, min_rank: int = 0) -> str:
        v = self.pick(lambda t: t.dtype in FLOATS and len(t.shape) >= min_rank)
        return v if v is not None else self.arg(Type(self.shape(self.rng.randint(max(min_rank, 1), 3)), self.float))

    def broadcast_partner(self, t: Type) -> Type:
        """A shape that broadcasts with t's: fewer dims, some set to 1, or t's own."""
        r = self.rng.random()
        if r < 0.4:
            return t
        shape = list(t.shape)
        if r < 0.7 and shape:
            shape = shape[self.rng.randint(0, len(shape)) :]
        shape = [1 if self.rng.random() < 0.35 else d for d in shape]
        if self.rng.random() < 0.15:  # a rank difference the other way: the partner is bigger
            shape = [self.rng.choice((2, 3))] + list(t.shape)
        return Type(tuple(shape), t.dtype)

    def constant(self, t: Type, special: bool) -> str:
        values = self.rng_values(t, special)
        if t.size == 0 or self.rng.random() < 0.4:  # a splat (an empty tensor has no other literal)
            values = np.full(t.shape, values.flat[0] if values.size else 0.0)
        attrs = {"shape": list(t.shape), "dtype": t.dtype, "value": values.tolist()}
        if t.size and t.dtype != "bf16" and self.rng.random() < RESOURCE_FRACTION:
            attrs["resource"] = True  # dense_resource<...> from a file beside the program (an npz has no bf16)
        name = self.emit("constant", [], attrs)[0]
        if attrs.get("resource"):
            self.features.add("dense_resource")
        return name

    def rng_values(self, t: Type, special: bool) -> np.ndarray:
        gen = np.random.default_rng(self.rng.randrange(2**32))
        if t.dtype in FLOATS:
            v = np.round(gen.standard_normal(t.shape) * 4) / 4
            if special and v.size:
                v.flat[gen.integers(0, v.size)] = self.rng.choice(SPECIALS)
            return v
        if t.dtype == "i1":
            return gen.integers(0, 2, t.shape).astype(bool)
        return gen.integers(-6, 7, t.shape)
