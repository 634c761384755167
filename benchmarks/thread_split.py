"""How well a model's launches split over the CPU threads, measured so that
a busy shared machine matters little (issue 11, the 2-thread rows).

    python benchmarks/thread_split.py [--model minilm-l3|bert] [--shape 1x128] [--threads 2]
                                      [--calls 30] [--rounds 5] [--trees old=DIR,new=DIR]

Per call, four figures (medians over `--calls` calls):
- team wall: the call's wall time as fusecc runs it (what model_bench's
  2-thread rows compare: one native team call, runtime/cpu/team.py);
- wall: the same through the pool's Python hand-offs (FUSECC_CPU_TEAM=0,
  which the next two figures need; on a loaded machine it mostly measures
  when the helper threads got a core);
- caller CPU: the calling thread's CPU time (time.thread_time);
- critical CPU: the caller's CPU time less its own pieces of the launches
  split over threads, plus the busiest piece of each (thread CPU time of
  every piece, taken by wrapping the pool's `run_pieces`): the call's time
  on a machine with a free core per thread and no hand-off latency.

With `--trees LABEL=DIR,...` each round runs each tree (DIR put first on
PYTHONPATH, built as in model_bench.py's --trees) in a fresh child process,
in rotating order, each with its own compiled-program cache (warm after the
first round), and prints each tree's figures over the first tree's, per
round (median, range). Times are never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))


def measure(model: str, shape: str, threads: int, calls: int) -> dict:
    """The three figures of this process's fusecc, in seconds."""
    import fusecc
    import model_bench

    batch, seq = (int(v) for v in shape.split("x"))
    if model == "bert":
        path, name = model_bench.export_bert(model_bench.bert_module(2), Path(tempfile.mkdtemp()) / "bert.onnx"), "bert-base-L2"
    else:
        path, name = model_bench.minilm_path(), model
    feeds = model_bench.feeds_for(name, batch, seq)
    team = fusecc.compile(path, target="cpu", shapes=model_bench.fusecc_shapes(feeds), options={"threads": threads})
    for _ in range(3):
        team(**feeds)
    team_wall = []
    for _ in range(calls):
        start = time.perf_counter()
        team(**feeds)
        team_wall.append(time.perf_counter() - start)
    with mock.patch.dict(os.environ, {"FUSECC_CPU_TEAM": "0"}):  # the pool's launches, which `recording` wraps (the plan binds on the first call)
        program = fusecc.compile(path, target="cpu", shapes=model_bench.fusecc_shapes(feeds), options={"threads": threads})
        program(**feeds)
    pool = program._compiled.pool
    split = []  # per split launch: (the caller's piece, the busiest piece), thread CPU seconds
    run_pieces = pool.run_pieces

    def timed(function, args, begin, end):
        start = time.thread_time()
        function(*args, begin, end)
        return time.thread_time() - start

    def recording(function, args, pieces):
        if len(pieces) < 2:
            return run_pieces(function, args, pieces)
        found = []  # (thread, its piece's CPU seconds)
        run_pieces(lambda *a: found.append((threading.get_ident(), timed(function, a[:-2], *a[-2:]))), args, pieces)
        caller = threading.get_ident()
        split.append((sum(t for thread, t in found if thread == caller), max(t for _, t in found)))

    pool.run_pieces = recording
    for _ in range(3):
        program(**feeds)
    wall, caller, critical = [], [], []
    for _ in range(calls):
        split.clear()
        start, cpu = time.perf_counter(), time.thread_time()
        program(**feeds)
        wall.append(time.perf_counter() - start)
        caller.append(time.thread_time() - cpu)
        critical.append(caller[-1] - sum(mine for mine, _ in split) + sum(busiest for _, busiest in split))
    return {"team wall": statistics.median(team_wall), "wall": statistics.median(wall), "caller CPU": statistics.median(caller), "critical CPU": statistics.median(critical),
            "split launches": len(split)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm-l3", choices=["minilm-l3", "bert"])
    parser.add_argument("--shape", default="1x128", help="BxS")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trees", default=None, help="LABEL=DIR,...")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child or not args.trees:
        figures = measure(args.model, args.shape, args.threads, args.calls)
        print(json.dumps(figures) if args.child else "  ".join(f"{k} {v * 1e3:.2f} ms" if k != "split launches" else f"{k} {v}" for k, v in figures.items()))
        return 0
    trees = dict(entry.split("=", 1) for entry in args.trees.split(","))
    caches = {label: tempfile.mkdtemp(prefix=f"fusecc-cache-{label}-") for label in trees}
    results: dict[str, list[dict]] = {label: [] for label in trees}
    labels = list(trees)
    for r in range(args.rounds):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            env = dict(os.environ, PYTHONPATH=str(Path(trees[label]).resolve()), FUSECC_CACHE_DIR=caches[label])
            command = [sys.executable, __file__, "--child", "--model", args.model, "--shape", args.shape, "--threads", str(args.threads), "--calls", str(args.calls)]
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
            results[label].append(json.loads(out.strip().splitlines()[-1]))
    print(f"{args.model} {args.shape}, {args.threads} threads, {args.rounds} rounds x {args.calls} calls; load average {os.getloadavg()}")
    first = results[labels[0]]
    for label in labels:
        parts = []
        for key in ("team wall", "wall", "caller CPU", "critical CPU"):
            if any(key not in a for a in results[label] + first):  # a tree from before the figure
                continue
            per_round = sorted(a[key] / b[key] for a, b in zip(results[label], first))
            parts.append(f"{key} {statistics.median(a[key] for a in results[label]) * 1e3:.2f} ms "
                         f"({statistics.median(per_round):.3f}, {per_round[0]:.3f}-{per_round[-1]:.3f})")
        print(f"  {label}: " + "; ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
