"""How close is the cost model's register estimate to what ptxas allocates?

    python benchmarks/register_estimates.py [--arch sm_90 sm_80] [--random N] [EXAMPLE ...]

Every example (examples/*.ir, or those named) is fused, tiled and lowered
for the GPU of each --arch (sm_90: the H200, sm_80: the A100), emitted as
CUDA C and compiled to a cubin by NVRTC; ptxas's report gives each
kernel's registers. The estimate is the one fusion decided with and the
tiler wrote on the group (`tile.registers`, carried on each kernel: see
`fusion/cost_model.kernel_resources`). With --random N, N random programs
of tests/program_gen.py (small shapes) are added.

One row per kernel: the estimate, ptxas's count, their ratio, and the
shared memory estimated and used (ptxas's static + the launch's dynamic).
The summary gives, per architecture, the range and median of ptxas/est.;
tests/passes/test_emit_cuda_programs.py asserts the band that
docs/cuda-target.md states.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parent.parent
ARCHES = ("sm_90", "sm_80")


@dataclass(frozen=True)
class Row:
    program: str
    kernel: str
    arch: str
    estimated_registers: int
    registers: int
    estimated_shared: int
    shared: int  # static (ptxas) + dynamic (launch)
    spills: bool

    @property
    def ratio(self) -> float:
        return self.registers / self.estimated_registers


def kernel_rows(program: str, text: str, arch: str) -> list[Row]:
    """Compile `text` for `arch` and pair each kernel's estimate with ptxas's figures."""
    from fusecc.compiler import parse_module, verify
    from fusecc.driver.cuda_target import lower_to_cuda
    from fusecc.runtime.cuda.resources import resource_usage

    module = parse_module(text, f"{program}.ir")
    verify(module)
    cuda = lower_to_cuda(module, arch, filename=f"{program}.ir")
    usage = resource_usage(cuda.text, f"{program}.cu", arch)
    rows = []
    for kernel in cuda.kernels:
        if kernel.estimate is None:
            continue  # copy kernels of the schedule: no group, no estimate
        used = usage[kernel.name]
        registers, shared = kernel.estimate
        rows.append(Row(program, kernel.name, arch, registers, used.registers, shared, used.shared_bytes + kernel.dynamic_shared_bytes, used.spills))
    return rows


def programs(names: list[str], random_count: int) -> list[tuple[str, str]]:
    found = [(p.stem, p.read_text()) for p in sorted((ROOT / "examples").glob("*.ir")) if not names or p.stem in names]
    if random_count:
        sys.path.insert(0, str(ROOT / "tests"))
        import program_gen

        from fusecc.compiler.printer import print_op

        found += [(f"random{seed}", print_op(program_gen.random_program(seed, num_ops=40).module)) for seed in range(random_count)]
    return found


def print_table(rows: list[Row]) -> None:
    print(f"{'program':<20} {'kernel':<28} {'arch':<6} {'est. regs':>9} {'ptxas':>6} {'ptxas/est.':>10} {'est. smem B':>11} {'smem B':>7}")
    for r in rows:
        spill = "  SPILLS" if r.spills else ""
        print(f"{r.program:<20} {r.kernel:<28} {r.arch:<6} {r.estimated_registers:>9} {r.registers:>6} {r.ratio:>10.2f} {r.estimated_shared:>11} {r.shared:>7}{spill}")


def summary(rows: list[Row]) -> str:
    lines = []
    for arch in sorted({r.arch for r in rows}, reverse=True):
        ratios = sorted(r.ratio for r in rows if r.arch == arch)
        kinds = {}
        for r in rows:
            if r.arch == arch:
                kinds.setdefault(r.kernel.split("_")[2], []).append(r.ratio)
        by_kind = ", ".join(f"{k} {min(v):.2f}-{max(v):.2f}" for k, v in sorted(kinds.items()))
        lines.append(f"{arch}: {len(ratios)} kernels, ptxas/est. {ratios[0]:.2f} to {ratios[-1]:.2f}, median {statistics.median(ratios):.2f} ({by_kind})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("examples", nargs="*", help="example names (default: all of examples/)")
    parser.add_argument("--arch", nargs="+", choices=ARCHES, default=list(ARCHES))
    parser.add_argument("--random", type=int, default=0, metavar="N", help="add N random programs (tests/program_gen.py)")
    args = parser.parse_args(argv)
    try:
        from fusecc.runtime.cuda.nvrtc import nvrtc_version

        nvrtc_version()
    except Exception as exc:  # NVRTC missing: nothing to compare with
        print(f"register_estimates: NVRTC is not available ({exc}); nothing to measure.")
        return 0
    rows = [row for name, text in programs(args.examples, args.random) for arch in args.arch for row in kernel_rows(name, text, arch)]
    print_table(rows)
    print()
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
