"""Per-call Python overhead of a compiled CPU program (issue 11.2: <= 50 us for 30 kernels).

    python benchmarks/call_overhead.py [--kernels 30] [--threads 1] [--calls 3000]

The program is a chain of `--kernels` tiny elementwise ops (8 floats each)
with `fusion.forbid` on each, so every op is a kernel of its own and the
kernels' own work is a few nanoseconds. Per call we give the median over
rounds of:
- `prog(x=...)`: the public API (input checks, results by name);
- `CompiledProgram.run`: the executor alone;
- the kernels alone: the sum of the executor profile's per-launch times
  (each one ctypes call into the kernel, ~1.5 us on this machine: the floor
  any Python driver pays per kernel);
overhead = API time minus the kernels-alone time. Figures, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def program_text(kernels: int) -> str:
    t = "tensor<8xf32>"
    lines = [f"func.func @main(%x: {t}) -> {t} {{", f"  %v0 = tensor.relu %x {{fusion.forbid = true}} : ({t}) -> {t}"]
    for i in range(1, kernels):
        op = "tensor.relu" if i % 2 else "tensor.neg"
        lines.append(f"  %v{i} = {op} %v{i - 1} {{fusion.forbid = true}} : ({t}) -> {t}")
    lines += [f"  func.return %v{kernels - 1} : {t}", "}"]
    return "\n".join(lines) + "\n"


def rounds_of(function, calls: int, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            function()
        out.append((time.perf_counter() - start) / calls)
    return out


def measure(kernels: int, threads: int, calls: int, rounds: int) -> dict:
    import fusecc

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "chain.ir"
        path.write_text(program_text(kernels))
        prog = fusecc.compile(str(path), target="cpu", options={"threads": threads})
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    compiled = prog._compiled
    plan = compiled.prepare(prog.entry)
    # the kernels: the executor's profile times each launch alone (one ctypes call each)
    def kernel_seconds() -> float:
        profile: list = []
        compiled.run([x], prog.entry, profile=profile)
        return sum(seconds for name, seconds in profile if name != "copy")

    api = rounds_of(lambda: prog(x=x), calls, rounds)
    run = rounds_of(lambda: compiled.run([x], prog.entry), calls, rounds)
    alone = [statistics.median(kernel_seconds() for _ in range(calls)) for _ in range(rounds)]
    return {"kernels": len(prog.kernels), "launch steps": sum(1 for s in plan.steps if s[0] == "launch"), "threads": threads,
            "api_us": 1e6 * statistics.median(api), "run_us": 1e6 * statistics.median(run), "kernels_alone_us": 1e6 * statistics.median(alone),
            "api_range_us": [1e6 * min(api), 1e6 * max(api)], "run_range_us": [1e6 * min(run), 1e6 * max(run)]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=30)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    for threads in (int(t) for t in args.threads.split(",")):
        r = measure(args.kernels, threads, args.calls, args.rounds)
        print(f"{r['kernels']} kernels, {threads} thread(s): API {r['api_us']:.1f} us/call ({r['api_range_us'][0]:.1f}-{r['api_range_us'][1]:.1f}), "
              f"executor run {r['run_us']:.1f} us ({r['run_range_us'][0]:.1f}-{r['run_range_us'][1]:.1f}), kernels alone {r['kernels_alone_us']:.1f} us; "
              f"overhead (API - kernels alone) {r['api_us'] - r['kernels_alone_us']:.1f} us", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
