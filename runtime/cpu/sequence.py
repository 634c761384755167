"""A schedule's launches and copies run by one native call (issue 11.2's
"no per-call Python overhead above 50 us for a 30-kernel program").

Calling each kernel through ctypes costs a couple of microseconds of
Python per launch (argument conversion, the call, the loop around it), so
a 30-kernel program spent 80 us per call outside its kernels. Here the
steps of a schedule are encoded once, when the plan is bound, as an int64
array; `fusecc_run_steps(steps, bases)`, one fixed LLVM function compiled
once per host (and kept in the disk cache like any kernel), walks it and
calls each kernel by its address. A call then fills the addresses of its
inputs and outputs into `bases` and makes one ctypes call.

Encoding (int64 words):
- launch: 0, kernel address, n, then n pairs (base index, offset): the
  argument is bases[index] + offset (index 0 holds 0, so a literal is
  (0, value)); the kernel's worker range [begin, end) is its last two;
- copy:   1, target (index, offset), source (index, offset), bytes;
- end:    -1.

Every argument is passed as an i64. That is how the x86-64 and AArch64 C
ABIs pass pointers and 64-bit integers, so only kernels whose parameters
are all memrefs, `index` or i64 scalars (`native_callable`) are encoded;
anything else stays a Python launch.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from fusecc.compiler.types import MemRefType

# A launch with more arguments (pointers, `?` sizes, begin, end) runs through
# ctypes. The runner has one call site per arity, and LLVM's time on it grows
# faster than their number: 32 took 0.25 s to compile once (then the disk
# cache), 64 took 1.1 s; the kernels we make take at most ~20.
MAX_ARGUMENTS = 32
LAUNCH, COPY, END = 0, 1, -1

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


def runner_ir() -> str:
    """LLVM IR of `void fusecc_run_steps(ptr steps, ptr bases)`."""
    n = MAX_ARGUMENTS
    lines = [
        "declare void @llvm.memmove.p0.p0.i64(ptr, ptr, i64, i1)",
        "",
        "define void @fusecc_run_steps(ptr noalias %steps, ptr noalias %bases) {",
        "entry:",
        f"  %args = alloca [{n} x i64], align 16",
        "  br label %step",
        "step:",
        "  %pc = phi i64 [ 0, %entry ], [ %after_launch, %launched ], [ %after_copy, %copy ]",
        "  %kind.p = getelementptr i64, ptr %steps, i64 %pc",
        "  %kind = load i64, ptr %kind.p",
        f"  switch i64 %kind, label %done [ i64 {LAUNCH}, label %launch  i64 {COPY}, label %copy ]",
        "launch:",
        "  %fn.i = add i64 %pc, 1",
        "  %fn.p = getelementptr i64, ptr %steps, i64 %fn.i",
        "  %fn.w = load i64, ptr %fn.p",
        "  %fn = inttoptr i64 %fn.w to ptr",
        "  %count.i = add i64 %pc, 2",
        "  %count.p = getelementptr i64, ptr %steps, i64 %count.i",
        "  %count = load i64, ptr %count.p",
        "  %first = add i64 %pc, 3",
        "  br label %argument.test",
        "argument.test:",
        "  %j = phi i64 [ 0, %launch ], [ %j.next, %argument ]",
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
        "  %words = shl i64 %count, 1",
        "  %after_launch = add i64 %first, %words",
        "  switch i64 %count, label %launched [ " + "  ".join(f"i64 {k}, label %call{k}" for k in range(1, n + 1)) + " ]",
    ]
    for k in range(1, n + 1):
        lines.append(f"call{k}:")
        for a in range(k):
            lines.append(f"  %a{k}.{a}.p = getelementptr i64, ptr %args, i64 {a}")
            lines.append(f"  %a{k}.{a} = load i64, ptr %a{k}.{a}.p")
        lines.append(f"  call void %fn({', '.join(f'i64 %a{k}.{a}' for a in range(k))})")
        lines.append("  br label %launched")
    lines += [
        "launched:",
        "  br label %step",
        "copy:",
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
        "  %after_copy = add i64 %pc, 6",
        "  br label %step",
        "done:",
        "  ret void",
        "}",
    ]
    return "\n".join(lines) + "\n"


def run_steps_function():
    """The ctypes function `fusecc_run_steps(steps, bases)` (both int64
    arrays' addresses), compiled on first use; ctypes releases the GIL
    while it runs, as for a single kernel."""
    global _runner
    if _runner is None:
        from fusecc.runtime.cpu import jit

        compiled = jit.compile_ir(runner_ir(), ["fusecc_run_steps"], ir_passes=False)  # written as it should run: no IR passes
        function = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(compiled.addresses["fusecc_run_steps"])
        with _lock:
            if _runner is None:
                _runner = (compiled, function)
    return _runner[1]


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

    def copy(self, target: tuple[object, int], source: tuple[object, int], nbytes: int) -> None:
        self.words += [COPY, self.base(target[0]), target[1], self.base(source[0]), source[1], nbytes]

    def __len__(self) -> int:
        return len(self.words)

    def finish(self) -> np.ndarray:
        return np.array(self.words + [END], dtype=np.int64)


__all__ = ["MAX_ARGUMENTS", "StepEncoder", "native_callable", "run_steps_function", "runner_ir"]
