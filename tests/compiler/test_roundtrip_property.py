"""Property: random valid programs, built through the builder API, survive
print/parse round trips in the custom form, the generic form and with
locations, and verify before and after."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusecc.compiler import attributes as A
from fusecc.compiler.builder import Builder, InsertionPoint
from fusecc.compiler.diagnostics import UNKNOWN_LOC, FileLineColLoc, FusedLoc, NameLoc
from fusecc.compiler.parser import parse_module
from fusecc.compiler.printer import print_op
from fusecc.compiler.types import FunctionType, TensorType, bf16, f16, f32, i1, i32, i64
from fusecc.compiler.verifier import verify
from fusecc.dialects import tensor as T
from fusecc.dialects.builtin import ModuleOp
from fusecc.dialects.func import CallOp, FuncOp, ReturnOp

FLOATS = (f32, f32, f32, f16, bf16)
# Hints that are not valid names, or are bare numbers, must not break the round trip.
HINTS = (None, None, None, "x", "x", "x_1", "w.q", "v$1", "a-b", "arg0", "0_1", "7", "bad#name", "ünï", "")
FILES = ("model.py", "dir/with space.ir", 'quote"d.ir', "back\\slash.ir")

UNARY_FLOAT = (T.ExpOp, T.LogOp, T.SqrtOp, T.RsqrtOp, T.TanhOp, T.ErfOp, T.ReciprocalOp, T.SigmoidOp, T.SiluOp)
UNARY_NUMERIC = (T.NegOp, T.AbsOp, T.ReluOp)
BINARY = (T.AddOp, T.SubOp, T.MulOp, T.DivOp, T.MaxOp, T.MinOp, T.PowOp)
REDUCE = (T.ReduceSumOp, T.ReduceMaxOp, T.ReduceMinOp, T.ReduceMeanOp)


class ProgramBuilder:
    """Draws ops one at a time, keeping a pool of values to use."""

    def __init__(self, draw):
        self.draw = draw

    def shape(self, max_rank=3):
        return tuple(self.draw(st.lists(st.integers(1, 4), max_size=max_rank)))

    def location(self):
        kind = self.draw(st.integers(0, 4))
        if kind == 0:
            return UNKNOWN_LOC
        file_loc = FileLineColLoc(self.draw(st.sampled_from(FILES)), self.draw(st.integers(1, 500)), self.draw(st.integers(1, 80)))
        if kind == 1:
            return NameLoc(self.draw(st.sampled_from(("gelu", "layer.0/attn", "n\\x"))), file_loc if self.draw(st.booleans()) else None)
        if kind == 2:
            return FusedLoc((file_loc, FileLineColLoc("other.ir", 1, 2), NameLoc("n")))
        return file_loc

    def float_value(self, element):
        value = self.draw(st.one_of(st.floats(-1e4, 1e4, allow_nan=False, width=16), st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-30])))
        return value

    def dense(self, t: TensorType) -> A.DenseElementsAttr:
        element = t.element_type
        if self.draw(st.booleans()):
            values = self.float_value(element) if element.is_float else (self.draw(st.booleans()) if element is i1 else self.draw(st.integers(-100, 100)))
        else:
            count = t.num_elements
            if element.is_float:
                # Up to eight drawn values, repeated to fill; slices may make empty tensors.
                values = np.resize(np.array([self.float_value(element) for _ in range(max(1, min(count, 8)))]), count)
            elif element is i1:
                values = np.array(self.draw(st.lists(st.booleans(), min_size=count, max_size=count)))
            else:
                values = np.array(self.draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=count, max_size=count)))
            values = np.asarray(values).reshape(t.shape)
        return A.DenseElementsAttr(values, t)

    def extra_attribute(self):
        kind = self.draw(st.integers(0, 7))
        if kind == 0:
            return A.IntegerAttr(self.draw(st.integers(-(2**63), 2**63 - 1)))
        if kind == 1:
            element = self.draw(st.sampled_from((f32, f16, bf16)))
            return A.FloatAttr(self.float_value(element), element)
        if kind == 2:
            return A.StringAttr(self.draw(st.text(max_size=8)))
        if kind == 3:
            return A.BoolAttr(self.draw(st.booleans()))
        if kind == 4:
            return A.ArrayAttr((A.IntegerAttr(1), A.StringAttr("s"), A.ArrayAttr(())))
        if kind == 5:
            return A.UnitAttr()
        if kind == 6:
            return A.IntegerAttr(self.draw(st.integers(-128, 127)), self.draw(st.sampled_from((i32, i64))))
        return self.dense(TensorType(self.shape(2), self.draw(st.sampled_from((f32, bf16, i1, i32)))))


def build_function(draw, pb: ProgramBuilder, name: str, callee: FuncOp | None) -> FuncOp:
    arg_types = [TensorType(pb.shape(), draw(st.sampled_from(FLOATS))) for _ in range(draw(st.integers(1, 3)))]
    if callee is not None:
        arg_types = list(callee.function_type.inputs) + arg_types
    func = FuncOp.build(name, FunctionType(arg_types, ()), [draw(st.sampled_from(HINTS)) for _ in arg_types], pb.location())
    b = Builder(InsertionPoint.at_end(func.body))
    pool = list(func.arguments)
    if callee is not None:
        call = b.create(CallOp, pool[: len(callee.arguments)], {"callee": A.SymbolRefAttr(callee.sym_name)}, list(callee.function_type.results))
        pool += call.results
        for r in call.results:
            r.name_hint = draw(st.sampled_from(HINTS))

    def pick(predicate=lambda v: True):
        candidates = [v for v in pool if predicate(v)]
        return draw(st.sampled_from(candidates)) if candidates else None

    for _ in range(draw(st.integers(1, 10))):
        x = pick()
        t = x.type
        choice = draw(st.integers(0, 13))
        attrs: dict = {}
        if choice == 0 and t.element_type.is_float:
            op = (draw(st.sampled_from(UNARY_FLOAT)), [x])
        elif choice == 1 and t.element_type is not i1:
            op = (draw(st.sampled_from(UNARY_NUMERIC)), [x])
        elif choice == 2:
            # A partner of the same element type whose shape broadcasts.
            partner = pick(lambda v: v.type.element_type is t.element_type and T.broadcast_shapes(v.type.shape, t.shape) is not None)
            if draw(st.booleans()):
                suffix = t.shape[draw(st.integers(0, len(t.shape))) :]
                partner = b.create(T.ConstantOp, [], {"value": pb.dense(TensorType(suffix, t.element_type))}).result
            kinds = (T.MaxOp, T.MinOp) if t.element_type is i1 else BINARY
            op = (draw(st.sampled_from(kinds)), draw(st.permutations([x, partner])))
        elif choice == 3 and t.rank:
            axes = draw(st.lists(st.integers(-t.rank, t.rank - 1), unique_by=lambda a: a % t.rank, max_size=t.rank))
            attrs = {"axes": axes, "keepdims": draw(st.booleans())} if draw(st.booleans()) else {"axes": axes}
            kinds = REDUCE if t.element_type.is_float else REDUCE[1:3] if t.element_type is i1 else REDUCE[:3]
            op = (draw(st.sampled_from(kinds)), [x])
        elif choice == 4 and t.rank and t.element_type.is_float:
            attrs = {"axis": draw(st.integers(-t.rank, t.rank - 1))} if draw(st.booleans()) else {}
            op = (T.SoftmaxOp, [x])
        elif choice == 5:
            attrs = {"perm": draw(st.permutations(range(t.rank)))}
            op = (T.TransposeOp, [x])
        elif choice == 6:
            shape = draw(st.sampled_from([(t.num_elements,), (1, *t.shape), (*t.shape, 1), ()] if t.num_elements == 1 else [(t.num_elements,), (1, *t.shape)]))
            b.location = pb.location()
            new = b.create(T.ReshapeOp, [x], result_types=[TensorType(shape, t.element_type)])
            pool.append(new.result)
            continue
        elif choice == 7:
            cmp = b.create(T.CmpOp, [x, x], {"predicate": draw(st.sampled_from(T.CMP_PREDICATES))})
            op = (T.SelectOp, [cmp.result, x, pick(lambda v: v.type is t) or x])
        elif choice == 8:
            target = TensorType(t.shape, draw(st.sampled_from((f32, f16, bf16, i32, i1))))
            new = b.create(T.CastOp, [x], result_types=[target])
            pool.append(new.result)
            continue
        elif choice == 9 and t.rank:
            starts = [draw(st.integers(-d, d)) for d in t.shape]
            stops = [draw(st.integers(-d, d + 1)) for d in t.shape]
            attrs = {"start": starts, "stop": stops}
            if draw(st.booleans()):
                attrs["step"] = [draw(st.sampled_from((1, 2, -1))) for _ in t.shape]
            op = (T.SliceOp, [x])
        elif choice == 10 and t.rank:
            attrs = {"axis": draw(st.integers(-t.rank, t.rank - 1))}
            op = (T.ConcatOp, [x] * draw(st.integers(1, 3)))
        elif choice == 11 and t.rank >= 2 and t.element_type is not i1:
            attrs = {"transpose_b": True}
            op = (T.MatmulOp, [x, x])
        elif choice == 12 and t.element_type.is_float:
            attrs = {"approximate": draw(st.sampled_from(("none", "tanh")))} if draw(st.booleans()) else {}
            op = (T.GeluOp, [x])
        else:
            op = (T.ConstantOp, [])
            attrs = {"value": pb.dense(TensorType(pb.shape(), draw(st.sampled_from((f32, f16, bf16, i1, i32, i64)))))}
        if draw(st.integers(0, 3)) == 0:
            attrs["test.extra"] = pb.extra_attribute()
        b.location = pb.location()
        new = b.create(op[0], op[1], attrs)
        new.result.name_hint = draw(st.sampled_from(HINTS))
        pool.append(new.result)
    returned = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
    b.create(ReturnOp, returned)
    func.attributes["function_type"] = A.TypeAttr(FunctionType(arg_types, [v.type for v in returned]))
    return func


@st.composite
def programs(draw):
    pb = ProgramBuilder(draw)
    module = ModuleOp.build()
    callee = None
    for index in range(draw(st.integers(1, 2))):
        func = build_function(draw, pb, f"f{index}", callee)
        module.body.append(func)
        callee = func
    return module


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_random_programs_round_trip(module):
    verify(module)
    custom = print_op(module)
    reparsed = parse_module(custom)
    verify(reparsed)
    assert print_op(reparsed) == custom

    generic = print_op(module, generic=True)
    from_generic = parse_module(generic)
    verify(from_generic)
    assert print_op(from_generic) == custom
    assert print_op(from_generic, generic=True) == generic

    located = print_op(module, debuginfo=True)
    assert print_op(parse_module(located), debuginfo=True) == located
