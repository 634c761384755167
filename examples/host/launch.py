#!/usr/bin/env python3
"""Launch fusecc's kernels on a GPU with nothing but numpy and cuda-bindings.

    fusecc model.ir -o kernels.cu       # kernels.cu + kernels.json (+ kernels.safetensors: the weights)
    python launch.py kernels.json --inputs in.npz -o out.npz

It reads the manifest (docs/cuda-manifest.md), compiles kernels.cu with NVRTC
and the options the manifest gives, makes one device allocation (the arena,
then each input, then each output, then each constant, each 256-byte
aligned), uploads the constants from the safetensors file the manifest names
(once), copies the inputs in, opts each kernel in to the dynamic shared memory its launches need
(`shared_opt_in`), launches in order on one stream and copies the outputs out.
The first half (reading the manifest, planning memory, packing arguments) is
plain numpy; only `CudaDriver` needs cuda-bindings and a GPU, so the rest runs,
and is tested, anywhere. fusecc is not imported: this is what another program
would do with fusecc's output.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import pathlib
import sys
from dataclasses import dataclass

import numpy as np

SCHEMA_VERSIONS = (1, 2)  # 2 adds `constants`
ALIGNMENT = 256  # every tensor starts at a multiple of this (cudaMalloc's alignment)
# How each element type is held in device memory: bf16 as its 16-bit pattern, i1 as one byte.
STORAGE = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": np.uint16,
           "i64": np.int64, "i32": np.int32, "i8": np.int8, "i1": np.uint8}
SCALAR_CTYPES = {"f64": ctypes.c_double, "f32": ctypes.c_float, "f16": ctypes.c_uint16, "bf16": ctypes.c_uint16,
                 "i64": ctypes.c_int64, "i32": ctypes.c_int32, "i8": ctypes.c_int8, "i1": ctypes.c_uint8}


# --------------------------------------------------------------------------- the manifest (numpy only)


def read_manifest(path: str | pathlib.Path) -> dict:
    manifest = json.loads(pathlib.Path(path).read_text())
    if manifest.get("version") not in SCHEMA_VERSIONS:
        raise SystemExit(f"{path}: this host program reads manifest versions {SCHEMA_VERSIONS}, not {manifest.get('version')}")
    return manifest


def read_constants(manifest: dict, folder: str | pathlib.Path) -> dict[str, bytes]:
    """Each constant's bytes, read from the safetensors file the manifest names
    inside `folder`. safetensors stores little-endian rows, bf16 as its 16-bit
    pattern and bool as a byte: the device layout already."""
    root, files, found = pathlib.Path(folder).resolve(), {}, {}
    for constant in manifest.get("constants", []):
        path = (root / constant["file"]).resolve()
        if pathlib.Path(constant["file"]).is_absolute() or not path.is_relative_to(root):
            raise SystemExit(f"constant '{constant['name']}': '{constant['file']}' is not inside {root}")
        if path not in files:
            data = path.read_bytes()
            size = int.from_bytes(data[:8], "little")
            files[path] = (json.loads(data[8 : 8 + size]), memoryview(data)[8 + size :])
        header, body = files[path]
        entry = header.get(constant["tensor"])
        if entry is None or list(entry["shape"]) != list(constant["shape"]) or entry["data_offsets"][1] - entry["data_offsets"][0] != nbytes(constant):
            raise SystemExit(f"constant '{constant['name']}': {path.name} has no tensor '{constant['tensor']}' of shape {constant['shape']} and dtype {constant['dtype']}")
        found[constant["name"]] = bytes(body[entry["data_offsets"][0] : entry["data_offsets"][1]])
    return found


def aligned(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def nbytes(tensor: dict) -> int:
    return math.prod(tensor["shape"]) * np.dtype(STORAGE[tensor["dtype"]]).itemsize


@dataclass
class MemoryPlan:
    offsets: dict[str, int]  # input/output name -> byte offset in the one allocation
    total_bytes: int
    constant_offsets: dict[str, int]  # constant name -> byte offset


def plan_memory(manifest: dict) -> MemoryPlan:
    """The arena at 0, then each input, then each output, then each constant, each aligned."""
    offsets, constant_offsets, end = {}, {}, manifest.get("arena_bytes", 0)
    for tensor in manifest["inputs"] + manifest["outputs"]:
        offsets[tensor["name"]] = aligned(end)
        end = offsets[tensor["name"]] + nbytes(tensor)
    for constant in manifest.get("constants", []):
        constant_offsets[constant["name"]] = aligned(end)
        end = constant_offsets[constant["name"]] + nbytes(constant)
    return MemoryPlan(offsets, aligned(max(end, 1)), constant_offsets)


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns, rounded to nearest even (NaN stays NaN)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)


def to_device(array, tensor: dict) -> np.ndarray:
    array = np.asarray(array)
    if tuple(array.shape) != tuple(tensor["shape"]):
        raise SystemExit(f"input '{tensor['name']}' has shape {list(array.shape)}, the manifest says {tensor['shape']}")
    if tensor["dtype"] == "bf16":
        return bf16_bits(array.astype(np.float32))
    return np.ascontiguousarray(array.astype(STORAGE[tensor["dtype"]]))


def from_device(raw: bytes, tensor: dict) -> np.ndarray:
    array = np.frombuffer(raw, dtype=STORAGE[tensor["dtype"]]).reshape(tensor["shape"])
    if tensor["dtype"] == "bf16":
        return (array.astype(np.uint32) << 16).view(np.float32)
    return array.astype(bool) if tensor["dtype"] == "i1" else array.copy()


def scalar(arg: dict):
    dtype, value = arg["dtype"], arg["scalar"]
    if dtype == "bf16":
        return SCALAR_CTYPES[dtype](int(bf16_bits(np.array([value], np.float32))[0]))
    if dtype == "f16":
        return SCALAR_CTYPES[dtype](int(np.array([value], np.float16).view(np.uint16)[0]))
    return SCALAR_CTYPES[dtype](value)


def launch_arguments(launch: dict, base: int, plan: MemoryPlan) -> list:
    """The launch's arguments as C values, in the kernel's parameter order:
    device pointers (base + offset) for tensors, values for scalars."""
    values = []
    for arg in launch["args"]:
        if "input" in arg or "output" in arg:
            values.append(ctypes.c_void_p(base + plan.offsets[arg.get("input", arg.get("output"))]))
        elif "arena" in arg:
            values.append(ctypes.c_void_p(base + arg["arena"]))
        elif "constant" in arg:
            values.append(ctypes.c_void_p(base + plan.constant_offsets[arg["constant"]]))
        else:
            values.append(scalar(arg))
    return values


def shared_memory_opt_ins(manifest: dict) -> dict[str, int]:
    """kernel -> the dynamic shared memory it must be allowed before its first launch."""
    needs: dict[str, int] = {}
    for launch in manifest["launches"]:
        if launch.get("shared_opt_in", launch.get("static_shared_bytes", 0) + launch.get("shared_bytes", 0) > 48 * 1024):
            needs[launch["kernel"]] = max(needs.get(launch["kernel"], 0), launch["shared_bytes"])
    return needs


def run(manifest: dict, source: str, inputs: dict, driver, folder: str | pathlib.Path = ".") -> dict[str, np.ndarray]:
    """Compile, upload the constants (from `folder`, the manifest's), copy in,
    launch in order, copy out; `driver` is a CudaDriver (or anything with its
    methods). A program run many times would upload its constants once."""
    plan = plan_memory(manifest)
    constants = read_constants(manifest, folder)
    module = driver.load(driver.compile(source, manifest["source"], manifest.get("compile_options", ["-std=c++17"])))
    kernels = {launch["kernel"]: None for launch in manifest["launches"]}
    for name in kernels:
        kernels[name] = driver.function(module, name)
    for name, shared in shared_memory_opt_ins(manifest).items():
        driver.allow_dynamic_shared_memory(kernels[name], shared)
    base = driver.allocate(plan.total_bytes)
    try:
        driver.zero(base, plan.total_bytes)
        for name, data in constants.items():
            driver.copy_to_device(base + plan.constant_offsets[name], np.frombuffer(data, np.uint8))
        for tensor in manifest["inputs"]:
            if tensor["name"] not in inputs:
                raise SystemExit(f"missing input '{tensor['name']}' (the file holds {', '.join(sorted(inputs)) or 'nothing'})")
            driver.copy_to_device(base + plan.offsets[tensor["name"]], to_device(inputs[tensor["name"]], tensor))
        for launch in manifest["launches"]:
            grid = list(launch["grid"]) + [1] * (3 - len(launch["grid"]))
            block = list(launch["block"]) + [1] * (3 - len(launch["block"]))
            driver.launch(kernels[launch["kernel"]], grid, block, launch.get("shared_bytes", 0), launch_arguments(launch, base, plan))
        driver.synchronize()
        return {t["name"]: from_device(driver.copy_from_device(base + plan.offsets[t["name"]], nbytes(t)), t) for t in manifest["outputs"]}
    finally:
        driver.free(base)


# --------------------------------------------------------------------------- the GPU (cuda-bindings)


class CudaDriver:
    """The few driver-API and NVRTC calls `run` needs, over cuda-bindings."""

    def __init__(self, device: int = 0):
        try:
            from cuda.bindings import driver, nvrtc
        except ImportError:
            raise SystemExit("launch.py needs cuda-bindings (pip install cuda-bindings) and a CUDA driver") from None
        self.cu, self.nvrtc = driver, nvrtc
        self.check(driver.cuInit(0))
        self.device = self.check(driver.cuDeviceGet(device))
        self.context = self.check(driver.cuDevicePrimaryCtxRetain(self.device))
        self.check(driver.cuCtxSetCurrent(self.context))
        major = self.check(driver.cuDeviceGetAttribute(driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device))
        minor = self.check(driver.cuDeviceGetAttribute(driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device))
        self.arch = f"compute_{major}{minor}"

    def check(self, result):
        error, *values = result
        if int(error) != 0:
            raise SystemExit(f"CUDA error {error}")
        return values[0] if len(values) == 1 else values

    def compile(self, source: str, name: str, options: list[str]) -> bytes:
        program = self.check(self.nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []))
        flags = [f"-arch={self.arch}".encode()] + [o.encode() for o in options]
        (error,) = self.nvrtc.nvrtcCompileProgram(program, len(flags), flags)
        if int(error) != 0:
            size = self.check(self.nvrtc.nvrtcGetProgramLogSize(program))
            log = b" " * size
            self.check(self.nvrtc.nvrtcGetProgramLog(program, log))
            raise SystemExit(f"NVRTC rejected {name}:\n{log.decode(errors='replace')}")
        size = self.check(self.nvrtc.nvrtcGetPTXSize(program))
        ptx = b" " * size
        self.check(self.nvrtc.nvrtcGetPTX(program, ptx))
        return ptx

    def load(self, image: bytes):
        return self.check(self.cu.cuModuleLoadData(image))

    def function(self, module, name: str):
        return self.check(self.cu.cuModuleGetFunction(module, name.encode()))

    def allow_dynamic_shared_memory(self, function, nbytes: int) -> None:
        attribute = self.cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self.check(self.cu.cuFuncSetAttribute(function, attribute, nbytes))

    def allocate(self, nbytes: int) -> int:
        return int(self.check(self.cu.cuMemAlloc(nbytes)))

    def zero(self, pointer: int, nbytes: int) -> None:
        self.check(self.cu.cuMemsetD8(pointer, 0, nbytes))

    def copy_to_device(self, pointer: int, array: np.ndarray) -> None:
        self.check(self.cu.cuMemcpyHtoD(pointer, array.ctypes.data, array.nbytes))

    def copy_from_device(self, pointer: int, nbytes: int) -> bytes:
        host = np.empty(nbytes, np.uint8)
        self.check(self.cu.cuMemcpyDtoH(host.ctypes.data, pointer, nbytes))
        return host.tobytes()

    def launch(self, function, grid, block, shared_bytes: int, arguments: list) -> None:
        pointers = (ctypes.c_void_p * len(arguments))(*[ctypes.addressof(a) for a in arguments])
        self.check(self.cu.cuLaunchKernel(function, *grid, *block, shared_bytes, 0, ctypes.addressof(pointers), 0))

    def synchronize(self) -> None:
        self.check(self.cu.cuCtxSynchronize())

    def free(self, pointer: int) -> None:
        self.check(self.cu.cuMemFree(pointer))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Run fusecc's kernels.cu on a GPU, as its kernels.json says.")
    p.add_argument("manifest", help="kernels.json (the .cu it names is read from the same folder)")
    p.add_argument("--inputs", required=True, help=".npz with one array per input, by name")
    p.add_argument("-o", dest="output", required=True, help=".npz to write the outputs to")
    args = p.parse_args(argv)
    manifest = read_manifest(args.manifest)
    source = (pathlib.Path(args.manifest).parent / manifest["source"]).read_text()
    with np.load(args.inputs, allow_pickle=False) as held:
        inputs = dict(held)
    outputs = run(manifest, source, inputs, CudaDriver(), pathlib.Path(args.manifest).parent)
    np.savez(args.output, **outputs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
