"""Unit tests of the IR API: values and use lists, editing, cloning,
walking, the builder, symbols and declared ops."""

from __future__ import annotations

import pytest

from fusecc.compiler import attributes as A
from fusecc.compiler.builder import Builder, InsertionPoint
from fusecc.compiler.ir import Block, Operation, Region, VerifyError, defined_above
from fusecc.compiler.op_definitions import INT, REQUIRED, AttrDef, OperandDef, ResultDef, check_operand_count, lookup_op_class
from fusecc.compiler.symbols import lookup_symbol
from fusecc.compiler.printer import print_op
from fusecc.compiler.traits import Commutative, Elementwise, Pure
from fusecc.compiler.types import FunctionType, TensorType, f32, i1
from fusecc.compiler.verifier import verify
from fusecc.dialects.builtin import ModuleOp
from fusecc.dialects.func import CallOp, FuncOp, ReturnOp
from fusecc.dialects.fusion import GroupOp, YieldOp
from fusecc.dialects import tensor as T

V4 = TensorType((4,), f32)
M4x8 = TensorType((4, 8), f32)


def make_function(name="f", inputs=(V4, V4), results=(V4,)):
    module = ModuleOp.build()
    func = FuncOp.build(name, FunctionType(inputs, results), arg_names=[f"a{i}" for i in range(len(inputs))])
    module.body.append(func)
    return module, func, Builder(InsertionPoint.at_end(func.body))


def test_operands_register_uses_in_order():
    module, func, b = make_function()
    x, y = func.arguments
    add = b.create(T.AddOp, [x, x])
    mul = b.create(T.MulOp, [add.result, y])
    assert x.uses == [(add, 0), (add, 1)]
    assert x.users == [add] and x.num_uses == 2
    assert add.result.has_one_use() and add.result.users == [mul]
    assert not mul.result.has_uses()
    assert add.lhs is x and mul.rhs is y  # named operand accessors


def test_replace_all_uses_and_set_operand():
    module, func, b = make_function()
    x, y = func.arguments
    add = b.create(T.AddOp, [x, y])
    neg = b.create(T.NegOp, [x])
    ret = b.create(ReturnOp, [add.result])
    x.replace_all_uses_with(y)
    assert add.operands == (y, y) and neg.input is y
    assert not x.has_uses() and y.num_uses == 3
    add.result.replace_all_uses_with(neg.result)
    assert ret.operands == (neg.result,) and not add.result.has_uses()
    ret.set_operand(0, add.result)
    assert neg.result.num_uses == 0 and add.result.users == [ret]
    neg.result.replace_uses_where(neg.result, lambda op: True)  # replacing with itself is harmless
    add.lhs.replace_uses_where(x, lambda op: op is neg)
    assert neg.input is x and add.lhs is y


def test_erase_refuses_used_results_and_drops_uses():
    module, func, b = make_function()
    x, y = func.arguments
    add = b.create(T.AddOp, [x, y])
    neg = b.create(T.NegOp, [add.result])
    with pytest.raises(ValueError, match="still used by tensor.neg"):
        add.erase()
    neg.erase()
    assert neg.parent is None and not add.result.has_uses()
    add.erase()
    assert len(func.body) == 0 and not x.has_uses() and not y.has_uses()


def test_block_linked_list_edits_and_order():
    module, func, b = make_function()
    x, _ = func.arguments
    first = b.create(T.ExpOp, [x])
    last = b.create(T.TanhOp, [x])
    middle = T.LogOp.create([x])
    func.body.insert_after(middle, first)
    head = func.body.insert_before(T.NegOp.create([x]), first)
    assert [op.name for op in func.body] == ["tensor.neg", "tensor.exp", "tensor.log", "tensor.tanh"]
    assert [op.name for op in reversed(func.body)] == ["tensor.tanh", "tensor.log", "tensor.exp", "tensor.neg"]
    assert len(func.body) == 4 and func.body.first_op is head and func.body.last_op is last
    assert middle.prev_op is first and middle.next_op is last
    assert head.is_before_in_block(last) and middle.is_before_in_block(last) and not last.is_before_in_block(first)
    middle.detach()
    assert middle.parent is None and first.next_op is last and len(func.body) == 3
    with pytest.raises(ValueError, match="already in a block"):
        func.body.append(first)
    # Iteration tolerates erasing the current op.
    for op in func.body:
        op.erase()
    assert len(func.body) == 0 and func.body.first_op is None and func.body.last_op is None


def test_builder_insertion_points():
    module, func, b = make_function()
    x, y = func.arguments
    ret = b.create(ReturnOp, [x])
    b.set_insertion_point(InsertionPoint.before(ret))
    add = b.create(T.AddOp, [x, y])
    b.set_insertion_point(InsertionPoint.at_start(func.body))
    neg = b.create(T.NegOp, [y])
    b.set_insertion_point(InsertionPoint.after(neg))
    exp = b.create(T.ExpOp, [neg.result])
    assert list(func.body) == [neg, exp, add, ret]
    with pytest.raises(ValueError, match="no insertion point"):
        Builder().create(T.NegOp, [x])


def test_builder_locations_default_and_override():
    from fusecc.compiler.diagnostics import FileLineColLoc

    module, func, b = make_function()
    b.location = FileLineColLoc("model.py", 3, 1)
    first = b.create(T.NegOp, [func.arguments[0]])
    second = b.create(T.NegOp, [first.result], location=FileLineColLoc("model.py", 4, 1))
    assert first.location.line == 3 and second.location.line == 4


def test_create_infers_result_types_and_wraps_attributes():
    module, func, b = make_function(inputs=(M4x8, TensorType((8,), f32)))
    x, bias = func.arguments
    add = b.create(T.AddOp, [x, bias])
    assert add.result.type is M4x8
    reduce = b.create(T.ReduceSumOp, [x], {"axes": [-1], "keepdims": True})
    assert reduce.result.type == TensorType((4, 1), f32)
    assert reduce.attributes["axes"] == A.ArrayAttr((A.IntegerAttr(-1),))
    assert reduce.axes == [-1] and reduce.keepdims is True and reduce.normalized_axes == [1]
    cmp = b.create(T.CmpOp, [x, x], {"predicate": "lt"})
    assert cmp.result.type.element_type is i1
    transposed = b.create(T.TransposeOp, [x], {"perm": [1, 0]})
    assert transposed.result.type == TensorType((8, 4), f32)
    with pytest.raises(VerifyError, match=r"operand shapes \[4,8\] and \[8,4\] do not broadcast"):
        T.AddOp.create([x, transposed.result])
    with pytest.raises(VerifyError, match="cannot infer"):
        T.ReshapeOp.create([x])


def test_attribute_defaults_and_required():
    module, func, b = make_function(inputs=(M4x8, TensorType((8,), f32)))
    x, gamma = func.arguments
    soft = b.create(T.SoftmaxOp, [x])
    assert soft.axis == -1 and "axis" not in soft.attributes
    gelu = b.create(T.GeluOp, [x])
    assert gelu.approximate == "none"
    norm = b.create(T.LayerNormOp, [x, gamma, gamma])
    assert norm.epsilon == pytest.approx(1e-5) and norm.gamma is gamma
    assert b.create(T.LayerNormOp, [x, gamma, gamma], {"epsilon": 0.5}).epsilon == 0.5
    assert T.TransposeOp._attr_index["perm"].default is REQUIRED


def test_clone_with_value_map_is_deep():
    module, func, b = make_function()
    x, y = func.arguments
    add = b.create(T.AddOp, [x, y], {"fusion.tag": 3})
    b.create(ReturnOp, [add.result])
    copy = func.clone()
    assert copy is not func and copy.sym_name == "f"
    new_add, new_ret = list(copy.body)
    assert new_add.operands == tuple(copy.arguments)
    assert new_ret.operands == (new_add.result,)
    assert new_add.attributes == add.attributes and new_add.attributes is not add.attributes
    assert not any(u[0] is new_add for u in x.uses)  # the original's use lists are untouched
    # Cloning a single op remaps the operands found in the map.
    z = b.create(T.NegOp, [x])
    mapped = add.clone({x: z.result})
    assert mapped.operands == (z.result, y)
    assert [a.name_hint for a in copy.arguments] == ["a0", "a1"]


def test_walk_is_preorder_and_safe_to_mutate():
    module, func, b = make_function()
    x, y = func.arguments
    add = b.create(T.AddOp, [x, y])
    b.create(ReturnOp, [add.result])
    names = [op.name for op in module.walk()]
    assert names == ["builtin.module", "func.func", "tensor.add", "func.return"]
    assert [op.name for op in module.walk(include_self=False)][0] == "func.func"
    for op in module.walk():
        if op.name == "func.return":
            op.erase()
    assert [op.name for op in func.body] == ["tensor.add"]


def test_nested_regions_parents_and_visibility():
    module, func, b = make_function()
    x, y = func.arguments
    group = GroupOp.build([x, y], [V4], "elementwise")
    b.insert(group)
    inner = Builder(InsertionPoint.at_end(group.body))
    a0, a1 = group.body.args
    add = inner.create(T.AddOp, [a0, a1])
    inner.create(YieldOp, [add.result])
    b.create(ReturnOp, [group.results[0]])
    assert add.parent_op is group and group.parent_op is func and func.parent_op is module
    assert add.parent_of_type(FuncOp) is func and add.parent_of_type(ModuleOp) is module
    assert module.is_ancestor_of(add) and not add.is_ancestor_of(module)
    assert defined_above(x, group.regions[0]) and not defined_above(a0, group.regions[0])
    verify(module)
    # Using a value from outside the isolated group is rejected.
    add.set_operand(1, y)
    with pytest.raises(Exception, match="isolated 'fusion.group'"):
        verify(module)


def test_verifier_rejects_use_before_definition():
    module, func, b = make_function()
    x, y = func.arguments
    first = b.create(T.NegOp, [x])
    second = b.create(T.ExpOp, [first.result])
    b.create(ReturnOp, [second.result])
    second.detach()
    func.body.insert_before(second, first)
    with pytest.raises(Exception, match="operand 0 is used before its definition"):
        verify(module)


def test_symbol_lookup_and_calls():
    module, f, b = make_function("f", inputs=(V4,), results=(V4,))
    b.create(ReturnOp, [f.arguments[0]])
    g = FuncOp.build("g", FunctionType((V4,), (V4,)))
    module.body.append(g)
    gb = Builder(InsertionPoint.at_end(g.body))
    call = gb.create(CallOp, [g.arguments[0]], {"callee": A.SymbolRefAttr("f")}, result_types=[V4])
    gb.create(ReturnOp, [call.results[0]])
    assert lookup_symbol(call, "f") is f and call.resolve() is f
    assert module.lookup("g") is g and module.lookup("h") is None
    assert lookup_symbol(call, "h") is None
    assert module.functions() == [f, g]
    verify(module)
    assert "func.call @f(%arg0) : (tensor<4xf32>) -> tensor<4xf32>" in print_op(module)


def test_op_declarations_registry_traits_and_counts():
    assert lookup_op_class("tensor.add") is T.AddOp
    assert lookup_op_class("tensor.nope") is None
    assert T.AddOp.traits >= {Pure, Elementwise, Commutative}
    assert Commutative not in T.SubOp.traits
    assert check_operand_count(T.AddOp, 2) is None
    assert check_operand_count(T.AddOp, 3) == "expects 2 operands, but got 3"
    assert check_operand_count(T.AttentionOp, 4) is None
    assert check_operand_count(T.AttentionOp, 5) == "expects 3 or 4 operands, but got 5"
    assert check_operand_count(T.ConcatOp, 0) is None


def test_declaring_a_new_op():
    """The declaration style the README documents for adding an op."""

    class ScaleOp(T.TensorOp):
        name = "test.scale"
        traits = frozenset({Pure, Elementwise})
        operand_defs = (OperandDef("input"),)
        result_defs = (ResultDef("result"),)
        attr_defs = (AttrDef("factor", INT, 2),)

        @classmethod
        def infer_result_types(cls, operand_types, attributes):
            return [operand_types[0]]

        def verify_(self):
            if self.factor == 0:
                raise VerifyError("factor must not be zero")

    module, func, b = make_function(inputs=(V4,), results=(V4,))
    op = b.create(ScaleOp, [func.arguments[0]])
    assert op.factor == 2 and op.input is func.arguments[0] and op.result.type is V4
    op.attributes["factor"] = A.IntegerAttr(0)
    from fusecc.compiler.verifier import verify_op_local

    with pytest.raises(VerifyError, match="factor must not be zero"):
        verify_op_local(op)
    op.attributes["factor"] = A.StringAttr("x")
    with pytest.raises(VerifyError, match="attribute 'factor' must be integer"):
        verify_op_local(op)


def test_block_arguments_and_regions():
    block = Block([V4, M4x8])
    assert [a.index for a in block.args] == [0, 1] and block.args[1].type is M4x8
    block.erase_argument(0)
    assert block.args[0].index == 0 and block.args[0].type is M4x8
    region = Region()
    assert region.block is region.block and region.blocks == [region.block]
    op = Operation([], [], {}, [region])
    assert region.parent is op and op.body is region.block and region.block.parent_op is op
    neg = T.NegOp.create([block.args[0]])
    block.append(neg)
    with pytest.raises(ValueError):
        block.erase_argument(0)
