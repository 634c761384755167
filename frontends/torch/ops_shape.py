"""Layout aten ops. Every result shape is the node's FakeTensor shape, so
views, reshapes, squeezes and flattens are one `tensor.reshape`."""

from __future__ import annotations

from fusecc.dialects import tensor as T
from fusecc.compiler.types import i1
from fusecc.frontends.torch.context import element_of, shape_of
from fusecc.frontends.torch.table import translation


def reshaped(cx, x, shape):
    x = cx.value(x)
    if tuple(x.type.shape) == tuple(shape):
        return x
    return cx.emit(T.ReshapeOp, [x], result_type=x.type.with_shape(tuple(shape)))


def axis_of(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


@translation("aten.view", "aten._unsafe_view", "aten.reshape", "aten.unsqueeze", "aten.squeeze", "aten.flatten",
             "aten.view_copy", "aten.unflatten")
def translate_reshape(cx, args, kwargs):
    return reshaped(cx, args[0], cx.result_type().shape)


@translation("aten.permute")
def translate_permute(cx, args, kwargs):
    rank = len(shape_of(args[0]))
    perm = [axis_of(d, rank) for d in args[1]]
    if perm == list(range(rank)):
        return args[0]
    return cx.emit(T.TransposeOp, [args[0]], {"perm": perm})


@translation("aten.t", "aten.transpose.int")
def translate_transpose(cx, args, kwargs):
    rank = len(shape_of(args[0]))
    if rank < 2:
        return args[0]
    a, b = (axis_of(d, rank) for d in args[1:3]) if len(args) > 1 else (0, 1)
    perm = list(range(rank))
    perm[a], perm[b] = perm[b], perm[a]
    return translate_permute(cx, [args[0], perm], {})


@translation("aten.expand", "aten.broadcast_to")
def translate_expand(cx, args, kwargs):
    x = cx.value(args[0])
    shape = cx.result_type().shape
    if tuple(x.type.shape) == tuple(shape):
        return x
    return cx.emit(T.BroadcastToOp, [x], result_type=x.type.with_shape(tuple(shape)))


TO_THE_END = (1 << 63) - 1  # torch's x[a:] says stop = INT64_MAX; tensor.slice clamps as Python does


def sliced(cx, x, axis, start, stop, step):
    """x[start:stop:step] on `axis`; an axis of `?` size takes the bounds as
    they are (tensor.slice normalises them like Python's slice.indices at run time)."""
    shape = shape_of(x)
    if type(shape[axis]) is int:
        start, stop, step = slice(start, stop, step).indices(shape[axis])
        if (start, stop, step) == (0, shape[axis], 1):
            return cx.value(x)
    else:
        start, stop, step = start or 0, TO_THE_END if stop is None else stop, step or 1
        if any(type(b) is not int for b in (start, stop, step)):
            raise cx.unsupported("slice bounds that are symbolic sizes")
    starts, stops, steps = [0] * len(shape), [d if type(d) is int else TO_THE_END for d in shape], [1] * len(shape)
    starts[axis], stops[axis], steps[axis] = start, stop, step
    return cx.emit(T.SliceOp, [x], {"start": starts, "stop": stops, "step": steps})


@translation("aten.slice.Tensor")
def translate_slice(cx, args, kwargs):
    x, dim, start, end, step = (list(args) + [0, None, None, 1][len(args) - 1:])[:5]
    dim = kwargs.get("dim", dim)
    rank = len(shape_of(x))
    return sliced(cx, x, axis_of(dim, rank), kwargs.get("start", start), kwargs.get("end", end), kwargs.get("step", step) or 1)


@translation("aten.select.int")
def translate_select(cx, args, kwargs):
    x, dim, index = args
    axis = axis_of(dim, len(shape_of(x)))
    index = index + shape_of(x)[axis] if index < 0 else index
    return reshaped(cx, sliced(cx, x, axis, index, index + 1, 1), cx.result_type().shape)


@translation("aten.split_with_sizes", "aten.split.Tensor")
def translate_split(cx, args, kwargs):
    x, sizes = args[0], args[1]
    dim = kwargs.get("dim", args[2] if len(args) > 2 else 0)
    shape = shape_of(x)
    axis = axis_of(dim, len(shape))
    if isinstance(sizes, int):
        sizes = [min(sizes, shape[axis] - start) for start in range(0, shape[axis], sizes)]
    outputs, offset = [], 0
    for size in sizes:
        outputs.append(sliced(cx, x, axis, offset, offset + size, 1))
        offset += size
    return tuple(outputs)


@translation("aten.cat")
def translate_cat(cx, args, kwargs):
    tensors = [t for t in args[0] if 0 not in shape_of(t) or len(shape_of(t)) != 1]  # torch skips legacy empty 1-d tensors
    dim = kwargs.get("dim", args[1] if len(args) > 1 else 0)
    if len(tensors) == 1:
        return tensors[0]
    element = cx.result_type().element_type
    return cx.emit(T.ConcatOp, [cx.cast(t, element) for t in tensors], {"axis": axis_of(dim, len(shape_of(tensors[0])))})


@translation("aten.embedding")
def translate_embedding(cx, args, kwargs):
    """weight[indices]: a gather on axis 0 (padding_idx only matters for gradients)."""
    weight, indices = args[0], args[1]
    return cx.emit(T.GatherOp, [weight, indices], {"axis": 0})


@translation("aten.index_select")
def translate_index_select(cx, args, kwargs):
    x, dim, indices = args
    return cx.emit(T.GatherOp, [x, indices], {"axis": axis_of(dim, len(shape_of(x)))})


@translation("aten.index.Tensor")
def translate_index(cx, args, kwargs):
    """x[idx] with one index tensor on the first indexed axis (torch's advanced indexing, restricted)."""
    x, indices = args
    used = [(axis, i) for axis, i in enumerate(indices) if i is not None]
    if len(used) != 1:
        raise cx.unsupported("advanced indexing with more than one index tensor")
    axis, index = used[0]
    if element_of(index) is i1:
        raise cx.unsupported("indexing with a boolean mask (its result shape depends on the values)")
    return cx.emit(T.GatherOp, [x, index], {"axis": axis})
