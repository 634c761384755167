"""The GPU runtime: a (manifest, kernels.cu, inputs) triple on an NVIDIA GPU.

- CuPy is imported only when a `CudaRuntime` is made; checking for a GPU
  (`gpu_unavailable_reason`) asks the driver through ctypes and is cheap.
- Kernels compile with NVRTC (nvrtc.py, the same options as everywhere)
  for the device's own architecture. Cubins are cached on disk under a
  digest of the source, arch, NVRTC version and flags (runtime/cache.py:
  a private folder, content digest checked before use); CuPy loads them (`RawModule(path=...)`).
- One device allocation holds the arena, the inputs, the outputs and the
  constants (execute.plan_memory); arguments are bound once, since nothing
  moves, and constants (weights) are uploaded once, when a program is prepared.
- Launches run in order on one stream. `capture_graph()` records them once
  as a CUDA graph and later calls replay it: one launch instead of one per
  kernel (seed point 1: launch overhead).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from fusecc.runtime import cache

from fusecc.runtime.cuda.driver_check import driver_mismatch, dynamic_shared_opt_in, split_driver_version, wheel_cuda_majors
from fusecc.runtime.cuda.execute import Bound, constant_values, for_call, from_device_layout, gather_inputs, plan_memory, to_device_layout
from fusecc.passes.backends.cuda.manifest import Manifest
from fusecc.runtime.cuda.nvrtc import NvrtcOptions, compile_cuda, nvrtc_version
from fusecc.passes.backends.cuda.source import INCLUDE_DIR, PRELUDE_NAME



class GpuUnavailable(RuntimeError):
    """No usable GPU here; the message says why and what to use instead."""


class GpuLaunchError(RuntimeError):
    """A kernel failed on the device."""


@lru_cache(maxsize=1)
def gpu_unavailable_reason() -> str | None:
    """None when kernels can run on a GPU here, else the reason why not."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA driver is installed (libcuda.so.1 not found)"
    status = driver.cuInit(0)
    if status != 0:
        return f"the NVIDIA driver did not initialise (cuInit returned error {status})"
    version = ctypes.c_int(0)
    if driver.cuDriverGetVersion(ctypes.byref(version)) == 0:  # the first-contact check (driver_check.py)
        problem = driver_mismatch(split_driver_version(version.value), wheel_cuda_majors())
        if problem is not None:
            return problem
    count = ctypes.c_int(0)
    if driver.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return "no CUDA device is visible"
    if importlib.util.find_spec("cupy") is None:
        return "CuPy is not installed (pip install 'fusecc[cuda]')"
    return None


def require_gpu() -> None:
    reason = gpu_unavailable_reason()
    if reason is not None:
        raise GpuUnavailable(f"cannot run on a CUDA GPU: {reason}; use --target cpu to run on the CPU")


class CudaRuntime:
    """Compiles and loads kernels for one device, and prepares programs."""

    def __init__(self, device: int = 0, cache_dir: str | os.PathLike | None = None, options: NvrtcOptions = NvrtcOptions()):
        require_gpu()
        import cupy

        self.cp = cupy
        self.device = cupy.cuda.Device(device)
        self.arch = f"sm_{self.device.compute_capability}"
        self.options = options
        self.cache_root = cache_dir  # None: the user's cache (runtime/cache.py)
        with self.device:
            self.stream = cupy.cuda.Stream(non_blocking=True)
        self._modules: dict[Path, Any] = {}

    def cubin(self, source: str, filename: str = "kernels.cu") -> Path:
        """The cubin of `source` for this device, from the cache or NVRTC."""
        flags = self.options.flags(self.arch, "cubin")
        version = "%d.%d" % nvrtc_version()
        key = cache.digest(source, filename, self.arch, version, " ".join(flags), (INCLUDE_DIR / PRELUDE_NAME).read_bytes())

        def build(folder: Path) -> None:
            compiled = compile_cuda(source, filename, arch=self.arch, output="cubin", options=self.options)
            (folder / "kernels.cubin").write_bytes(compiled.code)

        entry, _ = cache.fetch("cubin", key, build, self.cache_root)
        return entry / "kernels.cubin"

    def module(self, source: str, filename: str = "kernels.cu"):
        path = self.cubin(source, filename)
        if path not in self._modules:
            with self.device:
                self._modules[path] = self.cp.RawModule(path=str(path))
        return self._modules[path]

    def prepare(self, manifest: Manifest, source: str, folder: str | os.PathLike | None = None) -> "GpuProgram":
        """Load `source`, allocate, upload the constants (from `folder` when
        the manifest was read from a file) and bind the arguments."""
        return GpuProgram(self, manifest, self.module(source, manifest.source), constant_values(manifest, folder))

    def run(self, manifest: Manifest, source: str, inputs: Mapping[str, Any] | Sequence[Any], folder: str | os.PathLike | None = None) -> dict[str, np.ndarray]:
        return self.prepare(manifest, source, folder)(inputs)


class GpuProgram:
    """A program's kernels, memory and bound arguments on one device.

    A dynamic manifest (`?` sizes) is bound per shape: the first call at a
    shape allocates its memory, uploads the constants and binds the
    arguments of the manifest specialised to its dims; the most recent
    `SHAPES_KEPT` shapes stay ready, so a repeated shape costs a static call."""

    SHAPES_KEPT = 4
    dynamic: Manifest | None = None  # the manifest with `?` sizes, when the program has them

    def __init__(self, runtime: CudaRuntime, manifest: Manifest, module, constants: Mapping[str, np.ndarray] | None = None):
        self.runtime = runtime
        self.module = module
        self.constants = constants
        self.dynamic = manifest if manifest.is_dynamic else None
        self.shapes: dict[Manifest, tuple] = {}  # specialised manifest -> (bound, args, graph), most recent last
        self.manifest = manifest
        self.bound = None
        self.graph = None
        if self.dynamic is None:
            self._bind(manifest)

    def _bind(self, manifest: Manifest) -> None:
        runtime, module, constants = self.runtime, self.module, self.constants
        self.manifest = manifest
        with runtime.device, runtime.stream:  # zeroed on the stream that then uses it
            self.bound = Bound(manifest, runtime.cp.zeros(plan_memory(manifest).total_bytes, dtype=runtime.cp.uint8))
            for name, view in self.bound.constants.items():  # once per program: later calls only copy inputs
                view.set((constants or {})[name], stream=runtime.stream)
            self.kernels = {name: module.get_function(name) for name in manifest.kernel_names}
        device_limit = runtime.cp.cuda.runtime.getDeviceProperties(runtime.device.id).get("sharedMemPerBlockOptin")
        for launch in manifest.launches:
            kernel = self.kernels[launch.kernel]
            # static + dynamic over 48 KB needs the opt-in; only the loaded kernel knows its static size
            allowed = dynamic_shared_opt_in(launch.kernel, kernel.shared_size_bytes, launch.shared_bytes, kernel.max_dynamic_shared_size_bytes, device_limit)
            if allowed is not None:
                kernel.max_dynamic_shared_size_bytes = allowed
        self.args = [tuple(self.bound.args(launch)) for launch in manifest.launches]
        self.graph = None

    def _at_shape(self, inputs) -> None:
        """Switch to the specialised manifest of these inputs' dims."""
        manifest = for_call(self.dynamic, inputs)
        if manifest is self.manifest:
            return
        if self.bound is not None and self.manifest is not self.dynamic:
            self.shapes[self.manifest] = (self.bound, self.args, self.graph, self.kernels)
        kept = self.shapes.pop(manifest, None)
        if kept is not None:
            self.manifest = manifest
            self.bound, self.args, self.graph, self.kernels = kept
        else:
            while len(self.shapes) >= self.SHAPES_KEPT:
                self.shapes.pop(next(iter(self.shapes)))  # the least recent: its memory goes back to CuPy's pool
            self._bind(manifest)

    def set_inputs(self, inputs: Mapping[str, Any] | Sequence[Any]) -> None:
        if self.dynamic is not None:
            self._at_shape(inputs)
        host = gather_inputs(self.manifest, inputs)
        with self.runtime.device:
            for spec in self.manifest.inputs:
                self.bound.tensors[spec.name].set(to_device_layout(host[spec.name], spec.dtype), stream=self.runtime.stream)

    def _launch_each(self) -> None:
        for launch, args in zip(self.manifest.launches, self.args):
            self.kernels[launch.kernel](launch.grid, launch.block, args, shared_mem=launch.shared_bytes)

    def launch(self) -> None:
        """Enqueue the program on the runtime's stream (asynchronous)."""
        if self.bound is None:
            raise GpuLaunchError("a program with '?' dims is bound per shape: set its inputs first (set_inputs or a call)")
        with self.runtime.device, self.runtime.stream:
            if self.graph is not None:
                self.graph.launch(self.runtime.stream)
            else:
                self._launch_each()

    def capture_graph(self) -> None:
        """Record the launches once; `launch` then replays the graph (of the
        current shape, for a program with `?` dims)."""
        if self.dynamic is not None and self.bound is None:
            raise GpuLaunchError("a program with '?' dims is bound per shape: set its inputs first (set_inputs or a call)")
        stream = self.runtime.stream
        with self.runtime.device, stream:
            stream.begin_capture()
            try:
                self._launch_each()
            except BaseException:
                # the launch's error is the one to report: end the capture, drop its own error
                try:
                    stream.end_capture()
                except Exception:
                    pass
                raise
            self.graph = stream.end_capture()

    def synchronize(self) -> None:
        try:
            self.runtime.stream.synchronize()
        except Exception as exc:  # CuPy's CUDARuntimeError, or the driver's
            kernels = ", ".join(self.manifest.kernel_names)
            raise GpuLaunchError(f"a kernel of {self.manifest.source} ({kernels}) failed on the GPU: {exc}") from exc

    def outputs(self) -> dict[str, np.ndarray]:
        self.synchronize()
        with self.runtime.device:
            return {
                spec.name: from_device_layout(self.bound.tensors[spec.name].get(stream=self.runtime.stream), spec.dtype)
                for spec in self.manifest.outputs
            }

    def __call__(self, inputs: Mapping[str, Any] | Sequence[Any]) -> dict[str, np.ndarray]:
        self.set_inputs(inputs)
        self.launch()
        return self.outputs()
