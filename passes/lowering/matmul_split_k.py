"""Split-K GPU matmuls: where even the smallest tile leaves SMs idle and K is
long (decoding: one row of A against a weight), K is cut into
`tiles.split_k` ranges of whole BK steps, each summed by its own blocks,
and a second kernel adds the partial sums in a fixed order (deterministic:
the same bits on every run, no atomics) and applies the epilogue.

    partial kernel (matmul_gpu.py with `partial`), grid [N/BN, M/BM, batch·splits]:
      block z = split·batch + b sums k in [split·KS, min((split+1)·KS, K))
      -> scratch [splits, batch, M, N] (through the staged output tile: whole sectors)
    reduce kernel, one thread per output element (b, m, n), consecutive threads
    consecutive n: out = epilogue(Σ_z scratch[z, b, m, n]), z = 0, 1, ...
"""

from __future__ import annotations

from fusecc.compiler.ir import Value
from fusecc.compiler.types import MemRefType
from fusecc.dialects.fusion import GroupOp
from fusecc.passes.backends.hardware import Hardware
from fusecc.passes.lowering.epilogue import Epilogue
from fusecc.passes.lowering.interface import Launch, LoweredGroup, kernel_name
from fusecc.passes.lowering.kernel_builder import ceil_div
from fusecc.passes.lowering.kernel_writer import KernelWriter
from fusecc.passes.tiling.gpu_matmul_tiles import GpuMatmulTiles
from fusecc.passes.tiling.resources import kernel_bodies, peak_live_words

REDUCE_THREADS = 256


def partial_type(problem, tiles: GpuMatmulTiles) -> MemRefType:
    """The scratch of the partial sums: [splits, batch, M, N] of the accumulator type."""
    return MemRefType([tiles.split_k, problem.batch_size, problem.m, problem.n], problem.accumulator)


def lower_matmul_split_k(group: GroupOp, problem, tiles: GpuMatmulTiles, hardware: Hardware) -> LoweredGroup:
    from fusecc.passes.lowering.matmul_gpu import lower_matmul_gpu

    scratch = partial_type(problem, tiles)
    lowered = LoweredGroup()
    ref = lowered.add_scratch(scratch)
    partial = lower_matmul_gpu(group, problem, tiles, hardware, partial=scratch)
    lowered.launches.append(Launch(partial.finish(), partial.arg_refs + [ref]))
    reduce = reduce_kernel(group, problem, hardware, scratch)
    lowered.launches.append(Launch(reduce.finish(), reduce.arg_refs + [ref]))
    return lowered


def reduce_kernel(group: GroupOp, problem, hardware: Hardware, scratch: MemRefType) -> KernelWriter:
    w = KernelWriter(group, hardware, name=f"{kernel_name(group)}_reduce", extra_args=[scratch])
    epilogue = Epilogue(group, problem.result, w.outputs, "matmul")
    im, s = w.im, w.s
    (partials,) = w.extra
    splits, batch, m_size, n_size = scratch.shape
    total = batch * m_size * n_size

    def block(b: Value) -> None:
        def thread(t: Value) -> None:
            i = im.add(im.mul(b, im.const(REDUCE_THREADS)), t)
            ok = w.below(i, total, total % REDUCE_THREADS != 0)
            flat, m, n = im.delinearize(i, [batch, m_size, n_size])
            value = w.load(partials, [0, flat, m, n], ok)
            for z in range(1, splits):  # in split order: the same sum on every run
                value = s.add(value, w.load(partials, [z, flat, m, n], ok))
            epilogue.emit(w.emitter, problem.result_index(problem.batch_index(flat, im), m, n), value, ok)

        w.parallel([REDUCE_THREADS], ["thread.x"], thread, ["t"])

    w.outer([ceil_div(total, REDUCE_THREADS)], ["block.x"], block, ["block"])
    ((_, body),) = kernel_bodies(group)
    w.estimate_streaming(live=peak_live_words(body))  # the epilogue's values (the sum among them)
    return w
