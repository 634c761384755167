"""A bound schedule's steps as few native calls as possible (runtime/cpu/sequence.py).

Both plans (executor.SchedulePlan, dynamic.DynamicSchedulePlan, per bound
dims) bind their steps to the same form:
- ("launch", kernel, args, varying, pieces): `args` are the C arguments
  without the worker range, with fixed addresses (arena, constants, packed
  weights) filled in; `varying` lists (argument index, root, byte offset)
  for the arguments that point into a call's inputs or outputs (roots
  ("input", i) and ("output", i)); `pieces` are the worker ranges the pool
  runs, one per thread;
- ("copy", (source root, offset), (target root, offset), bytes).

`StepProgram` groups consecutive steps that run on the calling thread (a
launch of one piece whose kernel `native_callable` takes, or a copy) into
one encoded segment for `fusecc_run_steps`; a launch split over threads
(or one with arguments the native runner cannot pass) stays a pool launch
between segments. At one thread, a whole call is one ctypes call. On
several, where every kernel is `native_callable`, a whole call is one team
call (team.py): split launches as split steps between barriers.
"""

from __future__ import annotations

import ctypes
import os
import time

import numpy as np

from fusecc.runtime.cpu.sequence import StepEncoder, native_callable, run_steps_function


class StepProgram:
    """Bound steps ready to run: `run(inputs, outputs)` takes the addresses
    of a call's inputs and outputs (lists of ints, in schedule order)."""

    def __init__(self, steps: list[tuple], fixed: dict, pool, n_inputs: int, n_outputs: int):
        """`fixed`: the addresses of the roots other than inputs and outputs
        (arena, constants, packed weights), which copies name by root."""
        self.pool = pool
        self.steps = steps
        self.run_native = run_steps_function()
        keys: dict = {None: 0}
        self.segments: list[tuple] = []  # ("native" | "team", int64 words, their address) | ("pool", function, args, [(index, base, offset)], pieces)
        self.team = pool.team() if self._runs_as_team(steps, pool) else None
        if self.team is not None:
            self._encode_team_call(steps, keys)
        else:
            self._encode_segments(steps, keys)
        self.bases = np.zeros(len(keys), dtype=np.int64)
        for key, index in keys.items():
            if key in fixed:
                self.bases[index] = fixed[key]
        self.input_slots = [keys.get(("input", i), -1) for i in range(n_inputs)]
        self.output_slots = [keys.get(("output", i), -1) for i in range(n_outputs)]
        self._bases_address = self.bases.ctypes.data

    @staticmethod
    def _runs_as_team(steps: list[tuple], pool) -> bool:
        """A call with a split launch whose kernels the runner can all call;
        FUSECC_CPU_TEAM=0 keeps the pool's Python hand-offs (benchmarks
        compare the two; thread_split.py wraps the pool's launches)."""
        if pool.threads < 2 or os.environ.get("FUSECC_CPU_TEAM", "1") == "0":
            return False
        launches = [step for step in steps if step[0] == "launch"]
        return any(len(step[4]) > 1 for step in launches) and all(native_callable(step[1].abi) for step in launches)

    def _encode_segments(self, steps: list[tuple], keys: dict) -> None:
        """Native segments of the steps the calling thread runs, pool launches between them."""
        encoder = None
        for step in steps:
            if step[0] == "launch":
                _, kernel, args, varying, pieces = step
                if len(pieces) == 1 and native_callable(kernel.abi):
                    encoder = encoder or self._start(keys)
                    encoder.launch(*_launch_record(kernel, args, varying, pieces[0]))
                    continue
                self._flush(encoder)
                encoder = None
                self.segments.append(("pool", kernel.function, list(args), [(i, _index(keys, root), offset) for i, root, offset in varying], pieces))
            else:
                _, source, target, nbytes = step
                encoder = encoder or self._start(keys)
                encoder.copy(target, source, nbytes)
        self._flush(encoder)

    def _encode_team_call(self, steps: list[tuple], keys: dict) -> None:
        """The whole call as one team walk: a barrier before a split launch
        (its threads read what the steps before wrote) and after it."""
        encoder = self._start(keys)
        unordered = False  # steps since the last barrier
        for step in steps:
            if step[0] == "copy":
                _, source, target, nbytes = step
                encoder.copy(target, source, nbytes)
                unordered = True
                continue
            _, kernel, args, varying, pieces = step
            if len(pieces) == 1:
                encoder.launch(*_launch_record(kernel, args, varying, pieces[0]))
                unordered = True
                continue
            if unordered:
                encoder.barrier()
            records = [_launch_record(kernel, args, varying, piece) for piece in pieces]
            encoder.split(records[0][0], [arguments for _, arguments in records])
            encoder.barrier()
            unordered = False
        if unordered:
            encoder.barrier()
        words = encoder.finish()
        self.segments.append(("team", words, words.ctypes.data))

    def _start(self, keys: dict) -> StepEncoder:
        return StepEncoder(keys)  # one index space for every segment

    def _flush(self, encoder: StepEncoder | None) -> None:
        """Close the segment being encoded (the caller starts a new one)."""
        if encoder is not None and len(encoder):
            words = encoder.finish()
            self.segments.append(("native", words, words.ctypes.data))

    @property
    def native_calls(self) -> int:
        """ctypes calls per run: native segments plus pool launches."""
        return len(self.segments)

    def run(self, input_addresses, output_addresses) -> None:
        """One call. Not reentrant: callers hold their plan's lock (the
        arena and `bases` are shared)."""
        self.set_addresses(input_addresses, output_addresses)
        self.run_set()

    def set_addresses(self, input_addresses, output_addresses) -> None:
        """Where the next `run_set` reads its inputs and writes its outputs."""
        bases = self.bases
        for index, address in zip(self.input_slots, input_addresses):
            if index >= 0:
                bases[index] = address
        for index, address in zip(self.output_slots, output_addresses):
            if index >= 0:
                bases[index] = address

    def run_set(self) -> None:
        """The steps on the addresses last set (benchmarks time the kernels
        alone this way; the buffers must still be alive)."""
        bases = self.bases
        run_native, bases_address = self.run_native, self._bases_address
        for segment in self.segments:
            if segment[0] == "native":
                run_native(segment[2], bases_address, None, 0)
            elif segment[0] == "team":
                self.team.run(segment[2], bases_address)
            else:
                _, function, args, varying, pieces = segment
                if varying:
                    args = args.copy()
                    for index, base, offset in varying:
                        args[index] = int(bases[base]) + offset
                self.pool.run_pieces(function, args, pieces)


def run_profiled(steps: list[tuple], pool, bases: dict, profile: list) -> None:
    """The steps one at a time through ctypes, each timed into `profile`
    as (kernel name or "copy", seconds): what `run(..., profile=)` does."""
    for step in steps:
        start = time.perf_counter()
        if step[0] == "launch":
            _, kernel, args, varying, pieces = step
            if varying:
                args = args.copy()
                for index, root, offset in varying:
                    args[index] = bases[root] + offset
            pool.run_pieces(kernel.function, args, pieces)
        else:
            _, (src_root, src_offset), (dst_root, dst_offset), nbytes = step
            ctypes.memmove(bases[dst_root] + dst_offset, bases[src_root] + src_offset, nbytes)
        profile.append((step[1].abi.name if step[0] == "launch" else "copy", time.perf_counter() - start))


def _launch_record(kernel, args, varying, piece: tuple[int, int]) -> tuple[int, list]:
    """(kernel address, its arguments as StepEncoder takes them) for one
    piece: fixed values as literals, call-varying ones as (root, offset),
    the worker range last."""
    arguments = [(None, value) for value in args]
    for index, root, offset in varying:
        arguments[index] = (root, offset)
    return ctypes.cast(kernel.function, ctypes.c_void_p).value, arguments + [(None, piece[0]), (None, piece[1])]


def _index(keys: dict, root) -> int:
    return keys.setdefault(root, len(keys))


__all__ = ["StepProgram", "run_profiled"]
