"""Two checkouts of fusecc side by side: parse, compile and CPU kernel speed.

    git worktree add /tmp/before 84b7ea5
    python -m venv /tmp/before/.venv && /tmp/before/.venv/bin/pip install -q -e /tmp/before
    python benchmarks/compare_revisions.py --before /tmp/before/.venv/bin/python [--after .venv/bin/python] [--rounds 5]

Each measurement is a fresh process of one checkout's Python running this
file with --probe, so every parse and compile starts from empty memo tables
(interned types, parsed type spellings, lowering caches) and, for compiles,
an empty disk cache. The rounds alternate the checkouts (before, after, then
after, before, ...), so a slow phase of a shared machine falls on both.

  parse     the 20k-op program of parse_scaling.py (--parse-ops): parse alone, and parse +
            verify + print (CPU seconds; the grammar tables are built first,
            outside the timing)
  compile   examples/encoder_block.ir for the CPU: parse + verify, the pass
            pipeline to loops, the LLVM backend and machine code (CPU seconds
            of a cold process and cache, a forked LLVM child included; and
            the total's wall time)
  kernels   cpu_bench.py's memory-bound patterns and MLP through the whole
            pipeline: the median wall time of --reps runs on --threads
            threads, and their CPU time (less disturbed by other processes
            on a shared machine), outputs checked against numpy first

The table gives medians with [min-max] over rounds and the ratio after /
before of the medians (below 1: after is faster). Timings are figures, never
asserted: on a shared machine compare the ranges, not only the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
KERNEL_PATTERNS = ("layernorm_gelu", "softmax", "bias_gelu_residual", "mlp")
TRIVIAL = "func.func @f() {\n  func.return\n}\n"


def cpu_seconds() -> float:
    """CPU time of this process and its waited-for children (the CPU
    backend may run LLVM in a forked child)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# --------------------------------------------------------------------------- the probe (runs in each checkout)


def _pipeline_for_level():
    """The level -> pipeline text function of either layout (driver/ after the
    layout move, passes/ before it)."""
    try:
        from fusecc.driver.pipelines import pipeline_for_level
    except ImportError:
        from fusecc.passes.pipelines import pipeline_for_level
    return pipeline_for_level


def probe_parse(path: str) -> dict:
    from fusecc.compiler.parser import parse_module
    from fusecc.compiler.printer import print_op
    from fusecc.compiler.verifier import verify

    text = pathlib.Path(path).read_text()
    parse_module(TRIVIAL)  # the grammar tables and the op registry, not the program's memo tables
    start = cpu_seconds()
    module = parse_module(text, "bench.ir")
    parsed = cpu_seconds()
    verify(module)
    print_op(module)
    done = cpu_seconds()
    return {"parse": parsed - start, "parse+verify+print": done - start}


def probe_compile(path: str) -> dict:
    from fusecc.compiler import parse_module, verify
    from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
    from fusecc.runtime.cpu import compile_program

    text = pathlib.Path(path).read_text()
    parse_module(TRIVIAL)
    wall, start = time.perf_counter(), cpu_seconds()
    module = parse_module(text, pathlib.Path(path).name)
    verify(module)
    parsed = cpu_seconds()
    run_pipeline(parse_pipeline(_pipeline_for_level()("loop", target="cpu")), module, PassContext(target="cpu"))
    lowered = cpu_seconds()
    compile_program(module)
    done, wall = cpu_seconds(), time.perf_counter() - wall
    return {"total": done - start, "total, wall": wall, "parse+verify": parsed - start, "passes": lowered - parsed, "LLVM": done - lowered}


def probe_kernels(folder: str, reps: int, threads: int) -> dict:
    import numpy as np

    from fusecc.compiler import parse_module, verify
    from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
    from fusecc.runtime.cpu import compile_program, executor

    executor._default_pool = executor.WorkerPool(threads)
    out = {}
    for name in KERNEL_PATTERNS:
        module = parse_module((pathlib.Path(folder) / f"{name}.ir").read_text(), f"{name}.ir")
        verify(module)
        run_pipeline(parse_pipeline(_pipeline_for_level()("loop", target="cpu")), module, PassContext(target="cpu"))
        program = compile_program(module)
        with np.load(pathlib.Path(folder) / f"{name}.npz") as data:
            inputs = [data[f"input{i}"] for i in range(len(data.files) - 2)]
            want, rtol = data["expected"].astype(np.float64), float(data["rtol"])
        got = np.asarray(program.run(inputs)[0], dtype=np.float64).reshape(want.shape)
        error = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        if not error <= rtol:
            raise AssertionError(f"{name}: differs from numpy by {error:.2e} of the output's scale")
        program.run(inputs)
        wall, cpu = [], []
        for _ in range(reps):
            start, start_cpu = time.perf_counter(), time.process_time()
            program.run(inputs)
            wall.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        out[name] = statistics.median(wall)
        out[f"{name}, cpu"] = statistics.median(cpu)
    return out


# --------------------------------------------------------------------------- the driver (runs in this checkout)


def write_inputs(folder: pathlib.Path, what: list[str], parse_ops: int) -> None:
    """The programs and inputs the probes read: parse_scaling's program of
    `parse_ops` ops, the encoder block, cpu_bench's patterns with numpy's
    results."""
    import numpy as np

    sys.path.insert(0, str(HERE))
    from parse_scaling import program

    (folder / "parse.ir").write_text(program(parse_ops))
    (folder / "encoder_block.ir").write_text((HERE.parent / "examples" / "encoder_block.ir").read_text())
    if "kernels" not in what:
        return
    from cpu_bench import patterns

    table = patterns(np.random.default_rng(0))
    for name in KERNEL_PATTERNS:
        pattern = table[name]
        (folder / f"{name}.ir").write_text(pattern.tensor_program)
        arrays = {f"input{i}": a for i, a in enumerate(pattern.inputs)}
        np.savez(folder / f"{name}.npz", **arrays, expected=np.asarray(pattern.numpy()), rtol=np.float64(pattern.rtol))


def run_probe(python: str, args: list[str], cache_dir: str) -> dict:
    env = dict(os.environ, FUSECC_CACHE_DIR=cache_dir, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)  # each Python imports its own checkout
    proc = subprocess.run([python, str(HERE / "compare_revisions.py"), "--probe", *args], capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    if proc.returncode:
        sys.exit(f"{python} --probe {' '.join(args)} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def where(python: str) -> str:
    """Which checkout a Python imports fusecc from."""
    proc = subprocess.run([python, "-c", "import fusecc.compiler, os; print(os.path.dirname(os.path.dirname(fusecc.compiler.__file__)))"], capture_output=True, text=True, cwd=tempfile.gettempdir())
    return proc.stdout.strip() or f"(no fusecc: {proc.stderr.strip()[-200:]})"


def summary(values: list[float], scale: float) -> str:
    return f"{statistics.median(values) * scale:8.3f} [{min(values) * scale:.3f}-{max(values) * scale:.3f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", help="the Python of the older checkout")
    parser.add_argument("--after", default=sys.executable, help="the Python of the newer checkout (default: this one)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=15, help="kernel runs per pattern and round")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of the kernels (1: less disturbed by other processes)")
    parser.add_argument("--what", default="parse,compile,kernels")
    parser.add_argument("--parse-ops", type=int, default=20000, help="the size of the parsed program")
    parser.add_argument("--probe", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        kind, *rest = args.probe
        result = {"parse": lambda: probe_parse(rest[0]), "compile": lambda: probe_compile(rest[0]), "kernels": lambda: probe_kernels(rest[0], int(rest[1]), int(rest[2]))}[kind]()
        print(json.dumps(result))
        return 0
    if not args.before:
        parser.error("--before is required")
    checkouts = {"before": args.before, "after": args.after}
    what = args.what.split(",")
    samples: dict[tuple[str, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="fusecc-revisions-") as tmp:
        folder = pathlib.Path(tmp)
        write_inputs(folder, what, args.parse_ops)
        warm = {name: str(folder / f"cache-{name}") for name in checkouts}
        for name, python in checkouts.items():
            print(f"# {name}: {python} -> {where(python)}", flush=True)
        for round_ in range(args.rounds):
            order = list(checkouts) if round_ % 2 == 0 else list(reversed(checkouts))
            for name in order:
                python = checkouts[name]
                found = {}
                if "parse" in what:
                    found.update(run_probe(python, ["parse", str(folder / "parse.ir")], tempfile.mkdtemp(dir=tmp)))
                if "compile" in what:
                    found.update({f"compile {k}": v for k, v in run_probe(python, ["compile", str(folder / "encoder_block.ir")], tempfile.mkdtemp(dir=tmp)).items()})
                if "kernels" in what:
                    found.update({f"run {k}": v for k, v in run_probe(python, ["kernels", str(folder), str(args.reps), str(args.threads)], warm[name]).items()})
                for key, value in found.items():
                    samples.setdefault((key, name), []).append(value)
            print(f"# round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    keys = list(dict.fromkeys(key for key, _ in samples))
    print(f"\n{args.rounds} rounds of alternating fresh processes; median [min-max]; parse ({args.parse_ops} ops) and compile in CPU s, kernels in ms (wall, and CPU of all threads) on {args.threads} thread(s)")
    print(f"| measurement | before | after | after/before |\n|---|---|---|---|")
    for key in keys:
        before, after = samples[(key, "before")], samples[(key, "after")]
        scale = 1e3 if key.startswith("run ") else 1.0
        print(f"| {key} | {summary(before, scale)} | {summary(after, scale)} | {statistics.median(after) / statistics.median(before):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
