"""Reading an ONNX file that a stranger may have written.

Before anything is mapped or allocated: the model's opset is one we import,
every external-data location resolves to a regular file inside the model's
folder (no absolute paths, no `..` escapes, no symlinks out), every declared
tensor size agrees with the bytes that hold it, and the sum of the declared
sizes fits the memory budget. Only then are external tensors mapped.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from fusecc.compiler import paths
from fusecc.frontends.onnx.errors import ModelError

MIN_OPSET, MAX_OPSET = 13, 21
DEFAULT_MEMORY_BUDGET = 8 << 30
BUDGET_VARIABLE = "FUSECC_ONNX_MEMORY_BUDGET"
_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def require_onnx():
    """ONNX's message classes (fusecc.frontends.onnx.proto: without importing
    the onnx package when it is not imported yet), or a plain message
    saying how to get the package."""
    from fusecc.frontends.onnx.proto import messages

    return messages()


def parse_budget(text: str) -> int:
    """Bytes from `123`, `512M`, `8G` (powers of 1024)."""
    cleaned = text.strip().upper().removesuffix("B").removesuffix("I")
    number, suffix = (cleaned[:-1], cleaned[-1]) if cleaned[-1:] in _SUFFIXES else (cleaned, "")
    try:
        value = int(float(number) * _SUFFIXES[suffix])
    except ValueError:
        raise ModelError(f"memory budget '{text}' is not a size (examples: 1000000, 512M, 8G)") from None
    if value <= 0:
        raise ModelError(f"memory budget '{text}' must be positive")
    return value


def memory_budget(requested: int | None = None) -> int:
    if requested is not None:
        return requested
    from_env = os.environ.get(BUDGET_VARIABLE)
    return parse_budget(from_env) if from_env else DEFAULT_MEMORY_BUDGET


def resolve_inside(folder: str, location: str) -> str:
    """The real path of an external-data location, refused unless it is a
    regular file inside the model's folder once every symlink is followed."""
    try:
        resolved = paths.resolve_inside(folder, location, "external data location")
    except paths.PathOutsideFolder as exc:
        raise ModelError(str(exc)) from None
    if not resolved.is_file():
        raise ModelError(f"external data file '{location}' does not exist or is not a regular file")
    return str(resolved)


@dataclass
class ExternalTensor:
    path: str
    offset: int
    nbytes: int


@dataclass
class LoadedModel:
    """A parsed model whose tensors passed the checks; `external` holds the
    mapped bytes of external tensors by name."""

    path: str
    proto: object
    opset: int
    external: dict[str, np.ndarray] = field(default_factory=dict)
    declared_bytes: int = 0
    raw: dict[str, bytes] = field(default_factory=dict)  # initializers' inline raw_data, read once (a weight is megabytes)


def element_size(onnx, data_type: int) -> int | None:
    from fusecc.frontends.onnx.proto import np_dtype

    try:
        return np_dtype(data_type).itemsize
    except (KeyError, TypeError, ValueError):
        return None


def declared_nbytes(onnx, tensor) -> int:
    if any(d < 0 for d in tensor.dims):
        raise ModelError(f"tensor '{tensor.name}' declares a negative dimension {list(tensor.dims)}")
    size = element_size(onnx, tensor.data_type)
    if size is None:
        raise ModelError(f"tensor '{tensor.name}' has an unknown element type {tensor.data_type}")
    return math.prod(tensor.dims) * size


_TYPED_FIELDS = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data")


def check_inline(onnx, tensor, nbytes: int) -> bytes | None:
    """Inline data holds exactly the declared number of elements. Returns
    the raw bytes, if any (each read of `raw_data` copies them)."""
    if tensor.HasField("raw_data"):
        raw = tensor.raw_data
        if len(raw) != nbytes:
            raise ModelError(f"tensor '{tensor.name}' declares {nbytes} bytes {list(tensor.dims)} but holds {len(raw)}")
        return raw
    count = math.prod(tensor.dims)
    held = max(len(getattr(tensor, f)) for f in _TYPED_FIELDS)
    # float16/bfloat16/bool/int8 values are packed one per int32 entry.
    if held != count and not (count == 0 and held == 0):
        raise ModelError(f"tensor '{tensor.name}' declares {count} elements {list(tensor.dims)} but holds {held}")
    return None


def check_external(onnx, tensor, folder: str, nbytes: int) -> ExternalTensor:
    entries = {e.key: e.value for e in tensor.external_data}
    location = entries.get("location")
    if location is None:
        raise ModelError(f"external tensor '{tensor.name}' has no location")
    path = resolve_inside(folder, location)
    try:
        offset = int(entries.get("offset", "0"))
        length = int(entries["length"]) if "length" in entries else nbytes
    except ValueError:
        raise ModelError(f"external tensor '{tensor.name}' has a non-numeric offset or length") from None
    if offset < 0 or length != nbytes:
        raise ModelError(f"external tensor '{tensor.name}' declares {nbytes} bytes {list(tensor.dims)} but its entry says offset {offset}, length {length}")
    file_size = os.path.getsize(path)
    if offset + nbytes > file_size:
        raise ModelError(
            f"external tensor '{tensor.name}' needs bytes {offset}..{offset + nbytes} of '{location}', which has only {file_size}"
        )
    return ExternalTensor(path, offset, nbytes)


def all_tensors(graph):
    """Initializers and the tensors of Constant nodes (subgraphs are refused
    later, with their nodes)."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors


def load_model(path: str, budget: int | None = None) -> LoadedModel:
    onnx = require_onnx()
    from google.protobuf.message import DecodeError

    from fusecc.frontends.onnx.proto import np_dtype

    budget = memory_budget(budget)
    try:
        file_size = os.path.getsize(path)
    except OSError as exc:
        raise ModelError(f"could not open model '{path}': {exc.strerror}") from None
    if file_size > budget:
        raise ModelError(f"model '{path}' is {file_size} bytes, over the memory budget of {budget} ({BUDGET_VARIABLE})")
    try:
        with open(path, "rb") as f:
            proto = onnx.ModelProto()
            proto.ParseFromString(f.read())  # what onnx.load(path, load_external_data=False) does
    except (DecodeError, RuntimeWarning, ValueError, OSError) as exc:
        raise ModelError(f"could not read '{path}' as an ONNX model: {exc}") from None
    opset = check_opset(proto, path)

    folder = os.path.dirname(os.path.abspath(path))
    sizes = [(tensor, declared_nbytes(onnx, tensor)) for tensor in all_tensors(proto.graph)]
    declared = sum(nbytes for _, nbytes in sizes)
    if declared > budget:
        raise ModelError(
            f"model '{path}' declares {declared} bytes of tensors, over the memory budget of {budget} "
            f"(set {BUDGET_VARIABLE} or --memory-budget to allow it)"
        )
    external: dict[str, ExternalTensor] = {}
    raw: dict[str, bytes] = {}
    initializers = len(proto.graph.initializer)  # all_tensors gives them first
    for index, (tensor, nbytes) in enumerate(sizes):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            external[tensor.name] = check_external(onnx, tensor, folder, nbytes)
        else:
            data = check_inline(onnx, tensor, nbytes)
            if data is not None and index < initializers:
                raw[tensor.name] = data
    loaded = LoadedModel(path, proto, opset, declared_bytes=declared, raw=raw)
    tensors = {t.name: t for t in all_tensors(proto.graph)}
    for name, where in external.items():
        dtype = np_dtype(tensors[name].data_type)
        mapped = np.memmap(where.path, dtype=dtype, mode="r", offset=where.offset, shape=(where.nbytes // np.dtype(dtype).itemsize,))
        loaded.external[name] = mapped.reshape(tuple(tensors[name].dims))
    return loaded


def check_opset(proto, path: str) -> int:
    versions = {entry.domain: entry.version for entry in proto.opset_import}
    version = versions.get("", versions.get("ai.onnx"))
    if version is None:
        raise ModelError(f"model '{path}' imports no version of the default ONNX opset")
    if not MIN_OPSET <= version <= MAX_OPSET:
        raise ModelError(f"model '{path}' uses opset {version}; fusecc imports opsets {MIN_OPSET} to {MAX_OPSET}")
    return version
