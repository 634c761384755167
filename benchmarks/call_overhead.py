"""Per-call overhead of a compiled CPU program (issue 11.2: <= 50 us for 30 kernels; issue 15.4's runner).

    python benchmarks/call_overhead.py                         # both programs, 1 thread, thread CPU time
    python benchmarks/call_overhead.py --what api --threads 1,2 --clock wall

Two programs of 30 launches whose kernels do almost nothing, so that what a
call costs is nearly all overhead:
- `api`: a chain of 30 elementwise ops on 8 floats, each with `fusion.forbid`
  (one kernel each), one input; called as `prog(x=...)` (the public API:
  input checks, results by name), as `CompiledProgram.run` (the executor
  alone), and as `SchedulePlan.call` (inputs and outputs by address: the
  executor's floor);
- `torch`: `torch.compile(backend="fusecc")` of 30 x (Linear 16->16, ReLU)
  at B=4, frozen (the weights are packed at load, so a call is 30 matmul
  launches); called through torch.compile (Dynamo's guards, AOT autograd's
  wrapper, fusecc's runner) and as the backend's runner alone (replayed with
  the arguments Dynamo gave it; it checks each frozen weight's data pointer
  and version first), and as the runner's call of the program alone (the
  tensors' data pointers to the executor), with torch eager beside it.
"The kernels" is one native call of the program's encoded steps
(runtime/cpu/call_path.py: the 30 kernels back to back and one ctypes
call); where that does not exist (an older revision) it is the sum of the
executor profile's per-launch times, each one ctypes call. Overhead = a
row minus the kernels. Each figure: the median over `--rounds` rounds of
the mean over `--calls` calls, with the range over rounds. Figures, never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}


def program_text(kernels: int) -> str:
    t = "tensor<8xf32>"
    lines = [f"func.func @main(%x: {t}) -> {t} {{", f"  %v0 = tensor.relu %x {{fusion.forbid = true}} : ({t}) -> {t}"]
    for i in range(1, kernels):
        op = "tensor.relu" if i % 2 else "tensor.neg"
        lines.append(f"  %v{i} = {op} %v{i - 1} {{fusion.forbid = true}} : ({t}) -> {t}")
    lines += [f"  func.return %v{kernels - 1} : {t}", "}"]
    return "\n".join(lines) + "\n"


def rounds_of(function, calls: int, rounds: int, clock=time.thread_time) -> list[float]:
    """Seconds per call, one mean per round."""
    out = []
    for _ in range(rounds):
        start = clock()
        for _ in range(calls):
            function()
        out.append((clock() - start) / calls)
    return out


def kernels_alone(compiled, entry: str, inputs: list[np.ndarray]):
    """A function running just the kernels of a call, and what it measures."""
    plan = compiled.prepare(entry)
    call = getattr(plan, "_call", None)
    if call is not None and [s[0] for s in call.segments] == ["native"]:
        from fusecc.runtime.cpu.buffers import address_of, output_arrays

        outputs, output_addresses = output_arrays(plan.layout.output_types)
        input_addresses = [address_of(a) for a in inputs]

        def native():  # the addresses set again each time: other calls move them; `outputs` stays alive with this closure
            call.set_addresses(input_addresses, output_addresses)
            call.run_set()

        native.outputs = outputs
        return native, "one native call of the encoded steps"

    def profiled():
        profile: list = []
        compiled.run(inputs, entry, profile=profile)
        return sum(seconds for name, seconds in profile if name != "copy")

    return profiled, "the executor profile's launches, one ctypes call each"


def _row(name: str, seconds: list[float]) -> dict:
    return {"name": name, "us": 1e6 * statistics.median(seconds), "range_us": (1e6 * min(seconds), 1e6 * max(seconds))}


def measure(kernels: int, threads: int, calls: int, rounds: int, clock: str = "cpu") -> dict:
    """The `api` program: rows per way of calling it, and the kernels alone."""
    import fusecc

    tick = CLOCKS[clock]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "chain.ir"
        path.write_text(program_text(kernels))
        prog = fusecc.compile(str(path), target="cpu", options={"threads": threads})
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    compiled = prog._compiled
    plan = compiled.prepare(prog.entry)
    rows = [_row("prog(x=...)", rounds_of(lambda: prog(x=x), calls, rounds, tick)),
            _row("CompiledProgram.run", rounds_of(lambda: compiled.run([x], prog.entry), calls, rounds, tick))]
    if hasattr(plan, "call"):
        from fusecc.runtime.cpu.buffers import address_of, output_arrays

        outputs, output_addresses = output_arrays(plan.layout.output_types)
        rows.append(_row("SchedulePlan.call (by address)", rounds_of(lambda: plan.call([address_of(x)], output_addresses), calls, rounds, tick)))
    alone, how = kernels_alone(compiled, prog.entry, [x])
    if how.startswith("one native"):
        kernel_seconds = rounds_of(alone, calls, rounds, tick)
    else:  # the profile times each launch with perf_counter
        kernel_seconds = [statistics.median(alone() for _ in range(calls)) for _ in range(rounds)]
    return {"program": f"{kernels} elementwise kernels on 8 floats, 1 input", "kernels": len(prog.kernels),
            "launch steps": sum(1 for s in plan.steps if s[0] == "launch"), "threads": threads, "rows": rows,
            "kernels_alone": _row(f"the kernels ({how})", kernel_seconds)}


def torch_model(layers: int):
    import torch

    modules = []
    for _ in range(layers):
        modules += [torch.nn.Linear(16, 16), torch.nn.ReLU()]
    return torch.nn.Sequential(*modules).eval()


def measure_torch(layers: int, threads: int, calls: int, rounds: int, clock: str = "cpu") -> dict:
    """The `torch` program: through torch.compile, the backend's runner alone, eager, the kernels alone."""
    import torch

    import fusecc.torch as backend

    tick = CLOCKS[clock]
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, x = torch_model(layers), torch.randn(4, 16)
    programs, arguments = [], []
    runner = backend._runner

    def recording_runner(program, *args, **kwargs):  # the backend's program, and what Dynamo passes its runner
        programs.append(program)
        run = runner(program, *args, **kwargs)
        recording_runner.run = run

        def recorded(*inputs):
            arguments.append(inputs)
            return run(*inputs)

        return recorded

    backend._runner = recording_runner
    try:
        with torch.no_grad():
            torch._dynamo.reset()
            compiled = torch.compile(model, backend="fusecc", options={"threads": threads})
            got = compiled(x)
    finally:
        backend._runner = runner
    (program,), run = programs, recording_runner.run
    args = arguments[0]
    with torch.no_grad():
        torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-5)
        rows = [_row("torch.compile(backend='fusecc') call", rounds_of(lambda: compiled(x), calls, rounds, tick)),
                _row("... the backend's runner alone", rounds_of(lambda: run(*args), calls, rounds, tick)),
                _row("torch eager (for scale)", rounds_of(lambda: model(x), calls, rounds, tick))]
        direct = getattr(backend, "_DirectCall", None)
        direct = direct.of(program, [torch.float32]) if direct is not None else None
        if direct is not None:  # the runner less its freeze guard (a data pointer and version per frozen weight)
            rows.insert(2, _row("... its call of the program by data pointers", rounds_of(lambda: direct([x]), calls, rounds, tick)))
    alone, how = kernels_alone(program._compiled, program.entry, [x.numpy()])
    if how.startswith("one native"):
        kernel_seconds = rounds_of(alone, calls, rounds, tick)
    else:
        kernel_seconds = [statistics.median(alone() for _ in range(calls)) for _ in range(rounds)]
    plan = program._compiled.prepare(program.entry)
    return {"program": f"torch: {layers} x (Linear 16->16, ReLU), B=4, frozen", "kernels": len(program.kernels),
            "launch steps": sum(1 for s in plan.steps if s[0] == "launch"), "threads": threads, "rows": rows,
            "kernels_alone": _row(f"the kernels ({how})", kernel_seconds)}


def table(results: list[dict], clock: str) -> str:
    lines = [f"{'thread CPU time' if clock == 'cpu' else 'wall time'} per call, median of rounds (range); "
             f"load average {os.getloadavg()[0]:.1f}", "", "| program | threads | what | us per call | overhead (minus the kernels), us |", "|---|---|---|---|---|"]
    for r in results:
        kernels = r["kernels_alone"]
        name = f"{r['program']} ({r['launch steps']} launches)"
        for row in r["rows"]:
            over = "" if row["name"].startswith("torch eager") else f"{row['us'] - kernels['us']:.1f}"
            lines.append(f"| {name} | {r['threads']} | {row['name']} | {row['us']:.1f} ({row['range_us'][0]:.1f}-{row['range_us'][1]:.1f}) | {over} |")
        lines.append(f"| {name} | {r['threads']} | {kernels['name']} | {kernels['us']:.1f} ({kernels['range_us'][0]:.1f}-{kernels['range_us'][1]:.1f}) | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", default="api,torch", help="api, torch or both")
    parser.add_argument("--kernels", type=int, default=30, help="launches of each program")
    parser.add_argument("--threads", default="1")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    args = parser.parse_args(argv)
    results = []
    for threads in (int(t) for t in args.threads.split(",")):
        if "api" in args.what:
            results.append(measure(args.kernels, threads, args.calls, args.rounds, args.clock))
        if "torch" in args.what:
            results.append(measure_torch(args.kernels, threads, args.calls, args.rounds, args.clock))
    print(table(results, args.clock), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
