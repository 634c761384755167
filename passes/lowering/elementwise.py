"""Elementwise and injective groups: one pass over each output.

Every output element is computed by the scalar emitter from the group's
inputs (broadcasts and layout ops are index arithmetic; intermediates stay
in registers). Outputs of one shape share a part, so shared intermediates
are computed once per element; outputs of different shapes (a group may
yield a value and its broadcast) are separate parts of the same kernel.
All of a part's values at an index are computed before any is stored, so
an output may take the buffer of an input read at the same index.

GPU part (T threads, E = block / T elements per thread, N elements):

    loop.parallel [T] thread.x (%tid):
      loop.for %e = 0 to E {unroll = E}:            // absent when E = 1
        %flat = %block * (T*E) + %e * T + %tid       // coalesced
        loop.if %flat < N:                           // absent when T*E divides N
          %i.. = delinearize(%flat)
          <compute>; loop.store ... (each output at %i..)

CPU part (last axis D, chunk C = tile.block[0], rows = N / D):

    // %unit in [0, rows * ceil(D / C))
    %row, %chunk = delinearize(%unit); %i.. = delinearize(%row)
    loop.parallel [C] vector (%v):
      %j = %chunk * C + %v
      loop.if %j < D:                                // absent when C divides D
        <compute at (%i.., %j)>; loop.store ...
"""

from __future__ import annotations

from typing import Sequence

from fusecc.passes.backends.hardware import Hardware
from fusecc.compiler import dims
from fusecc.compiler.ir import Value

from fusecc.passes.lowering.kernel_builder import KernelBuilder, Part, ceil_div, product, threads
from fusecc.passes.lowering.scalar_emitter import ScalarEmitter
from fusecc.passes.tiling.geometry import TileConfig, elementwise_block

Output = tuple[Value, Value]  # (group value, buffer to store it in)


def compute_and_store(kb: KernelBuilder, em: ScalarEmitter, outputs: Sequence[Output], idx: list[Value], guard: Value | None = None) -> None:
    """All values first, then all stores (in-place safety)."""
    scalars = [em.at(value, idx) for value, _ in outputs]
    for scalar, (_, buffer) in zip(scalars, outputs):
        em.store(scalar, buffer, idx, guard)


def elementwise_parts(kb: KernelBuilder, em: ScalarEmitter, outputs: Sequence[Output], config: TileConfig) -> list[Part]:
    by_shape: dict[tuple[int, ...], list[Output]] = {}
    for value, buffer in outputs:
        by_shape.setdefault(tuple(value.type.shape), []).append((value, buffer))
    return [elementwise_part(kb.hw, em, shape, outs, config) for shape, outs in by_shape.items()]


def elementwise_part(hw: Hardware, em: ScalarEmitter, shape: tuple[int, ...], outputs: Sequence[Output], config: TileConfig) -> Part:
    n = product(shape)
    if hw.is_gpu:
        t = config.threads
        block = config.block[0] if config.block else elementwise_block(hw, shape, t)[1][0]
        per_thread = max(1, block // t)
        span = t * per_thread

        def emit_gpu(kb: KernelBuilder, unit: Value) -> None:
            def thread(tid: Value) -> None:
                base = kb.im.add(kb.im.mul(unit, kb.im.const(span)), tid)

                def element(e: Value | None) -> None:
                    flat = base if e is None else kb.im.add(base, kb.im.mul(e, kb.im.const(t)))
                    kb.named(flat, "flat")
                    store = lambda: compute_and_store(kb, em, outputs, kb.im.delinearize(flat, shape))  # noqa: E731
                    if n % span:
                        kb.if_(kb.lt(flat, n), store)
                    else:
                        store()

                if per_thread == 1:
                    element(None)
                else:
                    kb.for_(0, per_thread, 1, lambda e: element(e), name="e", unroll=per_thread)

            threads(kb, t, thread)

        return Part(ceil_div(n, span), emit_gpu)

    last = shape[-1] if shape else 1
    if not all(type(d) is int for d in shape):
        # `?` dims (docs/dynamic-shapes.md): the chunk was chosen at the
        # --shape-hint sizes; counts are expressions the kernel computes from
        # its arguments' sizes, and a `?` last axis is always guarded.
        rows = product(shape[:-1])
        chunk = config.block[0] if config.block else 16
        chunk = max(1, min(chunk, last)) if type(last) is int else chunk
        chunks = ceil_div(last, chunk) if type(last) is int else dims.sympy().ceiling(last / chunk)
        ragged = type(last) is not int or last % chunk
        return Part(rows * chunks, lambda kb, unit: _emit_cpu(kb, em, outputs, shape, rows, chunk, chunks, ragged, unit))
    rows = n // last if last else 0
    chunk = config.block[0] if config.block else elementwise_block(hw, shape)[1][0]
    chunk = max(1, min(chunk, last))
    chunks = ceil_div(last, chunk)

    def emit_cpu(kb: KernelBuilder, unit: Value) -> None:
        if not shape:
            compute_and_store(kb, em, outputs, [])
            return
        row, part = kb.im.delinearize(unit, [rows, chunks])
        outer = [kb.named(i, f"i{axis}") for axis, i in enumerate(kb.im.delinearize(row, shape[:-1]))]

        def lane(v: Value) -> None:
            j = kb.im.add(kb.im.mul(part, kb.im.const(chunk)), v)
            store = lambda: compute_and_store(kb, em, outputs, outer + [j])  # noqa: E731
            if last % chunk:
                kb.if_(kb.lt(j, last), store)
            else:
                store()

        kb.parallel([chunk], ["vector"], lane, ["v"])

    return Part(rows * chunks if shape else 1, emit_cpu)


def _emit_cpu(kb: KernelBuilder, em: ScalarEmitter, outputs: Sequence[Output], shape, rows, chunk: int, chunks, ragged: bool, unit: Value) -> None:
    """The CPU part's body for shapes with `?` dims (the same loop nest)."""
    row, part = kb.im.delinearize(unit, [rows, chunks])
    outer = [kb.named(i, f"i{axis}") for axis, i in enumerate(kb.im.delinearize(row, shape[:-1]))]

    def lanes(guarded: bool) -> None:
        def lane(v: Value) -> None:
            j = kb.im.add(kb.im.mul(part, kb.im.const(chunk)), v)
            store = lambda: compute_and_store(kb, em, outputs, outer + [j])  # noqa: E731
            if guarded:
                kb.if_(kb.lt(j, shape[-1]), store)
            else:
                store()

        kb.parallel([chunk], ["vector"], lane, ["v"])

    if ragged and type(shape[-1]) is not int:
        # a `?` last axis: whole chunks run unguarded, only the last one checks
        end = kb.im.add(kb.im.mul(part, kb.im.const(chunk)), kb.im.const(chunk))
        kb.if_(kb.cmp("le", end, shape[-1]), lambda: lanes(False), lambda: lanes(True))
    else:
        lanes(ragged)


__all__ = ["Output", "compute_and_store", "elementwise_part", "elementwise_parts"]
