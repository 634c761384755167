"""python -m fusecc.tools.fuzz: run seeds, or reduce a saved failure (docs/fuzzing.md)."""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import numpy as np

from fusecc.tools.fuzz.generate import Case, generate
from fusecc.tools.fuzz.program import Program, print_program, resource_arrays
from fusecc.tools.fuzz.run import TARGETS, Outcome, run_case, run_seed


SEEDS_PER_WORKER = 200


def seeds_of(text: str) -> range:
    if ":" in text:
        a, b = text.split(":")
        return range(int(a), int(b))
    return range(int(text))


def targets_for(seed: int, targets: list[str], harness_every: int) -> list[str]:
    chosen = [t for t in targets if t != "harness"]
    if "harness" in targets or (harness_every and seed % harness_every == 0):
        chosen.append("harness")
    return chosen


# --------------------------------------------------------------------------- case files


def save_case(case: Case, outcome: Outcome | None, folder: Path) -> Path:
    """seed-N.json (program, inputs, outcome; what --reduce reads), and
    seed-N.ir + seed-N.npz for `fusecc run seed-N.ir --inputs seed-N.npz`."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"seed-{case.seed}"
    data = {
        "seed": case.seed,
        "features": case.features,
        "program": case.program.to_json(),
        "inputs": [{"dtype": str(x.dtype), "shape": list(x.shape), "values": x.astype(np.float64 if x.dtype.kind == "f" else np.int64).tolist()} for x in case.inputs],
        "outcome": None if outcome is None else {"classes": outcome.classes, "details": outcome.details},
    }
    stem.with_suffix(".json").write_text(json.dumps(data, indent=1))
    resources = resource_arrays(case.program)
    stem.with_suffix(".ir").write_text(print_program(case.program, f"{stem.name}.resources.npz"))
    if resources:  # the dense_resource constants' file the .ir names
        np.savez(folder / f"{stem.name}.resources.npz", **resources)
    np.savez(stem.with_suffix(".npz"), **{name: x for (name, _), x in zip(case.program.main.args, case.inputs)})
    return stem.with_suffix(".json")


def load_case(path: str) -> tuple[Case, dict | None]:
    data = json.loads(Path(path).read_text())
    inputs = [np.asarray(x["values"]).astype(x["dtype"]).reshape(x["shape"]) for x in data["inputs"]]
    return Case(data["seed"], Program.from_json(data["program"]), inputs, data.get("features", [])), data.get("outcome")


# --------------------------------------------------------------------------- the long run


def run_seeds(args) -> int:
    seeds = seeds_of(args.seeds)
    targets = args.targets.split(",")
    counts: collections.Counter = collections.Counter()
    failures: list[Outcome] = []
    start = time.time()
    jobs = max(1, args.jobs)
    pending = list(seeds)[::-1]
    done = 0

    def record(outcome: Outcome) -> None:
        nonlocal done
        done += 1
        for target, klass in outcome.classes.items():
            counts[target, klass] += 1
        if outcome.failed():
            failures.append(outcome)
            for target in outcome.failed():
                print(f"seed {outcome.seed}: {target}: {outcome.classes[target]}: {outcome.details.get(target, '')}", flush=True)
            if args.out:
                save_case(generate(outcome.seed, args.ops), outcome, Path(args.out))
        if args.progress and done % args.progress == 0:
            print(f"... {done} seeds, {time.time() - start:.0f} s", flush=True)

    while pending:
        # Workers are replaced every SEEDS_PER_WORKER seeds: a harness run loads
        # a compiled library that a process cannot unload (its thread_local
        # worker pins it), and 10,000 of them would exhaust the mappings one
        # process may hold. forkserver: max_tasks_per_child cannot fork.
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("forkserver"), max_tasks_per_child=SEEDS_PER_WORKER) as pool:
            running = {}
            try:
                while pending or running:
                    while pending and len(running) < jobs * 2:
                        seed = pending.pop()
                        invalid = bool(args.invalid_every) and seed % args.invalid_every == 0
                        running[pool.submit(run_seed, seed, targets_for(seed, targets, args.harness_every), invalid, args.ops)] = seed
                    finished, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in finished:
                        seed = running.pop(future)
                        record(future.result())
            except BrokenProcessPool:
                # A worker died (an abort the compiler should have contained):
                # its seeds are crashes on every target they were to run.
                for seed in running.values():
                    record(Outcome(seed, [], {t: "crash" for t in targets_for(seed, targets, args.harness_every)}, {t: "the worker process died" for t in targets}))
    elapsed = time.time() - start
    print(summary(counts, len(seeds), elapsed))
    if args.json:
        Path(args.json).write_text(json.dumps({"seeds": [seeds.start, seeds.stop], "seconds": elapsed, "counts": [[t, c, n] for (t, c), n in sorted(counts.items())], "failures": [{"seed": o.seed, "classes": o.classes, "details": o.details} for o in failures]}, indent=1))
    return 1 if failures else 0


def summary(counts: collections.Counter, seeds: int, seconds: float) -> str:
    classes = ["ok", "mismatch", "crash", "refused", "sanitizer"]
    lines = [f"{seeds} seeds in {seconds:.0f} s", f"{'target':<10}" + "".join(f"{c:>10}" for c in classes)]
    for target in TARGETS:
        if any(t == target for t, _ in counts):
            lines.append(f"{target:<10}" + "".join(f"{counts[target, c]:>10}" for c in classes))
    invalid = {c: n for (t, c), n in counts.items() if t == "invalid"}
    if invalid:
        lines.append("invalid programs: " + ", ".join(f"{c} {n}" for c, n in sorted(invalid.items())))
    return "\n".join(lines)


# --------------------------------------------------------------------------- reduce


def reduce_main(args) -> int:
    from fusecc.tools.fuzz.reduce import reduce_case

    case, outcome = load_case(args.reduce)
    if args.target:
        target = args.target
    elif outcome:
        failed = [t for t, c in outcome["classes"].items() if c not in ("ok", "rejected", "skipped") and t in TARGETS]
        target = failed[0] if failed else "cpu"
    else:
        target = "cpu"
    klass = run_case(case, [target]).classes[target]
    if klass == "ok":
        print(f"{args.reduce}: passes on {target}; nothing to reduce", file=sys.stderr)
        return 1
    print(f"reducing seed {case.seed}: {target} {klass}, {case.program.op_count()} ops")

    def still_fails(candidate: Case) -> bool:
        try:
            return run_case(candidate, [target]).classes[target] == klass
        except Exception:  # noqa: BLE001 - the oracle cannot evaluate it: not this failure
            return False

    reduced = reduce_case(case, still_fails, log=print)
    outcome = run_case(reduced, [target])
    path = save_case(reduced, outcome, Path(args.out or os.path.dirname(args.reduce) or ".") / "reduced")
    print(print_program(reduced.program))
    print(f"{target}: {outcome.classes[target]}: {outcome.details.get(target, '')}")
    print(f"written {path} and {path.with_suffix('.ir')} + {path.with_suffix('.npz')}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusecc.tools.fuzz", description="Differential fuzzing of fusecc against an independent float64 oracle (docs/fuzzing.md).")
    p.add_argument("--seeds", default="100", help="N (seeds 0..N-1) or A:B")
    p.add_argument("--targets", default="reference,cpu,cuda-emit", help="comma-separated, of reference, cpu, cuda-emit (the CUDA C emitted, not run), harness (it run on the CPU, sanitized)")
    p.add_argument("--harness-every", type=int, default=0, metavar="K", help="also run the CUDA C on the sanitized CPU harness for every K-th seed")
    p.add_argument("--invalid-every", type=int, default=5, metavar="K", help="check an invalid variant of every K-th seed (0: none)")
    p.add_argument("--ops", type=int, default=None, help="ops per program (default: 3 to 14, drawn per seed)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--out", help="folder for failing cases (seed-N.json/.ir/.npz)")
    p.add_argument("--json", help="write the counts and failures here")
    p.add_argument("--progress", type=int, default=0, metavar="N", help="a line every N seeds")
    p.add_argument("--show", type=int, metavar="SEED", help="print the program of SEED and exit")
    p.add_argument("--reduce", metavar="CASE.json", help="shrink a saved failing case")
    p.add_argument("--target", help="with --reduce: the target whose failure to keep")
    args = p.parse_args(argv)
    if args.show is not None:
        case = generate(args.show, args.ops)
        print(print_program(case.program), end="")
        return 0
    if args.reduce:
        return reduce_main(args)
    return run_seeds(args)


if __name__ == "__main__":
    sys.exit(main())
