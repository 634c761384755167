"""Compile time of whole models for the CPU, cold and warm (issue 11.5).

    python benchmarks/compile_time.py [--repeats 3] [--layers 6,12] [--json PATH] [--dynamic]
                                      [--trees before=DIR,after=DIR]

Each sample is a fresh Python process that imports fusecc (timed apart)
and then times `fusecc.compile(model, target="cpu", shapes=..., options=
{"threads": 1})` (wall clock, and the CPU time of the process and of the
LLVM children it forks: the goal's figure; the children's part apart), and
then, apart, the CPU time of writing the compiled program into the cache,
which a background thread finishes after compile returned. The onnx
package is NOT imported beforehand, so a cold compile includes importing it.
- cold: FUSECC_CACHE_DIR is a new empty folder (no compiled programs, no
  LLVM objects, no parser tables on disk; nothing in memory);
- warm: a second process on the folder the cold one filled: what a second
  `python app.py` sees (driver/program_cache.py: the compiled program is
  loaded, the model is neither imported nor compiled; the model file's
  digest is remembered from the cold process, by the file's inode, size and
  times, unless the file was written within 2 s before: the exported
  models are left to settle that long before the first sample).
Samples are interleaved (each round visits the models in a rotated order)
and reported as medians with their range. `--trees` compares installs of
fusecc (folders put first on PYTHONPATH, e.g. `pip install --target DIR .`
of two commits; byte-compiled first, as an install is), interleaved sample
by sample.

Models, at B=1, S=128 (`shapes` given, so every dim is static): the shipped
paraphrase-MiniLM-L3-v2 (with embeddings), and MiniLM-shaped encoders of 6
and 12 layers (hidden 384, 12 heads, FFN 1536, no embeddings) written in
torch by benchmarks/model_bench.py and exported to ONNX. `--dynamic` adds
MiniLM-L3 with its dims kept (`?` batch and sequence; no `shapes`): such a
program is compiled once for every size; the cache keeps it as its
loop-level module (since 3bfd9b8; before, only its LLVM objects).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPE = (1, 128)
RESULTS = Path(__file__).resolve().parent / "results"
FIGURES = ("fusecc.compile", "cpu", "LLVM children", "store after return")
# A file changed within 2 s before it is hashed has its digest hashed again
# by the next process (driver/program_cache.py RACY_SECONDS).
SETTLE_SECONDS = 2.5


def child(path: str, shaped: bool) -> dict:
    start = time.perf_counter()
    import fusecc

    imported = time.perf_counter()
    shapes = None
    if shaped:
        shapes = {"input_ids": SHAPE, "attention_mask": SHAPE} if "MiniLM" in path else {"x": (*SHAPE, 384), "mask": (SHAPE[0], 1, 1, SHAPE[1])}
    before, begin = os.times(), time.perf_counter()
    program = fusecc.compile(path, target="cpu", shapes=shapes, options={"threads": 1})
    wall, after = time.perf_counter() - begin, os.times()
    cpu = sum(getattr(after, f) - getattr(before, f) for f in ("user", "system", "children_user", "children_system"))
    children = sum(getattr(after, f) - getattr(before, f) for f in ("children_user", "children_system"))
    from fusecc.driver import program_cache

    getattr(program_cache, "wait_for_stores", lambda: None)()  # the image written on a background thread, after compile returned
    stored = os.times()
    store = sum(getattr(stored, f) - getattr(after, f) for f in ("user", "system"))
    return {
        "import fusecc": imported - start,
        "fusecc.compile": wall,
        "cpu": cpu,
        "LLVM children": children,
        "store after return": store,
        "from cache": getattr(program.stats, "from_cache", False),  # (absent before the program cache)
        "onnx imported": "onnx" in sys.modules,
        "load": os.getloadavg()[0],
        "phases": program.stats.phases,
        "kernels": len(program.kernels),
    }


def run_child(path: str, shaped: bool, cache_dir: str, tree: str | None = None) -> dict:
    env = dict(os.environ, FUSECC_CACHE_DIR=cache_dir, FUSECC_PROGRESS="0")
    if tree:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (tree, env.get("PYTHONPATH", "")) if p)
    env.pop("FUSECC_VERIFY_EACH", None)
    done = subprocess.run([sys.executable, __file__, "--child", path, "1" if shaped else "0"], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def models(layers: list[int], folder: Path, dynamic: bool) -> list[tuple[str, str, bool]]:
    """(name, ONNX path, shapes given)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import model_bench

    found = [("MiniLM-L3", model_bench.minilm_path(), True)]
    if dynamic:
        found.append(("MiniLM-L3, dims kept", model_bench.minilm_path(), False))
    for n in layers:
        module = model_bench.bert_module(n, hidden=384, heads=12, ffn=1536)
        found.append((f"encoder-384 L{n}", model_bench.export_bert(module, folder / f"encoder384_L{n}.onnx", hidden=384), True))
    return found


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "SHAPED"), help=argparse.SUPPRESS)
    parser.add_argument("--layers", default="6,12")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dynamic", action="store_true", help="also MiniLM-L3 with its symbolic dims kept")
    parser.add_argument("--json", type=Path, default=RESULTS / "compile_time.json")
    parser.add_argument("--trees", default="", help="LABEL=DIR,...: installs of fusecc to compare (DIR first on PYTHONPATH)")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1] == "1")))
        return 0
    trees = [tuple(t.split("=", 1)) for t in args.trees.split(",") if t] or [("", None)]
    for _, tree in trees:  # byte-compiled like an install: with PYTHONDONTWRITEBYTECODE every sample would compile the sources again
        if tree:
            compileall.compile_dir(tree, quiet=1)
    samples: dict[tuple[str, str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="fusecc-compile-time-") as tmp:
        found = models([int(n) for n in args.layers.split(",") if n], Path(tmp), args.dynamic)
        time.sleep(SETTLE_SECONDS)
        for r in range(args.repeats):
            for name, path, shaped in found[r % len(found):] + found[: r % len(found)]:  # rotating order
                for label, tree in trees[r % len(trees):] + trees[: r % len(trees)]:
                    cache_dir = str(Path(tmp) / f"cache-{r}-{label}-{name.replace(' ', '_').replace(',', '')}")
                    for state in ("cold", "warm"):
                        sample = run_child(path, shaped, cache_dir, tree)
                        samples.setdefault((label, name, state), []).append(sample)
                        print(f"round {r} {label} {name} {state}: {sample['fusecc.compile']:.3f} s wall, {sample['cpu']:.3f} s CPU, from cache {sample['from cache']}", flush=True)
    rows = []
    print(f"\n| tree | model | state | fusecc.compile, wall (s) | CPU (s) | of which LLVM children (s) | cache store after return, CPU (s) | from cache | onnx imported | load (1 min) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (label, name, state), runs in sorted(samples.items(), key=lambda item: (item[0][1], item[0][2], item[0][0])):
        row = {"tree": label, "model": name, "state": state, "samples": runs}
        row.update({figure: [run.get(figure, float("nan")) for run in runs] for figure in FIGURES})
        rows.append(row)
        hits = sum(run["from cache"] for run in runs)
        onnx = sum(run["onnx imported"] for run in runs)
        loads = [run.get("load", float("nan")) for run in runs]
        print(f"| {label} | {name} | {state} | {summary(row['fusecc.compile'])} | {summary(row['cpu'])} | {summary(row['LLVM children'])} | {summary(row['store after return'])} | {hits}/{len(runs)} | {onnx}/{len(runs)} | {min(loads):.1f}–{max(loads):.1f} |")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"shape": SHAPE, "repeats": args.repeats, "load average": os.getloadavg(), "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
