"""The `func` dialect: functions, calls and returns."""

from __future__ import annotations

from fusecc.compiler import attributes as A
from fusecc.compiler.ir import Block, Operation, Region, VerifyError
from fusecc.compiler.op_definitions import REQUIRED, STRING, SYMBOL, TYPE, AttrDef, OperandDef, ResultDef, register_op
from fusecc.compiler.symbols import lookup_symbol
from fusecc.compiler.traits import IsolatedFromAbove, Symbol, Terminator
from fusecc.compiler.dim_binding import DIMS_ATTR, bind_arguments, has_unbound, same_spelling, type_compatible
from fusecc.compiler.dims import free_symbols
from fusecc.compiler.types import FunctionType, TensorType


@register_op
class FuncOp(Operation):
    """`func.func @name(%x: T, ...) -> R { ... }`."""

    name = "func.func"
    traits = frozenset({Symbol, IsolatedFromAbove})
    attr_defs = (
        AttrDef("sym_name", STRING, REQUIRED),
        AttrDef("function_type", TYPE, REQUIRED),
    )
    region_count = 1

    @classmethod
    def build(cls, name: str, function_type: FunctionType, arg_names=None, location=None) -> "FuncOp":
        block = Block()
        for i, t in enumerate(function_type.inputs):
            block.add_argument(t, arg_names[i] if arg_names else None)
        attrs = {"sym_name": A.StringAttr(name), "function_type": A.TypeAttr(function_type)}
        kwargs = {"location": location} if location is not None else {}
        return cls([], [], attrs, [Region([block])], **kwargs)

    @property
    def sym_name(self) -> str:
        return self.attr("sym_name")

    @property
    def function_type(self) -> FunctionType:
        return self.attr("function_type")

    @property
    def arguments(self):
        return self.body.args

    def region_argument_types(self) -> list:
        """The generic form's block arguments, their `?` dims bound as the
        custom form binds them (compiler/dim_binding.py)."""
        try:
            return bind_arguments(self.function_type.inputs, self.attributes.get(DIMS_ATTR))
        except ValueError as exc:
            raise VerifyError(str(exc)) from None

    def bind_results_from_regions(self) -> None:
        """The function type of the generic form follows its bound arguments and returns."""
        ftype = self.function_type
        if not isinstance(ftype, FunctionType) or not has_unbound(ftype) or not self.regions[0].blocks:
            return
        inputs = [a.type for a in self.body.args] if len(self.body.args) == len(ftype.inputs) else ftype.inputs
        last = self.body.last_op
        results = ftype.results
        if last is not None and last.name == "func.return" and len(last.operands) == len(results):
            results = [v.type if type_compatible(v.type, want) else want for v, want in zip(last.operands, results)]
        self.attributes["function_type"] = A.TypeAttr(FunctionType(inputs, results))

    def verify_(self) -> None:
        function_type = self.function_type
        if not isinstance(function_type, FunctionType):
            raise VerifyError("'function_type' must be a function type")
        if len(self.regions) != 1 or len(self.regions[0].blocks) != 1:
            raise VerifyError("expects a body of exactly one block")
        args = self.body.args
        if len(args) != len(function_type.inputs):
            raise VerifyError(f"has {len(args)} arguments but its type lists {len(function_type.inputs)}")
        for i, (arg, expected) in enumerate(zip(args, function_type.inputs)):
            if arg.type is not expected:
                raise VerifyError(f"argument {i} has type {arg.type} but the function type says {expected}")
        last = self.body.last_op
        if not isinstance(last, ReturnOp):
            raise VerifyError(f"function @{self.sym_name} must end with 'func.return'")
        self.verify_dims()

    def verify_dims(self) -> None:
        """Every dim in the body is an expression of the arguments' dims: a
        name only an op gives (`fusecc.dims = ["Q"]`) could never be bound."""
        known = free_symbols(d for t in self.function_type.inputs for d in getattr(t, "shape", ()))
        for op in self.walk(include_self=False):
            for result in op.results:
                t = result.type
                if isinstance(t, TensorType) and not t.is_static:
                    foreign = sorted(str(s) for s in free_symbols(t.shape) - known if str(s) != "?")
                    if foreign:
                        where = op.location.file_line_col()
                        at = f" at {where.file}:{where.line}:{where.col}" if where else ""
                        raise VerifyError(f"'{op.name}'{at} uses dims {', '.join(foreign)}, which no argument of @{self.sym_name} has")


@register_op
class ReturnOp(Operation):
    """`func.return %a, %b : T1, T2`."""

    name = "func.return"
    traits = frozenset({Terminator})
    operand_defs = (OperandDef("values", variadic=True),)

    def verify_(self) -> None:
        func = self.parent_op
        if not isinstance(func, FuncOp):
            raise VerifyError("must be directly inside a 'func.func'")
        if self.next_op is not None:
            raise VerifyError("must be the last op of its block")
        expected = func.function_type.results
        if len(self.operands) != len(expected):
            raise VerifyError(
                f"returns {len(self.operands)} value{'s' * (len(self.operands) != 1)}, "
                f"but @{func.sym_name} declares {len(expected)} result{'s' * (len(expected) != 1)}"
            )
        for i, (value, want) in enumerate(zip(self.operands, expected)):
            if value.type is not want and not type_compatible(value.type, want):
                raise VerifyError(f"returned value {i} has type {value.type} but @{func.sym_name} declares {want}")


@register_op
class CallOp(Operation):
    """`%r = func.call @f(%a, %b) : (A, B) -> R`."""

    name = "func.call"
    custom_symbol = "callee"
    operand_defs = (OperandDef("args", variadic=True),)
    result_defs = (ResultDef("outputs", variadic=True),)
    attr_defs = (AttrDef("callee", SYMBOL, REQUIRED),)

    @property
    def callee(self) -> str:
        return self.attributes["callee"].value

    def resolve(self) -> FuncOp | None:
        found = lookup_symbol(self, self.callee)
        return found if isinstance(found, FuncOp) else None

    def verify_(self) -> None:
        target = self.resolve()
        if target is None:
            raise VerifyError(f"calls @{self.callee}, which is not a function of this module")
        ftype = target.function_type
        actual_inputs = tuple(v.type for v in self.operands)
        if actual_inputs != ftype.inputs and not (
            len(actual_inputs) == len(ftype.inputs) and all(map(same_spelling, actual_inputs, ftype.inputs))
        ):
            raise VerifyError(
                f"argument types ({', '.join(map(str, actual_inputs))}) do not match "
                f"@{self.callee}'s ({', '.join(map(str, ftype.inputs))})"
            )
        results = tuple(self.result_types)
        if results != ftype.results and not (len(results) == len(ftype.results) and all(map(same_spelling, results, ftype.results))):
            raise VerifyError(f"result types do not match @{self.callee}'s {FunctionType((), ftype.results)}")
