"""fusecc's CPU matmul kernels against numpy/OpenBLAS, per shape (issue 11.3).

    python benchmarks/matmul_bench.py [--quick] [--threads 1,2] [--reps 9] [--json PATH]
                                      [--shapes 128x768x3072,...] [--flush] [--trees old=DIR,new=DIR]

Shapes: the projections of MiniLM (hidden 384, FFN 1536) and of BERT-base
(hidden 768, FFN 3072) at M = B*S = 128 and 1024 tokens (K and N from the
model: merged Q/K/V, attention output, FFN up, FFN down), and squares 512,
1024, 2048. Each shape twice: a plain matmul, and with the epilogue
`gelu(x @ w + b)` that fusecc applies inside the matmul kernel; numpy does
it as OpenBLAS's sgemm then elementwise passes (bias add, GELU-erf through
scipy.special.erf when installed, else the tanh form), each a pass over memory.

fusecc's time is the sum of the program's kernel launches per call (the
executor's profile); on 1 thread also the calling thread's CPU time per call
(time.thread_time; numpy's OpenBLAS runs there too with 1 thread), which a
busy shared machine inflates less. The weights and the bias are constants of the program
(`dense_resource`s in a safetensors file beside it), as a model's are, so
B's pack kernel runs once at load (runtime/cpu/load_time.py) and is not in
the per-call time; x is the argument. numpy's
time is the wall clock of the expression. numpy runs in a fresh process per
thread count with OPENBLAS_NUM_THREADS / OMP_NUM_THREADS set (threadpoolctl
is not installed here); so the two are not interleaved: on a shared machine
read the medians with their ranges. Times are never asserted.

`--flush` writes over a 64 MB buffer before every timed call (fusecc's and
numpy's), so that weights and activations come from memory, as in a model
whose weights do not stay in cache between its layers. `--trees` compares
installs of fusecc: each LABEL=DIR is a folder put first on PYTHONPATH
(`git archive REV | tar -x -C SRC && pip install --no-deps --target DIR SRC`);
per shape, each tree runs in a fresh child process, in rotating order, and
the table adds each tree's CPU time over the first tree's. `--shapes` replaces the shape list (M×K×N, named by size).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
MODEL_KN = {"MiniLM qkv": (384, 1152), "MiniLM out": (384, 384), "MiniLM ffn up": (384, 1536), "MiniLM ffn down": (1536, 384),
            "BERT qkv": (768, 2304), "BERT out": (768, 768), "BERT ffn up": (768, 3072), "BERT ffn down": (3072, 768)}


EVICT = None  # with --flush: a 64 MB buffer written over before each timed call


def evict_caches() -> None:
    if EVICT is not None:
        EVICT[::16] += 1  # one write per 64-byte line


def shapes(quick: bool, chosen: str = "") -> list[tuple[str, int, int, int]]:
    if chosen:
        return [(f"{m}×{k}×{n}", m, k, n) for m, k, n in (tuple(int(v) for v in s.split("x")) for s in chosen.split(","))]
    if quick:
        return [("MiniLM ffn up", 128, 384, 1536), ("square 512", 512, 512, 512)]
    rows = [(name, m, k, n) for m in (128, 1024) for name, (k, n) in MODEL_KN.items()]
    return rows + [(f"square {s}", s, s, s) for s in (512, 1024, 2048)]


def program(m: int, k: int, n: int, epilogue: bool) -> str:
    """x @ w (+ b, GELU) with w and b constants read from `w.safetensors`."""
    t = "tensor<{}xf32>".format
    x, w, y = t(f"{m}x{k}"), t(f"{k}x{n}"), t(f"{m}x{n}")
    head = (f'module attributes {{fusecc.resources = "w.safetensors"}} {{\n  func.func @main(%x: {x}) -> {y} {{\n'
            f"    %w = tensor.constant {{value = dense_resource<w> : {w}}} : () -> {w}\n")
    if not epilogue:
        return head + f"    %y = tensor.matmul %x, %w : ({x}, {w}) -> {y}\n    func.return %y : {y}\n  }}\n}}\n"
    return (head + f"    %b = tensor.constant {{value = dense_resource<b> : {t(n)}}} : () -> {t(n)}\n"
            f"    %m = tensor.matmul %x, %w : ({x}, {w}) -> {y}\n"
            f"    %bb = tensor.broadcast_to %b : ({t(n)}) -> {y}\n    %a = tensor.add %m, %bb : ({y}, {y}) -> {y}\n"
            f"    %y = tensor.gelu %a : ({y}) -> {y}\n    func.return %y : {y}\n  }}\n}}\n")


def fusecc_seconds(m, k, n, epilogue, threads, reps, cpu: list | None = None) -> tuple[list[float], list[str]]:
    """Per-call kernel seconds (the profile's launches) and the kernel names;
    with `cpu` (1 thread: the kernels run on the calling thread), that
    thread's CPU seconds per unprofiled call are appended to it too."""
    import fusecc
    import safetensors.numpy

    rng = np.random.default_rng(0)
    weights = {"w": (0.1 * rng.standard_normal((k, n))).astype(np.float32), "b": (0.1 * rng.standard_normal(n)).astype(np.float32)}
    with tempfile.TemporaryDirectory() as tmp:
        safetensors.numpy.save_file(weights, str(Path(tmp) / "w.safetensors"))
        path = Path(tmp) / "mm.ir"
        path.write_text(program(m, k, n, epilogue))
        prog = fusecc.compile(str(path), target="cpu", options={"threads": threads})
    inputs = [(0.1 * rng.standard_normal(t.shape)).astype(np.float32) for t in prog.inputs.values()]
    compiled = prog._compiled
    compiled.run(inputs, prog.entry)  # warm-up
    times, names = [], []
    for _ in range(reps):
        profile: list = []
        evict_caches()
        compiled.run(inputs, prog.entry, profile=profile)
        names = [name for name, _ in profile]
        times.append(sum(s for _, s in profile))
        if cpu is not None:
            evict_caches()
            start = time.thread_time()
            compiled.run(inputs, prog.entry)
            cpu.append(time.thread_time() - start)
    return times, names


def numpy_child(rows, reps) -> dict:
    try:
        from scipy.special import erf
        gelu_form = "erf"

        def gelu(a):
            return 0.5 * a * (1.0 + erf(a * np.float32(0.7071067811865476)))
    except ImportError:
        gelu_form = "tanh"

        def gelu(a):
            return 0.5 * a * (1.0 + np.tanh(np.float32(0.7978845608) * (a + np.float32(0.044715) * a * a * a)))
    rng = np.random.default_rng(0)
    out = {"gelu": gelu_form, "times": {}, "cpu": {}}
    for name, m, k, n in rows:
        x = (0.1 * rng.standard_normal((m, k))).astype(np.float32)
        w = (0.1 * rng.standard_normal((k, n))).astype(np.float32)
        b = (0.1 * rng.standard_normal(n)).astype(np.float32)
        for epilogue in (False, True):
            def run():
                y = x @ w
                return gelu(y + b) if epilogue else y
            run()
            times, cpu = [], []
            for _ in range(reps):
                evict_caches()
                start, cpu_start = time.perf_counter(), time.thread_time()
                run()
                times.append(time.perf_counter() - start)
                cpu.append(time.thread_time() - cpu_start)
            out["times"][f"{name}|{m}|{epilogue}"] = times
            out["cpu"][f"{name}|{m}|{epilogue}"] = cpu
    return out


def numpy_seconds(rows, threads: int, reps: int, flush: bool) -> dict:
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    command = [sys.executable, __file__, "--numpy-child", json.dumps([rows, reps])] + (["--flush"] if flush else [])
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def fusecc_child_seconds(tree: str, m, k, n, epilogue, threads, reps, flush: bool) -> tuple[list[float], list[str], list[float] | None]:
    """fusecc_seconds in a fresh process with `tree` first on PYTHONPATH."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [tree, os.environ.get("PYTHONPATH")])))
    command = [sys.executable, __file__, "--fusecc-child", json.dumps([m, k, n, epilogue, threads, reps])] + (["--flush"] if flush else [])
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    out = json.loads(done.stdout.splitlines()[-1])
    return out["times"], out["kernels"], out["cpu"]


def fusecc_child(m, k, n, epilogue, threads, reps) -> dict:
    cpu: list | None = [] if threads == 1 else None
    times, kernels = fusecc_seconds(m, k, n, epilogue, threads, reps, cpu)
    return {"times": times, "kernels": kernels, "cpu": cpu}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--json", type=Path, default=RESULTS / "matmul_bench.json")
    parser.add_argument("--shapes", default="", help="M×K×N list, e.g. 128x768x3072,2048x2048x2048 (instead of the model's shapes)")
    parser.add_argument("--flush", action="store_true", help="evict the caches before every timed call (weights from memory, as in a model)")
    parser.add_argument("--trees", default="", help="LABEL=DIR,...: installs of fusecc to compare, each in child processes (DIR first on PYTHONPATH)")
    parser.add_argument("--numpy-child", help=argparse.SUPPRESS)
    parser.add_argument("--fusecc-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.flush:
        global EVICT
        EVICT = np.zeros(64 * 1024 * 1024 // 4, np.float32)
    if args.numpy_child:
        rows, reps = json.loads(args.numpy_child)
        print(json.dumps(numpy_child(rows, reps)))
        return 0
    if args.fusecc_child:
        print(json.dumps(fusecc_child(*json.loads(args.fusecc_child))))
        return 0
    rows = shapes(args.quick, args.shapes)
    trees = [tuple(t.split("=", 1)) for t in args.trees.split(",") if t] or [("", None)]
    results = []
    print(("| tree " if args.trees else "") + "| shape | M×K×N | epilogue | threads | fusecc GFLOP/s (range) | numpy GFLOP/s (range) | numpy / fusecc time "
          "| CPU time: fusecc GFLOP/s | CPU time: numpy GFLOP/s | CPU time: numpy / fusecc | fusecc kernels |" + (f" CPU time ÷ {trees[0][0]}'s |" if args.trees else ""))
    print("|---" * (11 + 2 * bool(args.trees)) + "|")
    for threads in (int(t) for t in args.threads.split(",")):
        reference = numpy_seconds(rows, threads, args.reps, args.flush)
        for number, (name, m, k, n) in enumerate(rows):
            for epilogue in (False, True):
                measured = {}
                for label, tree in trees[number % len(trees):] + trees[: number % len(trees)]:  # rotating order
                    if tree is None:
                        ours_cpu: list | None = [] if threads == 1 else None
                        ours, kernels = fusecc_seconds(m, k, n, epilogue, threads, args.reps, ours_cpu)
                    else:
                        ours, kernels, ours_cpu = fusecc_child_seconds(tree, m, k, n, epilogue, threads, args.reps, args.flush)
                    measured[label] = (ours, kernels, ours_cpu)
                for label, _ in trees:
                    ours, kernels, ours_cpu = measured[label]
                    row = report_row(name, m, k, n, epilogue, threads, ours, kernels, ours_cpu, reference, label if args.trees else None,
                                     measured[trees[0][0]][2] if args.trees else None)
                    results.append(row)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"reps": args.reps, "flush": args.flush, "trees": dict(trees) if args.trees else None, "rows": results}, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


def report_row(name, m, k, n, epilogue, threads, ours, kernels, ours_cpu, reference, label, first_cpu) -> dict:
    """Print one table row (with `label`: a tree's, and its CPU time over the
    first tree's `first_cpu`); return it for the JSON."""
    theirs = reference["times"][f"{name}|{m}|{epilogue}"]
    theirs_cpu = reference["cpu"][f"{name}|{m}|{epilogue}"]
    flops = 2.0 * m * k * n
    rate = lambda ts: (flops / statistics.median(ts) / 1e9, flops / max(ts) / 1e9, flops / min(ts) / 1e9)  # noqa: E731
    row = {"shape": name, "m": m, "k": k, "n": n, "epilogue": epilogue, "threads": threads, "fusecc_s": ours, "numpy_s": theirs,
           "kernels": kernels, "numpy_gelu": reference["gelu"], "speedup": statistics.median(theirs) / statistics.median(ours)}
    cpu_text, tree_text = "— | — | —", ""
    if ours_cpu:  # 1 thread: both computed on the calling thread
        row.update(fusecc_cpu_s=ours_cpu, numpy_cpu_s=theirs_cpu, cpu_speedup=statistics.median(theirs_cpu) / statistics.median(ours_cpu))
        fc, oc = rate(ours_cpu), rate(theirs_cpu)
        cpu_text = f"{fc[0]:.0f} ({fc[1]:.0f}–{fc[2]:.0f}) | {oc[0]:.0f} ({oc[1]:.0f}–{oc[2]:.0f}) | {row['cpu_speedup']:.2f}"
    if label is not None:
        row["tree"] = label
        if ours_cpu and first_cpu:
            row["cpu_over_first_tree"] = statistics.median(ours_cpu) / statistics.median(first_cpu)
        tree_text = f" {row['cpu_over_first_tree']:.2f} |" if "cpu_over_first_tree" in row else " — |"
    f, o = rate(ours), rate(theirs)
    print(("" if label is None else f"| {label} ") + f"| {name} | {m}×{k}×{n} | {'bias+GELU' if epilogue else '—'} | {threads} | "
          f"{f[0]:.0f} ({f[1]:.0f}–{f[2]:.0f}) | {o[0]:.0f} ({o[1]:.0f}–{o[2]:.0f}) | {row['speedup']:.2f} | {cpu_text} | {len(kernels)} |" + tree_text, flush=True)
    return row


if __name__ == "__main__":
    sys.exit(main())
