"""The CPU runtime: worker-range splitting, the thread pool, kernel calls on
sub-ranges, alignment checks, the object-file cache, `fusecc` on loop IR."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

import cpu_kernels as K
from cpu_kernels import ScheduleWriter, Writer, memref
from fusecc.compiler import print_op
from fusecc.compiler.types import f32, i32
from fusecc.runtime.cpu import CompiledProgram, WorkerPool, compile_program, jit, split_range
from fusecc.runtime.cpu.executor import MIN_PARALLEL_WORK, aligned_empty
from fusecc.runtime.reference import InterpreterError


@pytest.mark.parametrize("extent,parts", [(10, 3), (7, 2), (2, 8), (1, 4), (0, 2), (1000, 7)])
def test_split_range_covers_the_extent_in_near_equal_pieces(extent, parts):
    pieces = split_range(extent, parts)
    assert pieces[0][0] == 0 and pieces[-1][1] == extent
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
    sizes = [e - b for b, e in pieces]
    assert len(pieces) == max(1, min(parts, extent))
    assert max(sizes) - min(sizes) <= 1


def test_pool_runs_every_piece_once_on_several_threads():
    pool = WorkerPool(4)
    seen, threads, lock = [], set(), threading.Lock()
    barrier = threading.Barrier(4, timeout=10)

    def work(tag, begin, end):
        barrier.wait()  # all four pieces must be running at once
        with lock:
            seen.append((tag, begin, end))
            threads.add(threading.get_ident())

    pool.run(work, ["t"], 10, MIN_PARALLEL_WORK)
    assert sorted(seen) == [("t", 0, 2), ("t", 2, 5), ("t", 5, 7), ("t", 7, 10)]
    assert len(threads) == 4


def test_small_launches_stay_on_the_calling_thread():
    pool = WorkerPool(4)
    assert pool.pieces(100, 1) == [(0, 100)]
    assert pool.pieces(3, MIN_PARALLEL_WORK) == [(0, 1), (1, 2), (2, 3)]


def test_pool_reraises_a_failure_in_a_piece():
    def fail(begin, end):
        if begin > 0:
            raise ValueError("piece failed")

    with pytest.raises(ValueError, match="piece failed"):
        WorkerPool(2).run(fail, [], 4, MIN_PARALLEL_WORK)


def rows_kernel(rows: int, cols: int):
    t = memref(rows, cols, f32)
    w = Writer()
    with w.kernel("plus_row", [t, t]) as (x, out):
        with w.parallel([rows], ["worker"]) as (r,):
            with w.parallel([cols], ["vector"]) as (c,):
                w.store(w.add(w.load(x, r, c), w.cast(w.cast(r, i32), f32)), out, r, c)
    s = ScheduleWriter([("x", t)], [("out", t)])
    s.launch(w.ops[-1], *s.op.body.args)
    return w.module(s.finish())


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_kernel_on_sub_ranges_and_uneven_splits(threads):
    program = CompiledProgram(rows_kernel(5, 24), pool=WorkerPool(threads))
    x = np.zeros((5, 24), np.float32)
    out = aligned_empty(x.nbytes).view(np.float32).reshape(5, 24)
    out[:] = -1
    program.launch("plus_row", [x, out], begin=1, end=4)  # rows 1..3 only
    np.testing.assert_array_equal(out[1:4], np.repeat(np.arange(1, 4, dtype=np.float32)[:, None], 24, 1))
    assert (out[0] == -1).all() and (out[4] == -1).all()
    profile = []
    (whole,) = program.run([x], profile=profile)
    np.testing.assert_array_equal(whole, np.repeat(np.arange(5, dtype=np.float32)[:, None], 24, 1))
    assert [name for name, _ in profile] == ["plus_row"] and profile[0][1] > 0


def test_kernel_arguments_are_checked():
    program = compile_program(rows_kernel(5, 24))
    x = np.zeros((5, 24), np.float32)
    misaligned = aligned_empty(x.nbytes + 4)[4:].view(np.float32).reshape(5, 24)
    with pytest.raises(InterpreterError, match="64-byte aligned"):
        program.launch("plus_row", [x, misaligned])
    with pytest.raises(InterpreterError, match="contiguous"):
        program.launch("plus_row", [x, np.zeros((5, 12), np.float32)])
    with pytest.raises(InterpreterError, match="has shape"):
        program.run([np.zeros((4, 24), np.float32)])


def test_object_files_are_cached_on_disk_and_reused(tmp_path, monkeypatch):
    text = compile_program(rows_kernel(3, 16)).llvm.text + "\n; cache test\n"
    monkeypatch.setenv("FUSECC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jit, "_compiled", {})
    first = jit.compile_ir(text, ["plus_row"])
    files = list((tmp_path / "cpu").glob("*/data"))  # one entry: <key>/data + DIGEST
    assert len(files) == 1 and not first.from_disk
    monkeypatch.setattr(jit, "_compiled", {})
    second = jit.compile_ir(text, ["plus_row"])
    assert second.from_disk and second.addresses["plus_row"]
    assert jit.compile_ir(text, ["plus_row"]) is second  # then from memory


def test_bf16_inputs_and_outputs_round_like_the_interpreter(rng):
    from fusecc.compiler.types import bf16
    from fusecc.runtime.loop_interpreter import run_schedule

    t = memref(40, bf16)
    w = Writer()
    with w.kernel("copy", [t, t]) as (x, out):
        with w.parallel([40], ["vector"]) as (i,):
            w.store(w.load(x, i), out, i)
    s = ScheduleWriter([("x", t)], [("y", t)])
    s.launch(w.ops[-1], *s.op.body.args)
    module = w.module(s.finish())
    x = rng.standard_normal(40).astype(np.float32)
    (got,) = compile_program(module).run([x])
    (want,) = run_schedule(module, "main", [x])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


def fusecc(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "fusecc.tools.fusecc", *args], capture_output=True, text=True, input=stdin)


def test_fusecc_emits_llvm_and_runs_loop_level_programs(tmp_path, rng):
    path = tmp_path / "softmax.ir"
    path.write_text(print_op(K.softmax(2, 32, partials=16)))
    emitted = fusecc(str(path), "--emit=llvm")
    assert emitted.returncode == 0, emitted.stderr
    assert 'define void @"softmax"(ptr noalias' in emitted.stdout
    x = rng.standard_normal((2, 32)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    ran = fusecc("run", str(path), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz"))
    assert ran.returncode == 0, ran.stderr
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_allclose(out["result0"], K.reference("softmax", x), rtol=1e-5, atol=1e-7)
    wrong = fusecc("run", str(path), "--inputs", str(tmp_path / "in.npz"), "--target", "reference")
    assert wrong.returncode == 1 and "run loop-level programs with --target cpu" in wrong.stderr
