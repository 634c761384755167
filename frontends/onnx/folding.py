"""Shape rules and import-time folding.

A node whose inputs are all known when the model is imported (initializers,
constants, and the static shapes of runtime values) is evaluated here with
numpy and never becomes an op. This folds the shape arithmetic that exporters
emit (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, ConstantOfShape,
Range, Equal/Where/Expand on shapes). The shape rules are shared with the
translations of the same ops, so that both agree.
"""

from __future__ import annotations

import numpy as np

from fusecc.compiler.dims import dims_equal, normalize_dim, product, sympy

from fusecc.frontends.onnx.context import shape_of
from fusecc.frontends.onnx.table import folder

INT64_MAX = np.iinfo(np.int64).max

# --------------------------------------------------------------------------- shape rules (shared)


def normalized(axis: int, rank: int, cx, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise cx.fail(f"{what} {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def is_symbolic(array) -> bool:
    """A shape array computed from dynamic dims: numpy objects, ints and sympy
    expressions (`Shape` of a `?x?x384` value is [B, S, 384])."""
    return isinstance(array, np.ndarray) and array.dtype == object


def shape_array(shape) -> np.ndarray:
    if all(type(d) is int for d in shape):
        return np.array(shape, np.int64)
    return np.array(list(shape), dtype=object)


def as_dim(value):
    """A shape entry as an int, or the sympy expression of a dynamic dim."""
    return normalize_dim(value.item() if isinstance(value, np.generic) else value)


def reshape_target(shape, spec, allowzero: int, cx) -> tuple[int, ...]:
    """ONNX Reshape: 0 copies the input's dim (unless allowzero), one -1 is inferred."""
    if is_symbolic(np.asarray(spec)) or not all(type(d) is int for d in shape):
        return symbolic_reshape_target(shape, spec, allowzero, cx)
    spec = [int(d) for d in np.asarray(spec).reshape(-1)]
    out = [shape[i] if d == 0 and not allowzero else d for i, d in enumerate(spec)]
    if out.count(-1) > 1:
        raise cx.fail(f"shape {spec} has more than one -1")
    total = int(np.prod(shape))
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1]))
        if known == 0 or total % known:
            raise cx.fail(f"cannot reshape {list(shape)} to {spec}")
        out[out.index(-1)] = total // known
    if int(np.prod(out)) != total or any(d < 0 for d in out):
        raise cx.fail(f"cannot reshape {list(shape)} to {spec}")
    return tuple(out)


def symbolic_reshape_target(shape, spec, allowzero: int, cx) -> tuple:
    """reshape_target where dims are expressions of dynamic dims."""
    spec = [as_dim(d) for d in np.asarray(spec, dtype=object).reshape(-1)]
    out = [shape[i] if type(d) is int and d == 0 and not allowzero else d for i, d in enumerate(spec)]
    holes = [i for i, d in enumerate(out) if type(d) is int and d == -1]
    if len(holes) > 1:
        raise cx.fail(f"shape {spec} has more than one -1")
    total = product(shape)
    if holes:
        known = product(d for i, d in enumerate(out) if i != holes[0])
        if known == 0:
            raise cx.fail(f"cannot reshape {list(shape)} to {spec}")
        out[holes[0]] = normalize_dim(sympy().cancel(total / known))
    if dims_equal(product(out), total) is False:
        raise cx.fail(f"cannot reshape {list(shape)} to {spec}")
    return tuple(out)


def unsqueezed_shape(shape, axes, cx) -> tuple[int, ...]:
    rank = len(shape) + len(axes)
    axes = sorted(normalized(int(a), rank, cx) for a in axes)
    if len(set(axes)) != len(axes):
        raise cx.fail(f"axes {axes} repeat an axis")
    out, rest = [], iter(shape)
    for i in range(rank):
        out.append(1 if i in axes else next(rest))
    return tuple(out)


def squeezed_shape(shape, axes, cx) -> tuple[int, ...]:
    if axes is None:
        return tuple(d for d in shape if d != 1)
    axes = {normalized(int(a), len(shape), cx) for a in axes}
    for a in axes:
        if shape[a] != 1:
            raise cx.fail(f"cannot squeeze axis {a} of size {shape[a]}")
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def slice_per_axis(shape, starts, ends, axes, steps, cx) -> tuple[list[int], list[int], list[int]]:
    """ONNX Slice's clamping, as (start, stop, step) per axis in Python's
    slice convention (a stop of -(dim+1) means "before index 0")."""
    rank = len(shape)
    starts = [int(v) for v in np.asarray(starts).reshape(-1)]
    ends = [as_dim(v) for v in np.asarray(ends).reshape(-1)]
    axes = list(range(len(starts))) if axes is None else [normalized(int(a), rank, cx) for a in np.asarray(axes).reshape(-1)]
    steps = [1] * len(starts) if steps is None else [int(v) for v in np.asarray(steps).reshape(-1)]
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise cx.fail("starts, ends, axes and steps differ in length")
    if len(set(axes)) != len(axes):
        raise cx.fail(f"axes {axes} repeat an axis")
    start, stop, step = [0] * rank, [d if type(d) is int else INT64_MAX for d in shape], [1] * rank
    for axis, a, b, s in zip(axes, starts, ends, steps):
        dim = shape[axis]
        if s == 0:
            raise cx.fail(f"step of axis {axis} is zero")
        if type(dim) is not int or type(b) is not int:
            # tensor.slice clamps as ONNX does; a stop may name a dim (docs/dynamic-shapes.md)
            if s < 0 or (type(b) is not int and not b.is_Symbol):
                raise cx.fail(f"slices axis {axis} with dynamic bounds ({a}:{b}:{s}) that fusecc cannot express; specialise with --shape")
            start[axis], stop[axis], step[axis] = a, (b if type(b) is int else str(b)), s
            continue
        a = a + dim if a < 0 else a
        b = b + dim if b < 0 else b
        if s > 0:
            a, b = min(max(a, 0), dim), min(max(b, 0), dim)
        else:
            a, b = min(max(a, -1), dim - 1), min(max(b, -1), dim - 1)
            b = -(dim + 1) if b == -1 else b
            a = -(dim + 1) if a == -1 else a
        start[axis], stop[axis], step[axis] = a, b, s
    return start, stop, step


def broadcast_shape(a, b, cx) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        raise cx.fail(f"shapes {list(a)} and {list(b)} do not broadcast") from None


def flatten_axis(axis: int, rank: int, cx) -> int:
    """Flatten's axis lies in [-rank, rank]; a negative one counts from the end."""
    if not -rank <= axis <= rank:
        raise cx.fail(f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def split_sizes(node, dim: int, sizes, cx) -> list[int]:
    count = len(node.outputs)
    if sizes is not None:
        sizes = [int(s) for s in np.asarray(sizes).reshape(-1)]
        if sum(sizes) != dim or len(sizes) != count:
            raise cx.fail(f"split sizes {sizes} do not cover a dimension of {dim} in {count} outputs")
        return sizes
    count = int(node.attr("num_outputs", count))
    chunk = -(-dim // count)
    return [min(chunk, dim - i * chunk) for i in range(count)]


# --------------------------------------------------------------------------- folders


def _onnx_constant(node, cx) -> np.ndarray:
    from fusecc.frontends.onnx import proto

    attrs = node.attrs
    if "value" in attrs:
        return proto.to_array(attrs["value"])
    if "value_float" in attrs:
        return np.array(attrs["value_float"], np.float32)
    if "value_floats" in attrs:
        return np.array(attrs["value_floats"], np.float32)
    if "value_int" in attrs:
        return np.array(attrs["value_int"], np.int64)
    if "value_ints" in attrs:
        return np.array(attrs["value_ints"], np.int64)
    raise cx.fail("has no value this importer reads (sparse and string constants are not supported)")


@folder("Constant", attrs=("value", "value_float", "value_floats", "value_int", "value_ints"))
def fold_constant(cx, node, args):
    return [_onnx_constant(node, cx)]


@folder("Shape", attrs=("start", "end"), from_shapes=True)
def fold_shape(cx, node, args):
    shape = shape_of(args[0])
    return [shape_array(shape[slice(node.attr("start", 0), node.attr("end"))])]


@folder("Size", from_shapes=True)
def fold_size(cx, node, args):
    size = product(shape_of(args[0]))
    return [np.array(size, np.int64) if type(size) is int else np.array(size, dtype=object)]


@folder("Identity")
def fold_identity(cx, node, args):
    return [args[0]]


@folder("Gather", attrs=("axis",))
def fold_gather(cx, node, args):
    data, indices = args
    axis = normalized(node.attr("axis", 0), data.ndim, cx)
    dim = data.shape[axis]
    if np.any((indices < -dim) | (indices >= dim)):
        raise cx.fail(f"indices {indices.reshape(-1)[:8].tolist()} are out of range for an axis of size {dim}")
    return [np.take(data, indices, axis=axis)]


@folder("Unsqueeze")
def fold_unsqueeze(cx, node, args):
    return [args[0].reshape(unsqueezed_shape(args[0].shape, args[1].reshape(-1), cx))]


@folder("Squeeze")
def fold_squeeze(cx, node, args):
    axes = args[1].reshape(-1) if len(args) > 1 and args[1] is not None else None
    return [args[0].reshape(squeezed_shape(args[0].shape, axes, cx))]


@folder("Concat", attrs=("axis",))
def fold_concat(cx, node, args):
    axis = normalized(node.attr("axis"), args[0].ndim, cx)
    return [np.concatenate(args, axis=axis)]


@folder("ConstantOfShape", attrs=("value",))
def fold_constant_of_shape(cx, node, args):
    from fusecc.frontends.onnx import proto

    value = proto.to_array(node.attrs["value"]).reshape(-1) if "value" in node.attrs else np.zeros(1, np.float32)
    shape = [int(d) for d in args[0].reshape(-1)]
    cx.check_size(shape, value.dtype)
    return [np.full(shape, value[0], value.dtype)]


@folder("Range")
def fold_range(cx, node, args):
    start, limit, delta = (np.asarray(a).reshape(()) for a in args)
    if delta == 0:
        raise cx.fail("delta is zero")
    count = max(int(np.ceil((limit - start) / delta)), 0)
    cx.check_size([count], start.dtype)
    return [(start + np.arange(count, dtype=start.dtype) * delta).astype(start.dtype)]


@folder("Expand")
def fold_expand(cx, node, args):
    shape = broadcast_shape(args[0].shape, [int(d) for d in args[1].reshape(-1)], cx)
    cx.check_size(shape, args[0].dtype)
    return [np.broadcast_to(args[0], shape).copy()]


@folder("Reshape", attrs=("allowzero",))
def fold_reshape(cx, node, args):
    return [args[0].reshape(reshape_target(args[0].shape, args[1], node.attr("allowzero", 0), cx))]


@folder("Flatten", attrs=("axis",))
def fold_flatten(cx, node, args):
    x = args[0]
    axis = flatten_axis(node.attr("axis", 1), x.ndim, cx)
    return [x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))]


@folder("Transpose", attrs=("perm",))
def fold_transpose(cx, node, args):
    return [np.transpose(args[0], node.attr("perm"))]


@folder("Slice")
def fold_slice(cx, node, args):
    x, starts, ends, axes, steps = (list(args) + [None] * 5)[:5]
    start, stop, step = slice_per_axis(x.shape, starts, ends, axes, steps, cx)
    return [x[tuple(slice(a, b, s) for a, b, s in zip(start, stop, step))].copy()]


_INT_DIV = lambda a, b: np.trunc(np.divide(a, b)).astype(np.result_type(a, b)) if np.result_type(a, b).kind in "iu" else np.divide(a, b)
_FOLD_BINARY = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _INT_DIV,
    "Equal": np.equal, "Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal,
    "GreaterOrEqual": np.greater_equal, "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
}
_FOLD_UNARY = {"Neg": np.negative, "Abs": np.abs, "Not": np.logical_not, "Sqrt": np.sqrt}


@folder(*_FOLD_BINARY)
def fold_binary(cx, node, args):
    a, b = args
    cx.check_size(broadcast_shape(a.shape, b.shape, cx), np.result_type(a, b))
    with np.errstate(all="ignore"):
        return [np.asarray(_FOLD_BINARY[node.op_type](a, b)).astype(np.result_type(a, b) if node.op_type in ("Add", "Sub", "Mul", "Div") else np.bool_)]


@folder(*_FOLD_UNARY)
def fold_unary(cx, node, args):
    with np.errstate(all="ignore"):
        return [np.asarray(_FOLD_UNARY[node.op_type](args[0])).astype(args[0].dtype)]


@folder("Max", "Min")
def fold_max_min(cx, node, args):
    combine = np.maximum if node.op_type == "Max" else np.minimum
    out = args[0]
    for a in args[1:]:
        out = combine(out, a)
    return [np.asarray(out)]


@folder("Where")
def fold_where(cx, node, args):
    shape = broadcast_shape(broadcast_shape(args[0].shape, args[1].shape, cx), args[2].shape, cx)
    cx.check_size(shape, np.result_type(args[1], args[2]))
    return [np.where(*args)]


@folder("Cast", attrs=("to", "saturate"))
def fold_cast(cx, node, args):
    from fusecc.frontends.onnx.proto import np_dtype

    dtype = np_dtype(node.attr("to"))
    if is_symbolic(args[0]) and np.dtype(dtype).kind in "iu":
        return [args[0]]  # dims stay dims
    return [args[0].astype(dtype)]


# Ops that only fold: exporters compute rotary tables (Sin, Cos of a Range)
# and causal masks (Trilu of ones) from shapes; at run time they are refused.
@folder("Sin", "Cos")
def fold_trigonometric(cx, node, args):
    return [(np.sin if node.op_type == "Sin" else np.cos)(args[0]).astype(args[0].dtype)]


@folder("Tile")
def fold_tile(cx, node, args):
    repeats = [int(r) for r in args[1].reshape(-1)]
    cx.check_size([d * r for d, r in zip(args[0].shape, repeats)], args[0].dtype)
    return [np.tile(args[0], repeats)]


@folder("Trilu", attrs=("upper",))
def fold_trilu(cx, node, args):
    k = int(args[1]) if len(args) > 1 and args[1] is not None else 0
    return [np.triu(args[0], k) if node.attr("upper", 1) else np.tril(args[0], k)]
