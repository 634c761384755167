"""What each GPU template launches and does, for the cost model
(`gpu_time.py` turns it into seconds).

From the tiles the tiler chooses (`tiling/geometry.py`,
`tiling/matmul_tiles.py`, `tiling/attention_tiles.py`), per kernel kind:

* blocks and threads: the grid of the template (lowering/*.py);
* global bytes each thread has in flight: what it loads before it first
  uses any of it (a staged tile, an unrolled elementwise body);
* warp-level shared-memory instructions and their wavefronts, counted
  from the template's loops (the instructions take issue slots from the
  FMAs, the wavefronts the shared memory's clocks):
  - matmul, per block (`shared_traffic_per_block`): per BK step each
    warp loads its TM + TN fragment values per k in vectors of up to four,
    each load costing the wavefronts of its distinct words (one up to 32
    words, two for the 64 of 16 lanes' float4s), and stores its share of
    the BM×BK and BK×BN tiles; the first stage before the loop and the
    output tile through shared memory add theirs; split-K blocks take
    their range of K, and a second launch adds the ranges (`split_k_bytes`);
  - attention, per block and BT-key step: each warp's loads are
    `attention_tiles.attention_shared_requests` (float4 vectors, R ≥ 2 rows
    per thread share each key and value vector: one wavefront each, the
    tiles padded so), and it stores its probabilities and its share of the
    K and V tiles (cp.async on sm_80+, double-buffered: two tiles in flight
    per thread, the first staged before the loop); causal attention visits on average (S + BQ) / 2 keys of T;
    split-KV blocks visit their range of keys, and a second launch
    combines them (the partial results' traffic is `split_kv_bytes`);
  - elementwise and row kernels: none worth counting (a row kernel's
    cross-warp partials are a few words per row);
  - matmuls and attention on tensor cores (lowering/matmul_mma.py,
    attention_mma.py): not modelled yet, neither their fragment loads nor
    their own tiles (the FMA template's grid stands in for theirs): they
    are timed by their tensor-core flops and their bytes.
  The templates' padded tiles are conflict-free by design, so a request
  costs the wavefronts of its distinct words unless measured ways (`fusecc
  report --counters`) say otherwise; the counters' wavefronts per block
  match these counts (tests/runtime/cuda/test_counters_pinned.py).
"""

from __future__ import annotations

import math

from fusecc.compiler.traits import Contraction
from fusecc.passes.backends.hardware import Hardware
from fusecc.passes.fusion.gpu_time import GpuLaunch
from fusecc.passes.tiling.attention_tiles import AttentionTiles, attention_shared_requests, attention_stages, key_tiles_per_split
from fusecc.passes.tiling.contraction_shapes import AttentionShape, MatmulShape
from fusecc.passes.tiling.gpu_matmul_tiles import GpuMatmulTiles, choose_gpu_matmul_tiles, gpu_matmul_stages, shared_traffic_per_block
from fusecc.passes.tiling.geometry import TileConfig, elements_per_thread
from fusecc.passes.tiling.resources import KernelBody
from fusecc.passes.tiling.shapes import ceil_div

WORD = 4  # bytes: tiles are staged in f32
UNROLLED_LOADS = 8  # independent loads a thread of a row kernel keeps in flight


def _contraction(body: KernelBody, name: str | None):
    return next((op for op in body.ops if (op.name == name if name else op.has_trait(Contraction))), None)


def _largest_output(body: KernelBody) -> int:
    return max((v.type.num_elements for v in body.outputs if hasattr(v.type, "num_elements")), default=1)


def gpu_launch_and_shared(
    body: KernelBody, kind: str, tiles: TileConfig, registers: int, shared_bytes: int, row_shape: tuple[int, int] | None, hardware: Hardware, on_tensor_cores: bool = False
) -> tuple[GpuLaunch, float, float]:
    """(the launch, its shared-memory wavefronts, its warp-level shared-memory
    instructions) of the kernel that lowers `body` as a `kind` group with
    `tiles` (`row_shape`: a row kernel's rows and row length)."""
    threads = max(1, tiles.threads)
    warps = math.ceil(threads / hardware.warp_size)
    inputs = max(1, len(body.inputs))
    if kind == "matmul" and (op := _contraction(body, None)) is not None and len(tiles.block) == 2:
        problem = MatmulShape.of_op(op, inside=body.members)
        bm, bn = tiles.block
        bk = max(1, tiles.k)
        split_k = 1 if on_tensor_cores else matmul_split_k(problem, tiles, hardware)
        blocks = problem.batch_size * ceil_div(problem.m, bm) * ceil_div(problem.n, bn) * split_k
        chosen = GpuMatmulTiles(bm, bn, bk, threads, gpu_matmul_stages(hardware), split_k)
        instructions, wavefronts = (0, 0) if on_tensor_cores else shared_traffic_per_block(chosen, problem.k, hardware.warp_size)
        in_flight = (bm + bn) * bk * WORD / threads
        return GpuLaunch(blocks, threads, registers, shared_bytes, in_flight, 1 if split_k == 1 else 2), blocks * wavefronts, blocks * instructions
    if kind == "attention" and (op := _contraction(body, "tensor.attention")) is not None and len(tiles.block) == 2:
        problem = AttentionShape.of_op(op)
        attention = AttentionTiles(*tiles.block, threads, max(1, tiles.split))
        bq, bt = tiles.block
        blocks = problem.batch_size * ceil_div(problem.s, bq) * attention.splits
        keys = key_tiles_per_split(problem, attention) * bt
        if problem.causal:
            keys = min(keys, (problem.s + bq) / 2)
        loads, _ = attention_shared_requests(attention, problem)
        staging = ceil_div(bt * (problem.d + problem.dv), threads)
        stores = attention.rows_per_thread * ceil_div(bt, attention.threads_per_row) + staging
        stages = attention_stages(attention, problem, hardware)
        # double-buffered: the first K/V tile is staged before the loop (the one past the last is guarded off)
        prologue = staging if stages > 1 else 0
        requests = 0.0 if on_tensor_cores else blocks * warps * (math.ceil(keys / bt) * (loads + stores) + prologue + ceil_div(bq * problem.d, threads))
        # double-buffered (cp.async, sm_80+): the next key tile is issued before this one is used
        in_flight = stages * bt * (problem.d + problem.dv) * WORD / threads
        launches = 1 if attention.splits == 1 else 2
        return GpuLaunch(blocks, threads, registers, shared_bytes, in_flight, launches), requests, requests  # one wavefront each
    if row_shape is not None and kind == "reduction":
        rows, length = row_shape
        split = max(1, tiles.split)
        blocks = ceil_div(rows, max(1, tiles.rows_per_block)) * split
        # Each thread loads its elements of a row in a loop of constant trip
        # count, which the compiler unrolls (up to UNROLLED_LOADS at once).
        per_thread = min(UNROLLED_LOADS, ceil_div(length, split * max(1, tiles.threads_per_row)))
        return GpuLaunch(blocks, threads, registers, shared_bytes, WORD * inputs * per_thread), 0.0, 0.0
    per_thread = elements_per_thread(tiles, hardware)
    blocks = ceil_div(_largest_output(body), threads * per_thread)
    return GpuLaunch(blocks, threads, registers, shared_bytes, WORD * inputs * per_thread), 0.0, 0.0


def matmul_split_k(problem: MatmulShape, tiles: TileConfig, hardware: Hardware) -> int:
    """The K ranges the FMA matmul template sums separately (split-K:
    `gpu_matmul_tiles.choose_gpu_matmul_tiles`, which the lowering asks too)."""
    return choose_gpu_matmul_tiles(problem, hardware, tuple(tiles.block), tiles.k or None, tiles.threads).split_k


def split_k_bytes(body: KernelBody, tiles: TileConfig, hardware: Hardware) -> float:
    """The partial sums of split-K: each K range's output, which the partial
    kernel writes and the reducing one reads back (`GpuWork.partial_bytes`;
    0 without split-K)."""
    op = _contraction(body, None)
    if op is None or op.name != "tensor.matmul" or len(tiles.block) != 2:
        return 0.0
    problem = MatmulShape.of_op(op, inside=body.members)
    split_k = matmul_split_k(problem, tiles, hardware)
    return 0.0 if split_k == 1 else float(split_k * problem.batch_size * problem.m * problem.n * WORD)


def split_kv_bytes(body: KernelBody, tiles: TileConfig) -> float:
    """The partial results of split-KV: each split's row max, row sum and
    unnormalised output, which the partial kernel writes and the combining
    one reads back (`GpuWork.partial_bytes`; 0 without split-KV)."""
    op = _contraction(body, "tensor.attention")
    if op is None or tiles.split <= 1:
        return 0.0
    problem = AttentionShape.of_op(op)
    return float(tiles.split * problem.batch_size * problem.s * (problem.dv + 2) * WORD)
