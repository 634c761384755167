"""Compile time of whole models for the CPU, cold and warm (issue 11.5).

    python benchmarks/compile_time.py [--repeats 2] [--layers 3,6,12] [--json PATH]

Each measurement is a fresh Python process that first imports fusecc (and
the onnx package; both timed apart), then compiles the model at B=1, S=128:
- cold: FUSECC_CACHE_DIR is a new empty folder (no LLVM objects, no parser
  tables on disk; nothing in memory);
- warm: a new process on the folder a cold run filled (the disk cache warm,
  the in-memory caches empty): what a second `python app.py` sees.
`fusecc.compile` gives the end-to-end figure the goal (cold < 1.0 s, warm
< 0.2 s) is about; a second child runs the same steps one by one to split
it: ONNX import (read + translate + verify), passes (the loop-level
pipeline), LLVM IR emission, LLVM (optimise + codegen, or the object read
from the disk cache), bind (MCJIT load, ctypes) and load (constants placed,
weights packed).

Models: paraphrase-MiniLM-L3-v2 (the shipped ONNX file), and MiniLM-shaped
encoders of 3, 6 and 12 layers (hidden 384, 12 heads, FFN 1536, no
embeddings) written in torch by benchmarks/model_bench.py and exported to
ONNX: the shipped file has 3 layers only, and repeating its layers inside
the ONNX graph would mean renaming ~100 nodes per layer by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPE = (1, 128)
RESULTS = Path(__file__).resolve().parent / "results"


def child(path: str, mode: str) -> dict:
    start = time.perf_counter()
    import fusecc

    imported = time.perf_counter()
    import onnx  # noqa: F401

    onnx_done = time.perf_counter()
    shapes = {"input_ids": SHAPE, "attention_mask": SHAPE} if "MiniLM" in path else {"x": (*SHAPE, 384), "mask": (SHAPE[0], 1, 1, SHAPE[1])}
    out = {"import fusecc": imported - start, "import onnx": onnx_done - imported}
    if mode == "api":
        begin = time.perf_counter()
        program = fusecc.compile(path, target="cpu", shapes=shapes, options={"threads": 1})
        out["fusecc.compile"] = time.perf_counter() - begin
        out.update({f"compile: {name}": seconds for name, seconds in program.stats.phases.items()})  # Program's own phases
        out["kernels"] = len(program.kernels)
        return out

    from fusecc.compiler.diagnostics import DiagnosticEngine
    from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
    from fusecc.driver.pipelines import pipeline_for_level
    from fusecc.frontends.onnx import import_onnx
    from fusecc.runtime.cpu import executor, jit
    from fusecc.runtime.cpu.executor import CompiledProgram, WorkerPool

    spent: dict[str, float] = {}

    def timed(name, function):
        def wrapper(*args, **kwargs):
            begin = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - begin
        return wrapper

    executor.emit_llvm = timed("emit LLVM IR", executor.emit_llvm)
    jit.compile_ir = timed("LLVM", jit.compile_ir)
    begin = time.perf_counter()
    module = import_onnx(path, shapes).module
    out["ONNX import"] = time.perf_counter() - begin
    begin = time.perf_counter()
    run_pipeline(parse_pipeline(pipeline_for_level("loop", target="cpu")), module, PassContext(diagnostics=DiagnosticEngine(), target="cpu"))
    out["passes"] = time.perf_counter() - begin
    begin = time.perf_counter()
    program = CompiledProgram(module, pool=WorkerPool(1))
    constructed = time.perf_counter() - begin
    out.update(spent)
    out["bind"] = constructed - sum(spent.values())
    begin = time.perf_counter()
    program.prepare("main")
    out["load"] = time.perf_counter() - begin
    out["total"] = out["ONNX import"] + out["passes"] + constructed + out["load"]
    return out


def run_child(path: str, mode: str, cache_dir: str) -> dict:
    env = dict(os.environ, FUSECC_CACHE_DIR=cache_dir, FUSECC_PROGRESS="0")
    done = subprocess.run([sys.executable, __file__, "--child", path, mode], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def models(layers: list[int], folder: Path) -> dict[str, str]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import model_bench

    found = {"MiniLM-L3 (ONNX file)": model_bench.minilm_path()}
    for n in layers:
        module = model_bench.bert_module(n, hidden=384, heads=12, ffn=1536)
        found[f"encoder-384 L{n}"] = model_bench.export_bert(module, folder / f"encoder384_L{n}.onnx", hidden=384)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    parser.add_argument("--layers", default="3,6,12")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path, default=RESULTS / "compile_time.json")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="fusecc-compile-time-") as tmp:
        for name, path in models([int(n) for n in args.layers.split(",") if n], Path(tmp)).items():
            for mode in ("api", "phases"):
                runs = {"cold": [], "warm": []}
                for r in range(args.repeats):
                    cache_dir = str(Path(tmp) / f"cache-{len(rows)}-{mode}-{r}")
                    runs["cold"].append(run_child(path, mode, cache_dir))
                    runs["warm"].append(run_child(path, mode, cache_dir))
                for state, results in runs.items():
                    keys = [k for k in results[0] if isinstance(results[0][k], float)]
                    row = {"model": name, "mode": mode, "state": state,
                           "seconds": {k: [r[k] for r in results] for k in keys}}
                    rows.append(row)
                    figures = ", ".join(f"{k} {min(v):.3f}-{max(v):.3f}" for k, v in row["seconds"].items())
                    print(f"{name} {mode} {state}: {figures}", flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"shape": SHAPE, "repeats": args.repeats, "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
