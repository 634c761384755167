"""Resource files: the bytes behind `dense_resource<name>` attributes.

A module names its resource file in an attribute (docs/resources.md):

    module attributes {fusecc.resources = "model.safetensors"} {
      func.func @main(...) {
        %w = tensor.constant {value = dense_resource<wq> : tensor<768x768xf32>} : () -> tensor<768x768xf32>

The file is a safetensors file (or an uncompressed `.npz`) that resolves
inside the module's folder (compiler/paths.py). Opening it reads only its
header; each resource is a read-only view of the file mapped into memory,
so parsing a model costs the same whatever the size of its weights.

safetensors validates a file (header, offsets, sizes); numpy maps it.
`save_module` writes a module and its resources back out.
"""

from __future__ import annotations

import json
import os
import struct
import zipfile
from pathlib import Path

import numpy as np

from fusecc.compiler import attributes as A
from fusecc.compiler.types import ShapedType, bf16, round_to_bf16

# The module attribute that names the resource file.
RESOURCES_ATTR = "fusecc.resources"

# safetensors' dtype names of our element types (bf16 is stored as 2 bytes there).
SAFETENSORS_DTYPES = {"f64": "F64", "f32": "F32", "f16": "F16", "bf16": "BF16", "i64": "I64", "i32": "I32", "i8": "I8", "i1": "BOOL"}
_RAW_NUMPY = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}


class ResourceError(ValueError):
    """A resource file is missing, unreadable, or does not hold what the module says."""


class _Entry:
    __slots__ = ("dtype", "shape", "start", "end", "load")

    def __init__(self, dtype: str, shape: tuple[int, ...], start: int, end: int, load=None):
        self.dtype, self.shape, self.start, self.end, self.load = dtype, shape, start, end, load


class ResourceFile:
    """One opened resource file: its table of contents, and the mapped bytes."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            raise ResourceError(f"resource file '{path}' does not exist") from None
        except OSError as exc:
            raise ResourceError(f"cannot read resource file '{path}': {exc.strerror}") from None
        if not self.path.is_file():
            raise ResourceError(f"resource file '{path}' is not a regular file")
        # Identifies the content for caches keyed by a module's text.
        self.identity = f"{self.path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
        self._map: np.memmap | None = None
        self.entries = self._read_npz() if self.path.suffix == ".npz" else self._read_safetensors(stat.st_size)
        self._attrs: dict[tuple[str, ShapedType], A.DenseResourceElementsAttr] = {}

    # --- tables of contents ------------------------------------------------------
    def _read_safetensors(self, size: int) -> dict[str, _Entry]:
        from safetensors import SafetensorError, safe_open

        try:  # safetensors checks the header: offsets in order, inside the file, sizes matching shapes
            with safe_open(str(self.path), framework="numpy"):
                pass
            with open(self.path, "rb") as f:
                (header_size,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(header_size))
        except (SafetensorError, OSError, ValueError, struct.error) as exc:
            raise ResourceError(f"resource file '{self.path}' is not a valid safetensors file ({exc})") from None
        base = 8 + header_size
        entries = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            start, end = info["data_offsets"]
            entries[name] = _Entry(info["dtype"], tuple(info["shape"]), base + start, base + end)
        return entries

    def _read_npz(self) -> dict[str, _Entry]:
        """Members stored uncompressed are mapped in place; compressed ones are read (a copy)."""
        entries = {}
        try:
            with zipfile.ZipFile(self.path) as archive, open(self.path, "rb") as raw:
                for info in archive.infolist():
                    name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                    if info.compress_type != zipfile.ZIP_STORED:
                        entries[name] = _Entry("", (), 0, 0, load=lambda member=name: _load_member(self.path, member))
                        continue
                    raw.seek(info.header_offset)
                    local = raw.read(30)
                    if local[:4] != b"PK\x03\x04":
                        raise ValueError(f"bad local header of member {info.filename}")
                    name_length, extra_length = struct.unpack("<HH", local[26:30])
                    raw.seek(info.header_offset + 30 + name_length + extra_length)
                    version = np.lib.format.read_magic(raw)
                    if version not in ((1, 0), (2, 0)):
                        entries[name] = _Entry("", (), 0, 0, load=lambda member=name: _load_member(self.path, member))
                        continue
                    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                    shape, fortran, dtype = read_header(raw)
                    if fortran or dtype.hasobject:
                        raise ValueError(f"member {info.filename} is Fortran-ordered or holds objects")
                    start = raw.tell()
                    entries[name] = _Entry(dtype.str, tuple(shape), start, start + int(np.prod(shape)) * dtype.itemsize)
        except (zipfile.BadZipFile, OSError, ValueError, struct.error) as exc:
            raise ResourceError(f"resource file '{self.path}' is not a readable .npz ({exc})") from None
        size = self.path.stat().st_size
        for name, entry in entries.items():
            if entry.end > size:
                raise ResourceError(f"resource file '{self.path}': '{name}' runs past the end of the file")
        return entries

    # --- resources -----------------------------------------------------------------
    def _mapped(self) -> np.memmap:
        if self._map is None:
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        return self._map

    def attribute(self, name: str, type: ShapedType) -> A.DenseResourceElementsAttr:
        """The attribute for resource `name` read as `type` (one object per
        name and type, so equal uses are the same attribute)."""
        found = self._attrs.get((name, type))
        if found is None:
            found = self._attrs[(name, type)] = A.DenseResourceElementsAttr(name, self.array(name, type), type, self.identity)
        return found

    def array(self, name: str, type: ShapedType) -> np.ndarray:
        entry = self.entries.get(name)
        if entry is None:
            known = ", ".join(sorted(self.entries)[:8]) + (", ..." if len(self.entries) > 8 else "")
            raise ResourceError(f"resource file '{self.path}' has no resource '{name}' (it holds {known or 'nothing'})")
        element = type.element_type
        if entry.load is not None:
            array = np.asarray(entry.load())
        else:
            if entry.dtype.startswith(("<", ">", "|")) or entry.dtype in ("?", "i1", "u1"):
                raw_dtype = np.dtype(entry.dtype)  # npz: numpy's own dtype string
            else:
                if entry.dtype not in _RAW_NUMPY:
                    raise ResourceError(f"resource '{name}' has dtype {entry.dtype}, which fusecc does not read")
                wanted = SAFETENSORS_DTYPES.get(element.name)
                if entry.dtype != wanted:
                    raise ResourceError(f"resource '{name}' holds {entry.dtype} elements, but {type} needs {wanted}")
                raw_dtype = np.dtype(_RAW_NUMPY[entry.dtype])
            if int(np.prod(entry.shape)) * raw_dtype.itemsize != entry.end - entry.start:
                raise ResourceError(f"resource '{name}' declares {list(entry.shape)} of {raw_dtype} but spans {entry.end - entry.start} bytes")
            array = self._mapped()[entry.start : entry.end].view(raw_dtype).reshape(entry.shape)
            if entry.dtype == "BF16":
                array = (array.astype(np.uint32) << 16).view(np.float32)
        if tuple(array.shape) != tuple(type.shape):
            raise ResourceError(f"resource '{name}' has shape {list(array.shape)}, but {type} needs {list(type.shape)}")
        storage = element.numpy_dtype
        if array.dtype.newbyteorder("=") != storage and array.dtype != storage:
            raise ResourceError(f"resource '{name}' holds {array.dtype} elements, but {type} needs {storage}")
        if array.dtype != storage or (element is bf16 and entry.dtype != "BF16"):
            array = array.astype(storage)  # a byte-order or bf16 conversion: a copy
            if element is bf16:
                array = round_to_bf16(array)
            array.flags.writeable = False
        return array


def _load_member(path: Path, name: str) -> np.ndarray:
    with np.load(path, allow_pickle=False) as archive:
        return archive[name]


def resource_attributes(module) -> list[A.DenseResourceElementsAttr]:
    """Every distinct resource attribute used in `module`, in order of use."""
    found: dict[int, A.DenseResourceElementsAttr] = {}
    for op in module.walk():
        for value in op.attributes.values():
            if isinstance(value, A.DenseResourceElementsAttr):
                found.setdefault(id(value), value)
    return list(found.values())


def resource_identity(module) -> str:
    """What a cache keyed by a module's text must add: the files and names
    its `dense_resource`s read (their text is the same whatever the bytes)."""
    return ";".join(sorted({f"{a.name}@{a.source}" for a in resource_attributes(module)}))


# --------------------------------------------------------------------------- writing


def write_safetensors(arrays: dict[str, tuple[np.ndarray, object]], path: str | os.PathLike) -> None:
    """Write {name: (storage array, element type)} as a safetensors file (bf16 as its 2 bytes)."""
    from safetensors import serialize_file

    specs, alive = _tensor_specs(arrays)
    serialize_file(specs, str(path), None)


def safetensors_bytes(arrays: dict[str, tuple[np.ndarray, object]]) -> bytes:
    """What `write_safetensors` writes, as bytes."""
    from safetensors import serialize

    specs, alive = _tensor_specs(arrays)
    return bytes(serialize(specs, None))


def _tensor_specs(arrays: dict[str, tuple[np.ndarray, object]]):
    """safetensors' specs of the arrays, and the buffers they point into (keep them alive)."""
    from safetensors import TensorSpec

    specs, alive = {}, []
    for name, (array, element) in arrays.items():
        if element is bf16:
            data = (np.ascontiguousarray(array, dtype=np.float32).view(np.uint32) >> 16).astype("<u2")
            dtype = "bfloat16"
        else:
            data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False)
            dtype = data.dtype.name
        alive.append(data)  # serialize_file reads the data through pointers
        specs[name] = TensorSpec(dtype=dtype, shape=list(data.shape), data_ptr=data.ctypes.data, data_len=data.nbytes)
    return specs, alive


def save_module(
    module, path: str | os.PathLike, resources: str | os.PathLike | None = None, externalize_bytes: int | None = 1024, debuginfo: bool = False
) -> Path | None:
    """Write `module` as text to `path` and its resources to a safetensors
    file beside it (default: `path` with the suffix .safetensors).

    Dense constants of more than `externalize_bytes` bytes (None: none)
    become resources too, named after their op's result. The module's
    `fusecc.resources` names the file relative to `path`'s folder; the
    module is updated in place. `debuginfo` prints the ops' locations.
    Returns the resource file, or None when nothing needed one.
    """
    from fusecc.compiler.printer import print_op

    path = Path(path)
    blob_path = Path(resources) if resources is not None else path.with_suffix(".safetensors")
    tensors: dict[str, dict] = {}
    taken: set[str] = set()
    for op in module.walk():
        for key, value in list(op.attributes.items()):
            if not isinstance(value, A.DenseElementsAttr):
                continue
            if isinstance(value, A.DenseResourceElementsAttr):
                name = value.name
            elif externalize_bytes is not None and not value.is_splat and value.array.nbytes > externalize_bytes:
                hint = op.results[0].name_hint if op.results and op.results[0].name_hint else "constant"
                name, suffix = hint, 1
                while name in taken:
                    name, suffix = f"{hint}_{suffix}", suffix + 1
            else:
                continue
            if name in tensors:
                continue
            taken.add(name)
            tensors[name] = (value.array, value.type.element_type)
            if not isinstance(value, A.DenseResourceElementsAttr):
                op.attributes[key] = A.DenseResourceElementsAttr(name, value.array, value.type, "unsaved")
    if tensors:
        blob_path.parent.mkdir(parents=True, exist_ok=True)
        # A new file replaces the old one: a mapping of the old (this module's
        # own resources, maybe) keeps reading the old bytes.
        partial = blob_path.with_name(f".{blob_path.name}.{os.getpid()}.partial")
        write_safetensors(tensors, partial)
        os.replace(partial, blob_path)
        written = ResourceFile(blob_path)
        for op in module.walk():
            for key, value in list(op.attributes.items()):
                if isinstance(value, A.DenseResourceElementsAttr):
                    op.attributes[key] = written.attribute(value.name, value.type)
        relative = os.path.relpath(blob_path.resolve(), path.resolve().parent)
        module.attributes[RESOURCES_ATTR] = A.StringAttr(relative)
    path.write_text(print_op(module, debuginfo=debuginfo), encoding="utf-8")
    return blob_path if tensors else None


__all__ = ["RESOURCES_ATTR", "ResourceError", "ResourceFile", "resource_attributes", "resource_identity", "save_module", "write_safetensors"]
