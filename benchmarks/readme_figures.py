"""The README's fusion figures, regenerated: each lies between markers

    <!-- figures: NAME (python benchmarks/readme_figures.py) -->
    ...
    <!-- /figures: NAME -->

and this script rewrites what lies between them.

    python benchmarks/readme_figures.py [--repeat 20]   # rewrite README.md (measures: about a minute)
    python benchmarks/readme_figures.py --check         # exit 1 if a deterministic figure is stale

Blocks: `report-encoder-ops` (the H200 cost-model report of
examples/encoder_block_ops.ir, deterministic), `measured-encoder` and
`measured-llama` (kernel launches, bytes, intermediates and the planned arena
of examples/encoder_block.ir and llama_block.ir from the H200 model and from
the program compiled for this CPU, and the times of both, measured with
`fusecc report --measure`). --check compares everything but the time rows
(timings move from run to run; tests/tools/test_readme_figures.py runs it).
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCK = re.compile(r"(<!-- figures: (?P<name>[\w-]+) \(python benchmarks/readme_figures.py\) -->\n)(?P<body>.*?)(<!-- /figures: (?P=name) -->)", re.S)
TIME_ROW = "| time |"


def _load(example: str):
    from fusecc.compiler.diagnostics import DiagnosticEngine
    from fusecc.compiler.parser import parse_module
    from fusecc.compiler.verifier import verify

    path = ROOT / "examples" / example
    module = parse_module(path.read_text(), f"examples/{example}")
    verify(module)
    return module, DiagnosticEngine()


def report_block() -> str:
    from fusecc.driver import reporting

    module, engine = _load("encoder_block_ops.ir")
    return "```\n" + reporting.report(module, "h200", engine=engine).rstrip("\n") + "\n```\n"


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def _time(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def measured_block(example: str, repeat: int) -> str:
    from fusecc.driver import measure, reporting

    module, engine = _load(example)
    model = reporting.report_data(module, "h200", engine)
    module, engine = _load(example)
    entry = (module.lookup("main") or module.functions()[0]).sym_name
    data = measure.measure(module, entry, "cpu", repeat, 0, None, engine)
    before, after = model["before"], model["after"]
    unfused, fused = data["measured"]["unfused"], data["measured"]["fused"]
    speedup = lambda a, b: f" ({a / b:.1f}× faster)" if b else ""  # noqa: E731
    rows = [
        f"| `{example}` | H200 model, unfused | fused | CPU measured, unfused | fused |",
        "|---|---|---|---|---|",
        f"| kernel launches | {before['kernels']} | {after['kernels']} | {unfused['launches']} | {fused['launches']} |",
        f"| bytes moved | {_mb(before['bytes_moved'])} | {_mb(after['bytes_moved'])} | {_mb(unfused['bytes_moved'])} | {_mb(fused['bytes_moved'])} |",
        f"| intermediate memory (naive) | {_mb(before['intermediate_bytes'])} | {_mb(after['intermediate_bytes'])} | {_mb(unfused['naive_bytes'])} | {_mb(fused['naive_bytes'])} |",
        f"| planned arena | | | {_mb(unfused['arena_bytes'])} | {_mb(fused['arena_bytes'])} |",
        f"{TIME_ROW} {_time(before['time_seconds'])} | {_time(after['time_seconds'])}{speedup(before['time_seconds'], after['time_seconds'])} | "
        f"{_time(unfused['time_seconds'])} | {_time(fused['time_seconds'])}{speedup(unfused['time_seconds'], fused['time_seconds'])} |",
    ]
    return "\n".join(rows) + "\n"


BLOCKS = {
    "report-encoder-ops": lambda repeat: report_block(),
    "measured-encoder": lambda repeat: measured_block("encoder_block.ir", repeat),
    "measured-llama": lambda repeat: measured_block("llama_block.ir", repeat),
}


def deterministic(body: str) -> str:
    """A block without its measured timings: the time row keeps its H200
    model cells (the cost model's, as deterministic as the counts) and drops
    the CPU measured ones."""
    return "\n".join(model_cells(line) if line.startswith(TIME_ROW) else line for line in body.split("\n"))


def model_cells(time_row: str) -> str:
    """The time row's label and H200 model cells, unfused and fused."""
    return "|".join(time_row.split("|")[:4])


def regenerate(text: str, repeat: int) -> tuple[str, list[str]]:
    """(the text with every block regenerated, the names of blocks whose
    deterministic figures changed)."""
    stale = []
    found = {m.group("name") for m in BLOCK.finditer(text)}
    missing = sorted(set(BLOCKS) - found)
    if missing:
        raise SystemExit(f"README.md lacks the figure blocks {missing}")

    def replace(match: re.Match) -> str:
        body = BLOCKS[match.group("name")](repeat)
        if deterministic(body) != deterministic(match.group("body")):
            stale.append(match.group("name"))
        return match.group(1) + body + match.group(4)

    return BLOCK.sub(replace, text), stale


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if a deterministic figure differs from README.md (writes nothing)")
    p.add_argument("--repeat", type=int, default=20, help="timed runs per program when writing (default 20; --check uses 1)")
    p.add_argument("--readme", default=str(README), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    path = pathlib.Path(args.readme)
    text = path.read_text()
    fresh, stale = regenerate(text, 1 if args.check else args.repeat)
    if args.check:
        if stale:
            print(f"{path}: stale figures in {', '.join(stale)}; run python benchmarks/readme_figures.py", file=sys.stderr)
            return 1
        return 0
    path.write_text(fresh)
    print(f"rewrote {len(BLOCKS)} blocks of {path}" + (f" (changed: {', '.join(stale)})" if stale else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
