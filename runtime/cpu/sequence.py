"""A schedule's launches and copies run by one native call (issue 11.2's
"no per-call Python overhead above 50 us for a 30-kernel program").

Calling each kernel through ctypes costs a couple of microseconds of
Python per launch (argument conversion, the call, the loop around it), so
a 30-kernel program spent 80 us per call outside its kernels. Here the
steps of a schedule are encoded once, when the plan is bound, as an int64
array; `fusecc_run_steps(steps, bases, team, tid)`, one fixed LLVM function
compiled once per host (and kept in the disk cache like any kernel), walks
it and calls each kernel by its address. A call then fills the addresses of
its inputs and outputs into `bases` and makes one ctypes call.

On several threads every thread of a team (team.py: the calling thread and
helpers spinning in native code) walks the same steps: launches and copies
run on thread 0, a split launch runs piece r on thread r, and barriers
order them. No Python runs between a call's launches, and no thread sleeps.

Encoding (int64 words):
- launch: 0, kernel address, n, then n pairs (base index, offset): the
  argument is bases[index] + offset (index 0 holds 0, so a literal is
  (0, value)); the kernel's worker range [begin, end) is its last two;
- copy:   1, target (index, offset), source (index, offset), bytes;
- split:  2, P, then P launch records (kernel address, n, n pairs): thread
  r runs record r (without a team, the caller runs them all in turn);
- barrier: 3;
- end:    -1.

Every argument is passed as an i64. That is how the x86-64 and AArch64 C
ABIs pass pointers and 64-bit integers, so only kernels whose parameters
are all memrefs, `index` or i64 scalars (`native_callable`) are encoded;
anything else stays a Python launch.
"""

from __future__ import annotations

import ctypes
import platform
import threading

import numpy as np

from fusecc.compiler.types import MemRefType

# A launch with more arguments (pointers, `?` sizes, begin, end) runs through
# ctypes. The runner has one call site per arity, and LLVM's time on it grows
# faster than their number: 32 took 0.25 s to compile once (then the disk
# cache), 64 took 1.1 s; the kernels we make take at most ~20.
MAX_ARGUMENTS = 32
LAUNCH, COPY, SPLIT, BARRIER, END = 0, 1, 2, 3, -1
# The team's shared words (team.py), int64 indices, each on its own 64-byte line.
TEAM_STRIDE = 8
TEAM_GENERATION, TEAM_STEPS, TEAM_BASES, TEAM_COUNT, TEAM_SENSE, TEAM_THREADS = range(6)
TEAM_WORDS = 6 * TEAM_STRIDE
RUNNER_SYMBOLS = ["fusecc_run_steps", "fusecc_team_wait", "fusecc_team_publish", "fusecc_team_stop"]

_lock = threading.Lock()
_runner = None  # (module, ctypes function), made on first use


def native_callable(abi) -> bool:
    """Whether a kernel's arguments can all be passed as i64 words."""
    arguments = 2  # begin, end
    for t in abi.params:
        if isinstance(t, MemRefType):
            arguments += 1 + len(t.dynamic_axes)
        elif t.name in ("index", "i64"):
            arguments += 1
        else:
            return False
    return arguments <= MAX_ARGUMENTS


def runner_ir(x86: bool | None = None) -> str:
    """LLVM IR of `void fusecc_run_steps(ptr steps, ptr bases, ptr team, i64
    tid)` and the team's `fusecc_team_wait`, `fusecc_team_publish` and
    `fusecc_team_stop` (team.py). `x86`: whether spin loops may use `pause`
    (default: this host)."""
    if x86 is None:
        x86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")
    n = MAX_ARGUMENTS
    pause = ["  call void @llvm.x86.sse2.pause()"] if x86 else []
    word = lambda name, k: [f"  %{name} = getelementptr i64, ptr %team, i64 {k * TEAM_STRIDE}"]  # noqa: E731
    lines = [
        "declare void @llvm.memmove.p0.p0.i64(ptr, ptr, i64, i1)",
        "declare i64 @llvm.readcyclecounter()",
        *(["declare void @llvm.x86.sse2.pause()"] if x86 else []),
        "",
        # one launch record [fn, count, count argument pairs] at word `at`
        "define internal void @fusecc_launch(ptr noalias %steps, i64 %at, ptr noalias %bases) {",
        "entry:",
        f"  %args = alloca [{n} x i64], align 16",
        "  %fn.p = getelementptr i64, ptr %steps, i64 %at",
        "  %fn.w = load i64, ptr %fn.p",
        "  %fn = inttoptr i64 %fn.w to ptr",
        "  %count.p = getelementptr i64, ptr %fn.p, i64 1",
        "  %count = load i64, ptr %count.p",
        "  %first = add i64 %at, 2",
        "  br label %argument.test",
        "argument.test:",
        "  %j = phi i64 [ 0, %entry ], [ %j.next, %argument ]",
        "  %more = icmp slt i64 %j, %count",
        "  br i1 %more, label %argument, label %call",
        "argument:",
        "  %j2 = shl i64 %j, 1",
        "  %index.i = add i64 %first, %j2",
        "  %index.p = getelementptr i64, ptr %steps, i64 %index.i",
        "  %index = load i64, ptr %index.p",
        "  %offset.p = getelementptr i64, ptr %index.p, i64 1",
        "  %offset = load i64, ptr %offset.p",
        "  %base.p = getelementptr i64, ptr %bases, i64 %index",
        "  %base = load i64, ptr %base.p",
        "  %value = add i64 %base, %offset",
        "  %slot = getelementptr i64, ptr %args, i64 %j",
        "  store i64 %value, ptr %slot",
        "  %j.next = add i64 %j, 1",
        "  br label %argument.test",
        "call:",
        "  switch i64 %count, label %return [ " + "  ".join(f"i64 {k}, label %call{k}" for k in range(1, n + 1)) + " ]",
    ]
    for k in range(1, n + 1):
        lines.append(f"call{k}:")
        for a in range(k):
            lines.append(f"  %a{k}.{a}.p = getelementptr i64, ptr %args, i64 {a}")
            lines.append(f"  %a{k}.{a} = load i64, ptr %a{k}.{a}.p")
        lines.append(f"  call void %fn({', '.join(f'i64 %a{k}.{a}' for a in range(k))})")
        lines.append("  br label %return")
    lines += [
        "return:",
        "  ret void",
        "}",
        "",
        # a sense-reversing barrier of the team's threads; `sense.slot`: the thread's sense
        "define internal void @fusecc_team_barrier(ptr %team, ptr %sense.slot) {",
        "entry:",
        "  %old = load i64, ptr %sense.slot",
        "  %new = xor i64 %old, 1",
        "  store i64 %new, ptr %sense.slot",
        *word("count.p", TEAM_COUNT), *word("sense.p", TEAM_SENSE), *word("threads.p", TEAM_THREADS),
        "  %threads = load i64, ptr %threads.p",
        "  %arrived = atomicrmw add ptr %count.p, i64 1 acq_rel",
        "  %last = add i64 %arrived, 1",
        "  %all = icmp eq i64 %last, %threads",
        "  br i1 %all, label %release, label %wait",
        "release:",
        "  store atomic i64 0, ptr %count.p monotonic, align 8",
        "  store atomic i64 %new, ptr %sense.p release, align 8",
        "  ret void",
        "wait:",
        "  %seen = load atomic i64, ptr %sense.p acquire, align 8",
        "  %flipped = icmp eq i64 %seen, %new",
        "  br i1 %flipped, label %out, label %spin",
        "spin:",
        *pause,
        "  br label %wait",
        "out:",
        "  ret void",
        "}",
        "",
        "define void @fusecc_run_steps(ptr noalias %steps, ptr noalias %bases, ptr %team, i64 %tid) {",
        "entry:",
        "  %sense.slot = alloca i64, align 8",
        "  store i64 0, ptr %sense.slot",
        "  %first.thread = icmp eq i64 %tid, 0",
        "  %in.team = icmp ne ptr %team, null",
        "  br i1 %in.team, label %join, label %step",
        "join:",  # every thread of a call starts from the sense the last barrier left
        *word("sense.start.p", TEAM_SENSE),
        "  %sense.start = load atomic i64, ptr %sense.start.p acquire, align 8",
        "  store i64 %sense.start, ptr %sense.slot",
        "  br label %step",
        "step:",
        "  %pc = phi i64 [ 0, %entry ], [ 0, %join ], [ %after_launch, %launched ], [ %after_copy, %copied ], [ %rec, %split.done ], [ %after_barrier, %met ]",
        "  %kind.p = getelementptr i64, ptr %steps, i64 %pc",
        "  %kind = load i64, ptr %kind.p",
        f"  switch i64 %kind, label %done [ i64 {LAUNCH}, label %launch  i64 {COPY}, label %copy  i64 {SPLIT}, label %split  i64 {BARRIER}, label %barrier ]",
        "launch:",  # on the calling thread only
        "  %at = add i64 %pc, 1",
        "  %count.i = add i64 %pc, 2",
        "  %count.p = getelementptr i64, ptr %steps, i64 %count.i",
        "  %count = load i64, ptr %count.p",
        "  %words = shl i64 %count, 1",
        "  %after_launch.1 = add i64 %pc, 3",
        "  %after_launch = add i64 %after_launch.1, %words",
        "  br i1 %first.thread, label %launch.run, label %launched",
        "launch.run:",
        "  call void @fusecc_launch(ptr %steps, i64 %at, ptr %bases)",
        "  br label %launched",
        "launched:",
        "  br label %step",
        "split:",  # [SPLIT, P, P launch records]: thread r runs record r
        "  %pieces.i = add i64 %pc, 1",
        "  %pieces.p = getelementptr i64, ptr %steps, i64 %pieces.i",
        "  %pieces = load i64, ptr %pieces.p",
        "  %rec.first = add i64 %pc, 2",
        "  br label %split.test",
        "split.test:",
        "  %r = phi i64 [ 0, %split ], [ %r.next, %split.next ]",
        "  %rec = phi i64 [ %rec.first, %split ], [ %rec.after, %split.next ]",
        "  %split.more = icmp slt i64 %r, %pieces",
        "  br i1 %split.more, label %split.body, label %split.done",
        "split.body:",
        "  %rc.i = add i64 %rec, 1",
        "  %rc.p = getelementptr i64, ptr %steps, i64 %rc.i",
        "  %rc = load i64, ptr %rc.p",
        "  %rc.words = shl i64 %rc, 1",
        "  %rec.after.1 = add i64 %rec, 2",
        "  %rec.after = add i64 %rec.after.1, %rc.words",
        "  %mine.r = icmp eq i64 %r, %tid",
        "  %solo = xor i1 %in.team, true",  # without a team the caller runs every piece
        "  %mine = or i1 %mine.r, %solo",
        "  br i1 %mine, label %split.run, label %split.next",
        "split.run:",
        "  call void @fusecc_launch(ptr %steps, i64 %rec, ptr %bases)",
        "  br label %split.next",
        "split.next:",
        "  %r.next = add i64 %r, 1",
        "  br label %split.test",
        "split.done:",
        "  br label %step",
        "barrier:",
        "  %after_barrier = add i64 %pc, 1",
        "  br i1 %in.team, label %barrier.run, label %met",
        "barrier.run:",
        "  call void @fusecc_team_barrier(ptr %team, ptr %sense.slot)",
        "  br label %met",
        "met:",
        "  br label %step",
        "copy:",  # on the calling thread only
        "  %after_copy = add i64 %pc, 6",
        "  br i1 %first.thread, label %copy.run, label %copied",
        "copy.run:",
        "  %w1.i = add i64 %pc, 1",
        "  %w1 = getelementptr i64, ptr %steps, i64 %w1.i",
        "  %target.index = load i64, ptr %w1",
        "  %w2 = getelementptr i64, ptr %w1, i64 1",
        "  %target.offset = load i64, ptr %w2",
        "  %w3 = getelementptr i64, ptr %w1, i64 2",
        "  %source.index = load i64, ptr %w3",
        "  %w4 = getelementptr i64, ptr %w1, i64 3",
        "  %source.offset = load i64, ptr %w4",
        "  %w5 = getelementptr i64, ptr %w1, i64 4",
        "  %bytes = load i64, ptr %w5",
        "  %target.base.p = getelementptr i64, ptr %bases, i64 %target.index",
        "  %target.base = load i64, ptr %target.base.p",
        "  %target.address = add i64 %target.base, %target.offset",
        "  %target = inttoptr i64 %target.address to ptr",
        "  %source.base.p = getelementptr i64, ptr %bases, i64 %source.index",
        "  %source.base = load i64, ptr %source.base.p",
        "  %source.address = add i64 %source.base, %source.offset",
        "  %source = inttoptr i64 %source.address to ptr",
        "  call void @llvm.memmove.p0.p0.i64(ptr %target, ptr %source, i64 %bytes, i1 false)",
        "  br label %copied",
        "copied:",
        "  br label %step",
        "done:",
        "  ret void",
        "}",
        "",
        # a helper thread: spin until a call is published (then run it and return its
        # generation), the team is stopped (-2) or `ticks` of the cycle counter pass (-1)
        "define i64 @fusecc_team_wait(ptr %team, i64 %tid, i64 %last, i64 %ticks) {",
        "entry:",
        *word("generation.p", TEAM_GENERATION), *word("steps.p", TEAM_STEPS), *word("bases.p", TEAM_BASES),
        "  %start = call i64 @llvm.readcyclecounter()",
        "  br label %poll",
        "poll:",
        "  %generation = load atomic i64, ptr %generation.p acquire, align 8",
        "  %published = icmp ne i64 %generation, %last",
        "  br i1 %published, label %job, label %idle",
        "job:",
        "  %stopped = icmp slt i64 %generation, 0",
        "  br i1 %stopped, label %stop, label %run",
        "run:",
        "  %steps.w = load atomic i64, ptr %steps.p monotonic, align 8",
        "  %bases.w = load atomic i64, ptr %bases.p monotonic, align 8",
        "  %steps = inttoptr i64 %steps.w to ptr",
        "  %bases = inttoptr i64 %bases.w to ptr",
        "  call void @fusecc_run_steps(ptr %steps, ptr %bases, ptr %team, i64 %tid)",
        "  ret i64 %generation",
        "stop:",
        "  ret i64 -2",
        "idle:",
        "  %now = call i64 @llvm.readcyclecounter()",
        "  %spent = sub i64 %now, %start",
        "  %over = icmp ugt i64 %spent, %ticks",
        "  br i1 %over, label %timeout, label %spin",
        "spin:",
        *pause,
        "  br label %poll",
        "timeout:",
        "  ret i64 -1",
        "}",
        "",
        "define void @fusecc_team_publish(ptr %team, i64 %steps, i64 %bases) {",
        "entry:",
        *word("generation.p", TEAM_GENERATION), *word("steps.p", TEAM_STEPS), *word("bases.p", TEAM_BASES),
        "  store atomic i64 %steps, ptr %steps.p monotonic, align 8",
        "  store atomic i64 %bases, ptr %bases.p monotonic, align 8",
        "  %old = atomicrmw add ptr %generation.p, i64 1 release",
        "  ret void",
        "}",
        "",
        "define void @fusecc_team_stop(ptr %team) {",
        "entry:",
        *word("generation.p", TEAM_GENERATION),
        "  store atomic i64 -1, ptr %generation.p release, align 8",
        "  ret void",
        "}",
    ]
    return "\n".join(lines) + "\n"


def runner_functions() -> dict:
    """The runner's ctypes functions by symbol (`RUNNER_SYMBOLS`), compiled
    on first use; ctypes releases the GIL while they run, as for a single
    kernel."""
    global _runner
    if _runner is None:
        from fusecc.runtime.cpu import jit

        compiled = jit.compile_ir(runner_ir(), RUNNER_SYMBOLS, ir_passes=False, split=False)  # written as it should run: no IR passes
        word, address = ctypes.c_int64, ctypes.c_void_p
        signatures = {
            "fusecc_run_steps": (None, address, address, address, word),
            "fusecc_team_wait": (word, address, word, word, word),
            "fusecc_team_publish": (None, address, address, address),
            "fusecc_team_stop": (None, address),
        }
        functions = {name: ctypes.CFUNCTYPE(*signatures[name])(compiled.addresses[name]) for name in RUNNER_SYMBOLS}
        with _lock:
            if _runner is None:
                _runner = (compiled, functions)
    return _runner[1]


def run_steps_function():
    """`fusecc_run_steps(steps, bases, team, tid)`: both int64 arrays'
    addresses; team None (and tid 0) on the calling thread alone."""
    return runner_functions()["fusecc_run_steps"]


class StepEncoder:
    """Builds one steps array. `base(key)` gives a key (a root of the
    schedule's slots) its index in the bases array, in first-use order."""

    def __init__(self, bases: dict | None = None):
        """`bases`: key -> index, shared with other encoders of one call;
        index 0 (key None) holds 0, for literals."""
        self.words: list[int] = []
        self.bases: dict[object, int] = {None: 0} if bases is None else bases

    def base(self, key) -> int:
        return self.bases.setdefault(key, len(self.bases))

    def launch(self, address: int, arguments: list[tuple[object, int]]) -> None:
        """`arguments`: (key, offset) per C argument; key None for a literal."""
        self.words += [LAUNCH, address, len(arguments)]
        for key, offset in arguments:
            self.words += [self.base(key), offset]

    def split(self, address: int, pieces: list[list[tuple[object, int]]]) -> None:
        """One launch whose thread r runs it with `pieces[r]` (arguments as
        for `launch`, the worker range last); a team call only."""
        self.words += [SPLIT, len(pieces)]
        for arguments in pieces:
            self.words += [address, len(arguments)]
            for key, offset in arguments:
                self.words += [self.base(key), offset]

    def barrier(self) -> None:
        """Every thread of the team waits here for the others (a team call only)."""
        self.words.append(BARRIER)

    def copy(self, target: tuple[object, int], source: tuple[object, int], nbytes: int) -> None:
        self.words += [COPY, self.base(target[0]), target[1], self.base(source[0]), source[1], nbytes]

    def __len__(self) -> int:
        return len(self.words)

    def finish(self) -> np.ndarray:
        return np.array(self.words + [END], dtype=np.int64)


__all__ = ["MAX_ARGUMENTS", "TEAM_COUNT", "TEAM_GENERATION", "TEAM_STRIDE", "TEAM_THREADS", "TEAM_WORDS", "StepEncoder", "native_callable", "run_steps_function", "runner_functions", "runner_ir"]
