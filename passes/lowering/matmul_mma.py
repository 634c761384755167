"""Matmul groups on tensor cores: warp-level `nvgpu.mma_sync` tiles.

Chosen by `lower_matmul` (matmul.py) for GPU matmuls whose operands are
both f16 or both bf16 (m16n8k16), or both f32 when TF32 is allowed
(`--allow-tf32`, the group attribute `allow_tf32`; m16n8k8), on sm_80 and
newer; everything else stays on the FMA template. Accumulation is f32, and
the epilogue (bias, activation, residual, cast) is applied to the f32
accumulators before the single store, as in the FMA template.

    loop.parallel [N/BN, M/BM, batch] (block.x, block.y, block.z)
      a_tile = alloc shared [BM, BK + pad] or [BK, BM + pad']  (operand type; as A lies in memory)
      b_tile = alloc shared [BN, BK + pad] or [BK, BN + pad']
      loop.parallel [32 · WARPS_M · WARPS_N] (thread.x)
        warp (wm, wn) owns a WM×WN = (BM/WARPS_M)×(BN/WARPS_N) block of the output,
        FM×FN instruction tiles of 16×8, 4 f32 accumulators each per lane
        acc = loop.for k0 in 0..K step BK
          a_tile, b_tile <- A[rows, k0:k0+BK], B[k0:k0+BK, cols]   (all threads, guarded: 0 outside)
          loop.for kk in 0..BK step K_MMA (unrolled)
            a_i = a_tile[fragment rows, kk + fragment cols]  for each of FM tiles (PTX table)
            b_j = b_tile[fragment cols, kk + fragment rows]  for each of FN tiles
            acc_ij = nvgpu.mma_sync(a_i, b_j, acc_ij)
        epilogue(acc) -> store at the C fragment's (row, col), guarded at the edges

Each tile keeps its operand's memory order, so that the staging stores of
a warp are contiguous like its global loads: k contiguous (`TileLayout`
K_CONTIGUOUS: A row-major, B transposed) or k-major (A transposed, B
row-major). The rows are padded so that a warp's fragment reads (8 groups
× 4 positions) fall into distinct banks: by 16 bytes when k is contiguous
(group g's row starts 4g+ banks on), by 8 elements when k-major (the
positions' rows start 8 banks apart). The zero padding of the guarded
staging makes ragged M, N and K exact (a product with 0 adds nothing). Which element a lane holds is
`dialects/nvgpu.py`'s fragment table, read here as an affine function of the
lane's group (lane / 4) and position in it (lane % 4).

Concatenated operands are cut into spans as in the FMA template
(`piece_bounds`, `in_span`), so each span's loops read one piece directly.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusecc.compiler.ir import Value
from fusecc.compiler.types import MemRefType, ScalarType, bf16, f16, f32
from fusecc.dialects import arith
from fusecc.dialects.fusion import GroupOp
from fusecc.dialects.loop import GPU_BLOCK
from fusecc.dialects.nvgpu import FRAGMENTS, WARP, Fragments, MmaSyncOp
from fusecc.passes.backends.hardware import Hardware
from fusecc.passes.lowering.epilogue import Epilogue
from fusecc.passes.lowering.interface import Launch, LoweredGroup
from fusecc.passes.lowering.kernel_writer import KernelWriter
from fusecc.passes.lowering.scalar_emitter import LoweringError
from fusecc.passes.lowering.spans import in_span, spans, total_tiles
from fusecc.passes.tiling.contraction_shapes import BASE_REGISTERS, KernelResources, resource_problem

# sm_80 (A100) brought bf16 and tf32 mma.sync with f32 accumulators.
MIN_SM = 80
ALLOW_TF32 = "allow_tf32"  # the group attribute `lower-to-loops{allow-tf32=true}` sets on matmul groups
KIND_OF_ELEMENT = {f16: "f16", bf16: "bf16"}
BLOCK_K = 32
K_CONTIGUOUS_PAD_BYTES = 16  # rows [BK + 4 words]: group g's row starts 4g (mod 32) banks on
K_MAJOR_PAD_ELEMENTS = 8  # rows [X + 8]: the k rows a warp's positions read start 8 banks apart
MAX_GRID_YZ = 65535


@dataclass(frozen=True)
class MmaTiles:
    """A block's BM×BN output tile, shared by WARPS_M×WARPS_N warps."""

    block_m: int
    block_n: int
    warps_m: int
    warps_n: int
    block_k: int = BLOCK_K

    @property
    def threads(self) -> int:
        return WARP * self.warps_m * self.warps_n

    @property
    def warp_m(self) -> int:
        return self.block_m // self.warps_m

    @property
    def warp_n(self) -> int:
        return self.block_n // self.warps_n


# Fullest first; each has 4 or 8 warps (one or two per SM scheduler).
MMA_TILES = (
    MmaTiles(128, 128, 2, 4),  # warp 64×32: 4×4 instructions, 64 accumulators per lane
    MmaTiles(128, 64, 2, 2),  # 64×32
    MmaTiles(64, 64, 2, 2),  # 32×32: 2×4
    MmaTiles(32, 32, 2, 2),  # 16×16: 1×2
)


def sm_version(hardware: Hardware) -> int:
    arch = hardware.arch
    return int(arch[3:]) if arch.startswith("sm_") and arch[3:].isdigit() else 0


def mma_kind(group: GroupOp, problem, hardware: Hardware) -> str | None:
    """The `nvgpu.mma_sync` kind this matmul group runs on, or None (the FMA
    template): f16 or bf16 operands of one type, or f32 ones where the group
    allows TF32, on sm_80+, accumulating in f32."""
    if not hardware.is_gpu or sm_version(hardware) < MIN_SM:
        return None
    a, b = problem.lhs.type.element_type, problem.rhs.type.element_type
    if a is not b or problem.accumulator is not f32:
        return None
    if a in KIND_OF_ELEMENT:
        return KIND_OF_ELEMENT[a]
    if a is f32 and group.attributes.get(ALLOW_TF32) is not None and group.attr(ALLOW_TF32):
        return "tf32"
    return None


def choose_mma_tiles(problem, hardware: Hardware) -> MmaTiles:
    """The fullest tile that still gives every SM a block, else the smallest."""
    for tiles in MMA_TILES:
        blocks = -(-problem.m // tiles.block_m) * -(-problem.n // tiles.block_n) * problem.batch_size
        if blocks >= hardware.sm_count:
            return tiles
    return MMA_TILES[-1]


@dataclass(frozen=True)
class TileLayout:
    """How one operand's BK-deep slice of X rows (A: M, B: N) sits in shared memory."""

    k_contiguous: bool  # [X][BK + pad] (k fastest, as the operand has it in memory) or [BK][X + pad]
    extent: int  # X
    block_k: int
    element_bytes: int

    @property
    def shape(self) -> list[int]:
        if self.k_contiguous:
            return [self.extent, self.block_k + K_CONTIGUOUS_PAD_BYTES // self.element_bytes]
        return [self.block_k, self.extent + K_MAJOR_PAD_ELEMENTS]

    def index(self, x: Value, k: Value) -> list[Value]:
        return [x, k] if self.k_contiguous else [k, x]

    @property
    def bytes(self) -> int:
        return self.shape[0] * self.shape[1] * self.element_bytes


def mma_resources(tiles: MmaTiles, kind: str, k_contiguous: tuple[bool, bool] | None = None) -> KernelResources:
    """Registers: the accumulators, one k-step's A and B fragments (packed
    two to a register for f16/bf16), the base. Shared memory: the two padded
    tiles in the operand type, laid out as `k_contiguous` says for A and B
    (None: whichever layout is larger)."""
    f = FRAGMENTS[kind]
    fm, fn = tiles.warp_m // f.m, tiles.warp_n // f.n
    element_bytes = 4 if kind == "tf32" else 2
    registers = fm * fn * f.c_count + (fm * f.a_count + fn * f.b_count) * element_bytes // 4 + BASE_REGISTERS
    shared = 0
    for position, extent in enumerate((tiles.block_m, tiles.block_n)):
        layouts = (True, False) if k_contiguous is None else (k_contiguous[position],)
        shared += max(TileLayout(c, extent, tiles.block_k, element_bytes).bytes for c in layouts)
    return KernelResources(tiles.threads, registers, shared)


def k_is_contiguous(problem, is_rhs: bool) -> bool:
    """Is k the operand's fastest axis in memory (A row-major, B transposed)?"""
    return problem.op.attr("transpose_b" if is_rhs else "transpose_a") == is_rhs


def affine(table, count: int) -> list[tuple[tuple[int, int, int], tuple[int, int, int]]]:
    """Each fragment element's (row, col) as (constant, ·group, ·position) coefficients:
    the PTX tables are affine in groupID = lane / 4 and threadID_in_group = lane % 4."""
    out = []
    for i in range(count):
        base, by_group, by_position = table(0, i), table(4, i), table(1, i)
        out.append(tuple((base[d], by_group[d] - base[d], by_position[d] - base[d]) for d in range(2)))
    for lane in range(WARP):  # the assumption, checked for every lane
        for i, coeffs in enumerate(out):
            expect = tuple(c + (lane >> 2) * g + (lane % 4) * p for c, g, p in coeffs)
            if expect != tuple(table(lane, i)):
                raise LoweringError(f"fragment element {i} of lane {lane} is not affine in the lane's group and position")
    return out


class Lane:
    """A thread's place in its warp for the fragment tables: its group
    (lane / 4) and position in it (lane % 4), and the (row, col) an `affine`
    coefficient triple gives from a tile origin."""

    def __init__(self, w: KernelWriter, t: Value):
        im = self.im = w.im
        self.warp, lane = im.div(t, WARP), im.rem(t, WARP)
        self.group, self.position = im.div(lane, 4), im.rem(lane, 4)

    def at(self, coeffs, origin: Value) -> Value:
        im = self.im
        constant, by_group, by_position = coeffs
        v = im.add(origin, im.const(constant))
        if by_group:
            v = im.add(v, im.mul(self.group, im.const(by_group)))
        if by_position:
            v = im.add(v, im.mul(self.position, im.const(by_position)))
        return v


def mma_sync(w: KernelWriter, kind: str, a, b, c) -> list[Value]:
    """One warp's instruction: D fragment from this lane's A, B and C."""
    f = FRAGMENTS[kind]
    return list(w.b.create(MmaSyncOp, [*a, *b, *c], {"kind": kind}, result_types=[f32] * f.c_count).results)


def lower_matmul_mma(group: GroupOp, problem, kind: str, hardware: Hardware) -> LoweredGroup:
    f: Fragments = FRAGMENTS[kind]
    tiles = choose_mma_tiles(problem, hardware)
    k_contiguous = (k_is_contiguous(problem, False), k_is_contiguous(problem, True))
    refused = resource_problem(mma_resources(tiles, kind, k_contiguous), hardware, "tensor-core matmul")
    if refused is not None:
        raise LoweringError(refused)
    element: ScalarType = f32 if kind == "tf32" else problem.lhs.type.element_type
    w = KernelWriter(group, hardware)
    epilogue = Epilogue(group, problem.result, w.outputs, "matmul")
    im = w.im
    bm, bn, bk = tiles.block_m, tiles.block_n, tiles.block_k
    fm, fn = tiles.warp_m // f.m, tiles.warp_n // f.n
    a_layout, b_layout = (TileLayout(c, x, bk, element.byte_size) for c, x in zip(k_contiguous, (bm, bn)))
    bounds = problem.piece_bounds()
    m_spans, n_spans, k_spans = spans(bounds["m"], bm), spans(bounds["n"], bn), spans(bounds["k"], bk)
    grid = [total_tiles(n_spans), total_tiles(m_spans)] + ([problem.batch_size] if problem.batch_size > 1 else [])
    if any(g > MAX_GRID_YZ for g in grid[1:]):
        raise LoweringError(f"matmul grid {grid} exceeds {MAX_GRID_YZ} blocks in y or z")
    a_at, b_at = affine(f.a, f.a_count), affine(f.b, f.b_count)
    c_at = affine(f.c, f.c_count)

    def block(col_block: Value, row_block: Value, batch: Value | None = None) -> None:
        a_tile = w.alloc(MemRefType(a_layout.shape, element, "shared"), "a_tile")
        b_tile = w.alloc(MemRefType(b_layout.shape, element, "shared"), "b_tile")
        bidx = problem.batch_index(batch if batch is not None else im.const(0), im)

        def output_tile(ms, local_row: Value, ns, local_col: Value) -> None:
            row0 = im.add(im.mul(local_row, im.const(bm)), im.const(ms.start))
            col0 = im.add(im.mul(local_col, im.const(bn)), im.const(ns.start))
            w.parallel([tiles.threads], ["thread.x"], lambda t: thread(t, ms, row0, ns, col0), ["t"])

        def thread(t: Value, ms, row0: Value, ns, col0: Value) -> None:
            lane = Lane(w, t)
            at = lane.at
            warp_row = im.mul(im.div(lane.warp, tiles.warps_n), im.const(tiles.warp_m))
            warp_col = im.mul(im.rem(lane.warp, tiles.warps_n), im.const(tiles.warp_n))

            def stage(tile: Value, layout: TileLayout, operand: Value, is_rhs: bool, k0: Value, ks) -> None:
                # The block's BK-deep slice of an operand, spread over the threads
                # in the operand's memory order (coalesced), stored in that order too.
                extent, span, origin = (bn, ns, col0) if is_rhs else (bm, ms, row0)
                k_fastest = layout.k_contiguous
                for point, inside in w.cooperative(t, tiles.threads, [extent, bk] if k_fastest else [bk, extent]):
                    r, c = point if k_fastest else point[::-1]
                    row, k = im.add(origin, r), im.add(k0, c)
                    guard = w.all_of(inside, span.guard(w, row, extent), ks.guard(w, k, bk))
                    idx = problem.b_index(bidx, k, row, im) if is_rhs else problem.a_index(bidx, row, k, im)
                    value = w.value_at(operand, idx, guard)
                    widened = value.defining_op
                    if isinstance(widened, arith.CastOp) and widened.input.type is element:
                        value = widened.input  # an f16/bf16 element goes to the tile as loaded, not through f32 and back
                    w.store(value, tile, layout.index(r, c), inside)

            def k_slice(kk: Value, *acc: Value) -> list[Value]:
                a = [[w.load(a_tile, a_layout.index(at(rc[0], im.add(warp_row, im.const(i * f.m))), at(rc[1], kk))) for rc in a_at] for i in range(fm)]
                # B's fragment rows are k, its columns n
                b = [[w.load(b_tile, b_layout.index(at(rc[1], im.add(warp_col, im.const(j * f.n))), at(rc[0], kk))) for rc in b_at] for j in range(fn)]
                out: list[Value] = []
                for i in range(fm):
                    for j in range(fn):
                        c = list(acc[(i * fn + j) * f.c_count : (i * fn + j + 1) * f.c_count])
                        out += mma_sync(w, kind, a[i], b[j], c)
                return out

            def k_step(ks, k0: Value, *acc: Value) -> list[Value]:
                stage(a_tile, a_layout, problem.lhs, False, k0, ks)
                stage(b_tile, b_layout, problem.rhs, True, k0, ks)
                return w.named_loop(w.for_(0, bk, f.k, k_slice, acc, "kk", unroll=bk // f.k), "acc")

            acc = [w.s.const(0, f32)] * (fm * fn * f.c_count)
            for ks in k_spans:
                acc = w.named_loop(w.for_(ks.start, ks.end, bk, lambda k0, *a, ks=ks: k_step(ks, k0, *a), acc, "k0"), "acc")
            for i in range(fm):
                for j in range(fn):
                    for e, rc in enumerate(c_at):
                        m = at(rc[0], im.add(row0, im.add(warp_row, im.const(i * f.m))))
                        n = at(rc[1], im.add(col0, im.add(warp_col, im.const(j * f.n))))
                        guard = w.all_of(ms.guard(w, m, bm), ns.guard(w, n, bn))
                        epilogue.emit(w.emitter, problem.result_index(bidx, m, n), acc[(i * fn + j) * f.c_count + e], guard)

        in_span(w, n_spans, col_block, lambda ns, local_col: in_span(w, m_spans, row_block, lambda ms, local_row: output_tile(ms, local_row, ns, local_col)))

    w.outer(grid, GPU_BLOCK[: len(grid)], block, ["col_block", "row_block", "batch"])
    return LoweredGroup([Launch(w.finish(), w.arg_refs)])


__all__ = ["ALLOW_TF32", "MMA_TILES", "Lane", "MmaTiles", "TileLayout", "affine", "mma_sync", "choose_mma_tiles", "lower_matmul_mma", "mma_kind", "mma_resources"]
