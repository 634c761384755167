"""A team of threads that run a call's steps together in native code.

With the ThreadPoolExecutor a launch split over two threads costs a
hand-off each way: the helper is woken, takes the GIL, calls ctypes; the
caller sleeps on a future until it is done (~24 µs per launch, 21 launches
per MiniLM call, and more when the helper waits to be scheduled). Here the
helper threads wait in native code instead (`fusecc_team_wait`, in
sequence.py's runner): the calling thread publishes a call's steps
(`fusecc_team_publish`) and every thread walks them (`fusecc_run_steps`),
meeting at barriers that spin on shared words. Nothing sleeps between the
launches of a call; onnxruntime's spinning intra-op threads do the same.

A helper that sees no call for `SPIN_TICKS` of the cycle counter (~1-2 ms)
goes to sleep on a condition variable, in Python, so an idle process does
not burn a core; the next call wakes it. The sleep is safe against a call
that is published meanwhile: the helper checks the generation word (under
the GIL and the condition's lock) after it says it is asleep, and the
caller looks for sleepers after it has published.
"""

from __future__ import annotations

import atexit
import os
import threading

import numpy as np

from fusecc.runtime.cpu.sequence import TEAM_COUNT, TEAM_GENERATION, TEAM_STRIDE, TEAM_THREADS, TEAM_WORDS, runner_functions

SPIN_TICKS = 4_000_000  # cycle-counter ticks a helper spins for the next call (~1-2 ms at 2-4 GHz)
STOPPED, TIMED_OUT = -2, -1

_teams: dict[int, "Team"] = {}  # one per thread count, shared by every pool of that many threads
_teams_lock = threading.Lock()


def team_for(threads: int) -> "Team":
    """The process's team of `threads` threads, made on first use (pools of
    one size share it: its calls take turns, and no helper threads pile up
    with the programs compiled)."""
    with _teams_lock:
        team = _teams.get(threads)
        if team is None:
            team = _teams[threads] = Team(threads)
        return team


class Team:
    """`threads` threads: the caller of `run` is thread 0, and threads - 1
    helpers wait for calls in native code."""

    def __init__(self, threads: int):
        functions = runner_functions()
        self._run_steps, self._wait = functions["fusecc_run_steps"], functions["fusecc_team_wait"]
        self._publish, self._stop = functions["fusecc_team_publish"], functions["fusecc_team_stop"]
        self.threads = threads
        self.state = np.zeros(TEAM_WORDS + TEAM_STRIDE, dtype=np.int64)  # one spare line: the words are 64-byte apart
        self.state[TEAM_THREADS * TEAM_STRIDE] = threads
        self._address = self.state.ctypes.data
        self._stopped = False
        self._start_helpers()

    def _start_helpers(self) -> None:
        self._call_lock = threading.Lock()  # one call at a time: the words are the team's
        self._sleep = threading.Condition()
        self._asleep = 0
        self._wakeups = 0
        generation = self._generation()
        self._helpers = [threading.Thread(target=self._serve, args=(tid, generation), name=f"fusecc-team-{tid}", daemon=True) for tid in range(1, self.threads)]
        for helper in self._helpers:
            helper.start()

    def _after_fork(self) -> None:
        """In a forked child only the forking thread runs: new helpers, and
        the barrier's count reset (a call of another thread may have been
        under way); its sense and the generation carry on."""
        self.state[TEAM_COUNT * TEAM_STRIDE] = 0
        self._start_helpers()

    def run(self, steps_address: int, bases_address: int) -> None:
        """One call: every thread walks the steps at `steps_address` (which
        end with a barrier) over the bases at `bases_address`."""
        with self._call_lock:
            if self._stopped:  # at exit: the caller runs every piece itself
                self._run_steps(steps_address, bases_address, None, 0)
                return
            self._publish(self._address, steps_address, bases_address)
            if self._asleep:
                with self._sleep:
                    self._wakeups += 1
                    self._sleep.notify_all()
            self._run_steps(steps_address, bases_address, self._address, 0)

    def _generation(self) -> int:
        return int(self.state[TEAM_GENERATION * TEAM_STRIDE])

    def _serve(self, tid: int, last: int) -> None:
        seen = 0
        while True:
            generation = self._wait(self._address, tid, last, SPIN_TICKS)
            if generation == STOPPED:
                return
            if generation != TIMED_OUT:
                last = generation
                continue
            with self._sleep:
                self._asleep += 1
                while self._generation() == last and self._wakeups == seen:
                    self._sleep.wait()
                seen = self._wakeups
                self._asleep -= 1

    def stop(self) -> None:
        """The helpers return (at exit: none may still be spinning in code
        that the interpreter's teardown frees)."""
        with self._call_lock:
            self._stopped = True
            self._stop(self._address)
            with self._sleep:
                self._wakeups += 1
                self._sleep.notify_all()
        for helper in self._helpers:
            helper.join(timeout=1.0)


@atexit.register
def _stop_teams() -> None:
    for team in list(_teams.values()):
        team.stop()


def _restart_teams_in_child() -> None:
    global _teams_lock
    _teams_lock = threading.Lock()
    for team in list(_teams.values()):
        team._after_fork()


os.register_at_fork(after_in_child=_restart_teams_in_child)


__all__ = ["SPIN_TICKS", "Team", "team_for"]
