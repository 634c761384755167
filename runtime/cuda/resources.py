"""Registers, spills and shared memory per kernel, from ptxas's report.

NVRTC compiling a cubin with `-Xptxas=-v` writes, per entry function:

    ptxas info    : Compiling entry function 'softmax_rows' for 'sm_90'
    ptxas info    : Function properties for softmax_rows
    ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 18 registers, used 1 barriers, 16 bytes smem, 400 bytes cmem[0]

`fusecc model.ir --resource-usage` prints `format_resource_usage` of the
generated kernels.cu, with the estimates fusion and tiling made for each
kernel beside ptxas's figures.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from fusecc.runtime.cuda.nvrtc import NvrtcOptions, compile_cuda
from fusecc.passes.backends.cuda.source import kernel_names

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")


@dataclass(frozen=True)
class ResourceUsage:
    kernel: str
    arch: str
    registers: int
    shared_bytes: int  # static shared memory
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    barriers: int

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0


def parse_ptxas_report(log: str) -> dict[str, ResourceUsage]:
    """The usage of every entry function in a ptxas `-v` report, by name.

    The report lists each entry function's properties after its "Compiling
    entry function" line; the properties of non-inlined device functions
    may come in between and are left out.
    """
    usages: dict[str, ResourceUsage] = {}
    entry = arch = properties_of = None
    frame = (0, 0, 0)
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            entry, arch, frame = m.group(1), m.group(2), (0, 0, 0)
        elif m := _PROPERTIES.search(line):
            properties_of = m.group(1)
        elif (m := _FRAME.search(line)) and entry and properties_of == entry:
            frame = tuple(int(g) for g in m.groups())
        elif (m := _USED.search(line)) and entry:
            barriers, smem = _BARRIERS.search(line), _SMEM.search(line)
            usages[entry] = ResourceUsage(
                kernel=entry,
                arch=arch,
                registers=int(m.group(1)),
                shared_bytes=int(smem.group(1)) if smem else 0,
                stack_bytes=frame[0],
                spill_store_bytes=frame[1],
                spill_load_bytes=frame[2],
                barriers=int(barriers.group(1)) if barriers else 0,
            )
            entry = None
    return usages


def resource_usage(source: str, filename: str = "kernels.cu", arch: str = "sm_90", options: NvrtcOptions = NvrtcOptions()) -> dict[str, ResourceUsage]:
    """Compile to a cubin for `arch` and read ptxas's report; kernels in source order."""
    verbose = dataclasses.replace(options, ptxas_verbose=True)
    usages = parse_ptxas_report(compile_cuda(source, filename, arch=arch, output="cubin", options=verbose).log)
    order = [name for name in kernel_names(source, require_extern_c=False) if name in usages]
    return {name: usages[name] for name in [*order, *(n for n in usages if n not in order)]}


def format_resource_usage(usages: dict[str, ResourceUsage], estimates: dict[str, tuple[int, int]] | None = None) -> str:
    """A table of `usages`; with `estimates` ({kernel: (registers, shared
    bytes)}, what the cost model and tiler assumed), two more columns: the
    estimated registers and ptxas's count over it."""
    header = ("kernel", "arch", "registers", "smem B", "stack B", "spill st B", "spill ld B", "barriers")
    rows = [
        (u.kernel, u.arch, u.registers, u.shared_bytes, u.stack_bytes, u.spill_store_bytes, u.spill_load_bytes, u.barriers)
        for u in usages.values()
    ]
    if estimates is not None:
        header += ("est. registers", "ptxas/est.")
        rows = [(*row, *estimate_columns(u.registers, estimates.get(u.kernel))) for row, u in zip(rows, usages.values())]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(v).ljust(w) if i < 2 else str(v).rjust(w) for i, (v, w) in enumerate(zip(r, widths))) for r in [header, *rows]]
    spilling = [u.kernel for u in usages.values() if u.spills]
    if spilling:
        lines.append(f"warning: registers spill to local memory in {', '.join(spilling)}")
    return "\n".join(lines) + "\n"


def estimate_columns(registers: int, estimate: tuple[int, int] | None) -> tuple[str, str]:
    if estimate is None:
        return "-", "-"
    return str(estimate[0]), f"{registers / estimate[0]:.2f}"


def resource_usage_table(source: str, filename: str = "kernels.cu", arch: str = "sm_90") -> str:
    """What `fusecc --resource-usage` prints for a generated .cu file."""
    return format_resource_usage(resource_usage(source, filename, arch))
