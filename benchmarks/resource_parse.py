"""Parse + verify time of a model whose weights are `dense_resource`s.

    python benchmarks/resource_parse.py [--layers 4] [--repeat 5] [--compare-dense]

Builds an N-layer BERT-base encoder (benchmarks/encoder_layers.py; 4
layers hold 113 MB of f32 weights) with its weights in a safetensors file
beside it, then times parse_module + verify in this process (the parser's
tables built once first). With --compare-dense, the same model with the
weights written as dense hex text in the .ir (slow: tens of seconds).

Measured 2026-12-01 on this 2-core machine (shared, loaded):

    4 layers, 113 MB of weights, 22 kB of text: parse + verify median 10 ms (38 ms under load 14)
    1 layer, 28 MB: 3 ms; the same weights as dense hex text (57 MB of .ir): 100 s
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from encoder_layers import write_encoder  # noqa: E402

from fusecc.compiler.parser import parse_module  # noqa: E402
from fusecc.compiler.verifier import verify  # noqa: E402


def parse_and_verify(path: Path) -> float:
    text = path.read_text()
    start = time.perf_counter()
    module = parse_module(text, str(path))
    verify(module)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--compare-dense", action="store_true", help="also time the weights written as dense text")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "encoder.ir"
        weights = write_encoder(args.layers, path, resources=True)
        megabytes = sum(w.nbytes for w in weights.values()) / 1e6
        parse_module("func.func @warm() {\n  func.return\n}\n")  # the parser's tables, once per process
        times = [parse_and_verify(path) for _ in range(args.repeat)]
        print(f"{args.layers}-layer encoder, {megabytes:.0f} MB of weights in {path.with_suffix('.safetensors').name}, {path.stat().st_size / 1e3:.0f} kB of text")
        print(f"parse + verify: median {statistics.median(times) * 1e3:.0f} ms, min {min(times) * 1e3:.0f} ms over {args.repeat} runs")
        if args.compare_dense:
            from fusecc.compiler import attributes as A
            from fusecc.compiler.resources import save_module

            module = parse_module(path.read_text(), str(path))

            for op in module.walk():
                value = op.attributes.get("value")
                if isinstance(value, A.DenseResourceElementsAttr):
                    op.attributes["value"] = A.DenseElementsAttr(np.asarray(value.array), value.type)
            del module.attributes["fusecc.resources"]
            dense = Path(folder) / "dense.ir"
            save_module(module, dense, externalize_bytes=None)
            print(f"same weights as dense text ({dense.stat().st_size / 1e6:.0f} MB): parse + verify {parse_and_verify(dense):.1f} s")


if __name__ == "__main__":
    main()
