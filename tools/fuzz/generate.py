"""The seeded program generator: `generate(seed) -> Case` (program + inputs).
The function under construction is `builder.py`'s, the op families and
their weights are `families.py`'s.

Each seed picks a few features (an element type for its float chain, empty
tensors, special input values, a called function) and then grows @main op
by op, drawing operands mostly from the last values so that chains are long
enough to fuse, and now and then from older ones (multi-use values). Every
op of the tensor dialect is drawn: elementwise (broadcasting with size-1
dims and rank differences, constants with NaN/±inf/-0), cmp/select and i1
logic, casts between all six element types, reductions (negative axes,
keepdims), softmax/layernorm/rmsnorm, matmul (transposes, batch
broadcasting), attention (masks, causal, often followed by a layout op),
reshape, transpose, broadcast_to, slice (negative steps, stops past 0),
concat, gather (negative and out-of-range indices), calls with several
results. Shapes stay small (256 elements) so that the oracle and the
reference are fast, except on one seed in ten, whose dims (16, 33, 64,
130) reach past a vector, a tile or a reduction's split.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from fusecc.tools.fuzz.builder import SPECIALS, ProgramBuilder
from fusecc.tools.fuzz.families import DRAW, FAMILIES
from fusecc.tools.fuzz.program import FLOATS, Function, Invalid, Program, Type, infer_types


@dataclass
class Case:
    seed: int
    program: Program
    inputs: list[np.ndarray]
    features: list[str]


class Generator:
    def __init__(self, seed: int, num_ops: int | None = None):
        self.seed = seed
        self.rng = random.Random(seed)
        self.num_ops = num_ops if num_ops is not None else self.rng.randint(3, 14)

    def generate(self) -> Case:
        rng = self.rng
        float_type = rng.choice(("f32", "f32", "f32", "f16", "bf16"))
        empty = rng.random() < 0.06
        special = rng.random() < 0.15
        large = rng.random() < 0.1
        b = ProgramBuilder(rng, float_type, empty, large)
        functions: list[Function] = []
        self.functions = functions
        if rng.random() < 0.12:
            functions.append(self._callee(b, float_type))
            if rng.random() < 0.5:  # a second callee, which calls the first
                functions.append(self._nested_callee(functions[0]))
        b.arg(Type(b.shape(), float_type))
        attempts = 0
        while len(b.ops) < self.num_ops and attempts < self.num_ops * 20:
            attempts += 1
            family = rng.choices(list(FAMILIES), weights=list(FAMILIES.values()))[0]
            if functions and rng.random() < 0.1:
                family = "call"
            try:
                self._call(b, rng.choice(functions)) if family == "call" else DRAW[family](b)
            except Invalid:
                continue
        if not b.ops:
            b.emit("neg", [b.values[-1][0]])
        results = [b.ops[-1].results[0]]
        for _ in range(rng.choice((0, 0, 1, 2))):  # several results
            other = rng.choice([r for op in b.ops for r in op.results])
            if other not in results:
                results.append(other)
        if rng.random() < 0.06:  # an argument returned as it is
            results.insert(rng.randrange(len(results) + 1), rng.choice(b.args)[0])
            b.features.add("return:argument")
        if rng.random() < 0.04:  # one value returned twice
            results.append(rng.choice(results))
            b.features.add("return:twice")
        main = Function("main", b.args, b.ops, results)
        program = Program([*functions, main])
        calls = [op.attrs["callee"] for f in program.functions for op in f.ops if op.kind == "call"]
        if len(set(calls)) > 1:
            b.features.add("call:several-callees")
        if any(calls.count(name) > 1 for name in set(calls)):
            b.features.add("call:twice")
        if any(op.kind == "call" for f in functions for op in f.ops):
            b.features.add("call:nested")
        features = sorted(b.features) + [f"float:{float_type}"] + (["empty"] if empty else []) + (["specials"] if special else []) + (["large"] if large else [])
        inputs = make_inputs(program, np.random.default_rng(self.seed), special)
        return Case(self.seed, program, inputs, features)

    # --- a called function with one or two results ----------------------------------
    def _callee(self, b: ProgramBuilder, float_type: str) -> Function:
        inner = ProgramBuilder(random.Random(self.rng.randrange(2**32)), float_type, False)
        x = inner.arg(Type(inner.shape(2), float_type), "p")
        y = inner.arg(Type(inner.type_of(x).shape[-1:], float_type), "p")
        s = inner.emit("add", [x, y])[0]
        t = inner.emit(self.rng.choice(("tanh", "sigmoid", "exp", "neg")), [s])[0]
        returns = [t] if self.rng.random() < 0.4 else [t, inner.emit("reduce_sum", [s], {"axes": [-1], "keepdims": self.rng.random() < 0.5})[0]]
        return Function("helper", inner.args, inner.ops, returns)

    def _nested_callee(self, inner_callee: Function) -> Function:
        """helper2(x, y) -> (relu(max(helper(x, y)#0, x)), x): a call inside a
        called function, and an argument returned as it is."""
        inner = ProgramBuilder(random.Random(self.rng.randrange(2**32)), inner_callee.args[0][1].dtype, False)
        x, y = (inner.arg(t, "p") for _, t in inner_callee.args)
        returned = infer_types(Program([inner_callee]))
        r = inner.emit("call", [x, y], {"callee": inner_callee.name}, results=len(inner_callee.returns), callee=inner_callee, callee_types=[returned[inner_callee.name, v] for v in inner_callee.returns])[0]
        m = inner.emit("max", [r, x])[0]
        return Function("helper2", inner.args, inner.ops, [inner.emit("relu", [m])[0], x])

    def _call(self, b: ProgramBuilder, callee: Function) -> None:
        for _ in range(2 if self.rng.random() < 0.3 else 1):  # now and then the same function twice in a row
            operands = []
            for _, t in callee.args:
                v = b.pick(lambda u, t=t: u == t, recent=8)
                operands.append(v if v is not None else b.arg(t))
            types = infer_types(Program(self.functions))
            b.emit("call", operands, {"callee": callee.name}, results=len(callee.returns), callee=callee, callee_types=[types[callee.name, r] for r in callee.returns])


def make_inputs(program: Program, rng: np.random.Generator, special: bool) -> list[np.ndarray]:
    """Inputs for @main: normals (steps of 1/8, so exact zeros occur), ints
    from -6 to 6 with the odd extreme, gather indices past both ends; with
    `special`, some NaN, ±inf and -0.0."""
    out = []
    for name, t in program.main.args:
        if t.dtype in FLOATS:
            v = np.round(rng.standard_normal(t.shape) * 8) / 8
            if special and v.size:
                for _ in range(max(1, v.size // 8)):
                    v.flat[rng.integers(0, v.size)] = SPECIALS[rng.integers(0, len(SPECIALS))]
        elif t.dtype == "i1":
            v = rng.integers(0, 2, t.shape).astype(bool)
        elif name.startswith("i"):
            v = rng.integers(-12, 12, t.shape)
        else:
            v = rng.integers(-6, 7, t.shape)
            if v.size and rng.random() < 0.2:
                info = np.iinfo(np.int32 if t.dtype == "i32" else np.int64)
                v.flat[rng.integers(0, v.size)] = rng.choice((info.max, info.min))
        out.append(storage_array(v, t.dtype))
    return out


def storage_array(values, dtype: str) -> np.ndarray:
    """How the project stores a value of `dtype` in numpy (bf16 widened to float32)."""
    if dtype == "bf16":
        import ml_dtypes

        return np.asarray(values, dtype=np.float64).astype(ml_dtypes.bfloat16).astype(np.float32)
    return np.asarray(values).astype({"f32": np.float32, "f16": np.float16, "i32": np.int32, "i64": np.int64, "i1": np.bool_}[dtype])


def generate(seed: int, num_ops: int | None = None) -> Case:
    return Generator(seed, num_ops).generate()
