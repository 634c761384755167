"""The harness's offline sanitizer: run the exact generated CUDA C on the CPU
and report what compute-sanitizer's racecheck, initcheck, memcheck and
synccheck would (cuda_cpu_sanitizer.h says how each access is checked).

    outputs, findings = run_sanitized(manifest, source, inputs)
    for f in findings: print(f)   # kernels.cu:57: error: shared-memory race ... in kernel ...

Besides the shadow state, every launch runs twice from the same memory:
threads in ascending order, then in descending order between barriers, and
the memory each leaves must agree bit for bit. A kernel that is right does
not depend on the order in which a block's threads run; one that does has a
race, even one the shadow state cannot see (through global memory).

`fusecc run model.ir --target cuda-sim --sanitize` runs a program this way:
a finding exits 1 and names the kernel, the line of kernels.cu (the file
`fusecc model.ir -o kernels.cu` writes), the threads and the address.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from fusecc.runtime.cuda.cpu_harness.loader import register_static_shared  # noqa: F401 (the build step of a sanitized run)

# cuda_cpu_sanitizer.h's enum Kind
RACE_RAW, RACE_WAR, RACE_WAW, UNINITIALIZED_SHARED, SHARED_OUT_OF_BOUNDS, GLOBAL_OUT_OF_BOUNDS, BARRIER_DIVERGENT, BARRIER_EXITED, PARTIAL_WARP = range(1, 10)
THREAD_ORDER = 100  # found in Python: the reverse-order run left other memory
BUFFER, IGNORED = 0, 1
KIND_NAMES = {
    RACE_RAW: "race-raw",
    RACE_WAR: "race-war",
    RACE_WAW: "race-waw",
    UNINITIALIZED_SHARED: "uninitialized-shared",
    SHARED_OUT_OF_BOUNDS: "shared-out-of-bounds",
    GLOBAL_OUT_OF_BOUNDS: "global-out-of-bounds",
    BARRIER_DIVERGENT: "barrier-divergent",
    BARRIER_EXITED: "barrier-exited",
    PARTIAL_WARP: "partial-warp",
    THREAD_ORDER: "thread-order",
}
REPORT_CAPACITY = 64


class _Region(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint64), ("end", ctypes.c_uint64), ("kind", ctypes.c_int32), ("index", ctypes.c_int32)]


class _Finding(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int32),
        ("thread", ctypes.c_int32),
        ("other_thread", ctypes.c_int32),
        ("size", ctypes.c_int32),
        ("block", ctypes.c_uint32 * 3),
        ("region", ctypes.c_int32),
        ("pc", ctypes.c_uint64),
        ("other_pc", ctypes.c_uint64),
        ("address", ctypes.c_uint64),
        ("offset", ctypes.c_int64),
        ("extra", ctypes.c_int64),
        ("what", ctypes.c_char * 48),
    ]


class _Report(ctypes.Structure):
    _fields_ = [("count", ctypes.c_int32), ("capacity", ctypes.c_int32), ("dropped", ctypes.c_int32), ("pad", ctypes.c_int32), ("findings", ctypes.POINTER(_Finding))]


class SanitizerFindings(Exception):
    """A sanitized run found problems; str() lists them, one per line."""

    def __init__(self, findings: list["Finding"]):
        self.findings = findings
        super().__init__("\n".join(str(f) for f in findings))


@dataclass(frozen=True)
class Finding:
    kind: str
    kernel: str
    source: str  # kernels.cu
    line: int | None
    message: str
    threads: tuple[tuple[int, int, int], ...] = ()
    block: tuple[int, int, int] = (0, 0, 0)
    address: int | None = None
    source_line: str = ""

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        text = f"{where}: error: {self.message} [{self.kind}]"
        return text + (f"\n  {self.source_line.strip()}" if self.source_line.strip() else "")


# --------------------------------------------------------------------------- the build


def library_ranges(library: Path) -> list[tuple[int, int]]:
    """Where the loaded library is mapped (its own constants and data): accesses there are not the launch's buffers."""
    target = os.path.realpath(library)
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and os.path.realpath(fields[5]) == target:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                ranges.append((start, end))
    return ranges


def source_lines(library: Path, pcs: Sequence[int], filename: str) -> dict[int, int]:
    """Line of `filename` of each return address (its call is the line before
    the address): the innermost inlined frame that is in `filename`."""
    pcs = sorted({pc for pc in pcs if pc})
    tool = shutil.which("addr2line")
    if not pcs or tool is None:
        return {}
    proc = subprocess.run([tool, "-a", "-i", "-e", str(library), *(hex(pc - 1) for pc in pcs)], capture_output=True, text=True, timeout=60)
    lines: dict[int, int] = {}
    current = None
    base = os.path.basename(filename)
    for text in proc.stdout.splitlines():
        if text.startswith("0x"):
            current = int(text, 16) + 1
            continue
        match = re.match(r"(.*):(\d+)", text)
        # GCC sometimes files a kernel's lines under the wrapper that #includes the source (same numbering)
        if current is not None and current not in lines and match and os.path.basename(match.group(1)) in (base, "fusecc_cpu_exports.cpp"):
            lines[current] = int(match.group(2))
    return lines


# --------------------------------------------------------------------------- one launch


def _thread(linear: int, block: Sequence[int]) -> tuple[int, int, int]:
    bx, by = block[0], block[1] if len(block) > 1 else 1
    return (linear % bx, linear // bx % by, linear // (bx * by))


def _new_report() -> tuple[_Report, Any]:
    storage = (_Finding * REPORT_CAPACITY)()
    return _Report(0, REPORT_CAPACITY, 0, 0, ctypes.cast(storage, ctypes.POINTER(_Finding))), storage


@dataclass
class _Launch:
    kernel: str
    grid: tuple
    block: tuple
    args: list
    shared_bytes: int
    arg_names: list[str]


class Sanitizer:
    """Sanitized launches of one compiled module; findings accumulate."""

    def __init__(self, source: str, filename: str = "kernels.cu", cache_dir: str | os.PathLike | None = None, opt_level: str = "-O2"):
        from fusecc.runtime.cuda.cpu_harness.loader import CpuModule

        self.source = source
        self.filename = filename
        self.module = CpuModule.compile(source, filename, cache_dir=cache_dir, sanitize=True, opt_level=opt_level)
        self.ignored = library_ranges(self.module.library)
        self.findings: list[Finding] = []
        self._raw: list[tuple[_Launch, _Finding]] = []

    def _regions(self, args: Sequence[Any]):
        rows = [(a.ctypes.data, a.ctypes.data + a.nbytes, BUFFER, i) for i, a in enumerate(args) if isinstance(a, np.ndarray)]
        rows += [(start, end, IGNORED, -1) for start, end in self.ignored]
        return (_Region * max(1, len(rows)))(*[_Region(*r) for r in rows]), len(rows)

    def launch(self, kernel: str, grid, block, args: Sequence[Any], shared_bytes: int = 0, memory: np.ndarray | None = None, arg_names: Sequence[str] | None = None) -> None:
        """One launch, run forward and then in reverse thread order from the
        same memory (`memory`: the one allocation the arguments view, else the
        arrays among `args`); the forward run's results are kept."""
        grid3 = tuple(grid) if not isinstance(grid, int) else (grid,)
        block3 = tuple(block) if not isinstance(block, int) else (block,)
        names = list(arg_names) if arg_names is not None else [f"argument {i}" for i in range(len(args))]
        launch = _Launch(kernel, grid3, block3, list(args), shared_bytes, names)
        arrays = [memory] if memory is not None else [a for a in args if isinstance(a, np.ndarray)]
        before = [a.copy() for a in arrays]
        regions, count = self._regions(args)
        report, storage = _new_report()
        regions_array = (_Region * count)(*regions[:count]) if count else None
        self.module.launch(kernel, grid3, block3, args, shared_bytes, workers=1, regions=regions_array, report=report)
        forward = [a.copy() for a in arrays]
        for a, b in zip(arrays, before):
            a[...] = b
        self.module.launch(kernel, grid3, block3, args, shared_bytes, workers=1, reverse=True, regions=regions_array, report=report)
        self._raw += [(launch, _Finding.from_buffer_copy(storage[i])) for i in range(report.count)]
        difference = self._first_difference(launch, arrays, forward)
        for a, f in zip(arrays, forward):
            a[...] = f
        if difference is not None:
            self.findings.append(difference)
        self._decode()

    def _first_difference(self, launch: _Launch, arrays, forward) -> Finding | None:
        for a, f in zip(arrays, forward):
            if np.array_equal(a.view(np.uint8).reshape(-1), f.view(np.uint8).reshape(-1)):
                continue
            byte = int(np.flatnonzero(a.view(np.uint8).reshape(-1) != f.view(np.uint8).reshape(-1))[0])
            address = a.ctypes.data + byte
            where = f"byte {byte}"
            for i, arg in enumerate(launch.args):
                if isinstance(arg, np.ndarray) and arg.ctypes.data <= address < arg.ctypes.data + arg.nbytes:
                    element = (address - arg.ctypes.data) // arg.itemsize
                    where = f"{launch.arg_names[i]}, element {tuple(int(k) for k in np.unravel_index(element, arg.shape)) if arg.ndim else ()}"
                    break
            return Finding(
                KIND_NAMES[THREAD_ORDER],
                launch.kernel,
                self.filename,
                None,
                f"in kernel {launch.kernel}: the memory it leaves differs ({where}) when each block's threads run in reverse order between barriers: "
                "its result depends on the order of its threads (a race, or a missing barrier)",
                address=address,
            )
        return None

    def _decode(self) -> None:
        if not self._raw:
            return
        lines = source_lines(self.module.library, [f.pc for _, f in self._raw] + [f.other_pc for _, f in self._raw], self.filename)
        text = self.source.splitlines()
        for launch, f in self._raw:
            line, other = lines.get(f.pc), lines.get(f.other_pc)
            self.findings.append(
                Finding(
                    KIND_NAMES[f.kind],
                    launch.kernel,
                    self.filename,
                    line,
                    _message(launch, f, other),
                    tuple(_thread(t, launch.block) for t in (f.thread, f.other_thread) if t >= 0),
                    tuple(f.block),
                    f.address or None,
                    text[line - 1] if line and line <= len(text) else "",
                )
            )
        self._raw.clear()


# a race's kind, what this thread did, what the other one had done
_RACES = {
    RACE_RAW: ("read after write", "reads", "wrote"),
    RACE_WAR: ("write after read", "writes", "read"),
    RACE_WAW: ("write after write", "writes", "wrote"),
}


def _message(launch: _Launch, f: _Finding, other_line: int | None) -> str:
    thread = _thread(f.thread, launch.block) if f.thread >= 0 else None
    other = _thread(f.other_thread, launch.block) if f.other_thread >= 0 else None
    at_other = f" at line {other_line}" if other_line else ""
    block = f"block {tuple(f.block)}"
    what = f.what.decode(errors="replace")
    spot = f"{what} + {f.offset} ({f.size} bytes, address {f.address:#x})"
    k = f.kind
    if k in _RACES:
        kind, this_access, other_access = _RACES[k]
        return f"shared-memory race ({kind}) in kernel {launch.kernel}: thread {thread} {this_access} {spot}, which thread {other} {other_access}{at_other} with no __syncthreads() between ({block})"
    if k == UNINITIALIZED_SHARED:
        return f"uninitialised shared memory read in kernel {launch.kernel}: thread {thread} reads {spot}, which no thread of {block} wrote"
    if k == SHARED_OUT_OF_BOUNDS:
        return f"out-of-bounds shared memory access in kernel {launch.kernel}: thread {thread} accesses {spot}, past the {f.extra} bytes of {what} ({block})"
    if k == GLOBAL_OUT_OF_BOUNDS:
        if f.region >= 0:
            name = launch.arg_names[f.region]
            side = f"{f.offset - f.extra} bytes past the end of" if f.offset >= f.extra else f"{-f.offset} bytes before"
            near = f"; nearest buffer: {side} {name} ({f.extra} bytes)"
        else:
            near = ""
        return f"out-of-bounds global memory access in kernel {launch.kernel}: thread {thread} accesses address {f.address:#x} ({f.size} bytes), in no buffer of the launch{near} ({block})"
    if k == BARRIER_DIVERGENT:
        return f"divergent barrier in kernel {launch.kernel}: threads {thread} and {other} wait at different __syncthreads() (the other{at_other}) ({block})"
    if k == BARRIER_EXITED:
        return f"barrier after exited threads in kernel {launch.kernel}: __syncthreads() reached by thread {thread} after {f.extra} thread(s) of {block} exited"
    if k == PARTIAL_WARP:
        return f"full-mask warp operation in a partial warp in kernel {launch.kernel}: thread {thread} shuffles with mask 0xffffffff but only {f.extra} of 32 lanes of its warp are active ({block})"
    return f"finding of kind {k} in kernel {launch.kernel}"


# --------------------------------------------------------------------------- a program


def run_sanitized(
    manifest, source: str, inputs: Mapping[str, Any] | Sequence[Any], *, cache_dir: str | os.PathLike | None = None, opt_level: str = "-O2"
) -> tuple[dict[str, np.ndarray], list[Finding]]:
    """Run a (manifest, kernels.cu, inputs) triple sanitized: (outputs, findings).
    `opt_level`: the host compiler's (loader.OPT_LEVELS)."""
    from fusecc.passes.backends.cuda.manifest import ArenaArg, TensorArg
    from fusecc.runtime.cuda.execute import Bound, constant_values, for_call, from_device_layout, gather_inputs, plan_memory, to_device_layout

    manifest = for_call(manifest, inputs)  # a dynamic manifest at the dims these inputs bind
    host = gather_inputs(manifest, inputs)
    sanitizer = Sanitizer(source, manifest.source, cache_dir, opt_level)
    bound = Bound(manifest, np.zeros(plan_memory(manifest).total_bytes, dtype=np.uint8), constant_values(manifest))
    for spec in manifest.inputs:
        bound.tensors[spec.name][...] = to_device_layout(host[spec.name], spec.dtype)
    for launch in manifest.launches:
        names = []
        for arg in launch.args:
            if isinstance(arg, TensorArg):
                names.append(f"{arg.role} '{arg.name}'")
            elif isinstance(arg, ArenaArg):
                names.append(f"arena buffer at byte {arg.offset} ({'x'.join(map(str, arg.shape))}x{arg.dtype})")
            else:
                names.append("a scalar")
        sanitizer.launch(launch.kernel, launch.grid, launch.block, bound.args(launch), launch.shared_bytes, memory=bound.memory, arg_names=names)
    outputs = {spec.name: from_device_layout(bound.tensors[spec.name].copy(), spec.dtype) for spec in manifest.outputs}
    return outputs, sanitizer.findings
