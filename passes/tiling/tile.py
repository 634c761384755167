"""Tile choices per fusion group and target: the `tiled` level.

`choose_tiles(group, hardware, overrides) -> TileConfig` is the one place
that decides how a group's work is cut into GPU blocks/threads or CPU
worker iterations, and estimates what that costs in registers and shared
memory; the `tile` pass writes its choice on each group as discardable
attributes, and the kernel templates read them back (`tile_config`):

  attribute             kinds                  meaning
  tile.threads          all (GPU)              threads per block (a multiple of the warp size)
  tile.block            elementwise/injective  GPU: elements per block (threads x elements per
                                               thread); CPU: the vector chunk of the last axis
                                               one worker iteration computes
                        matmul                 [BM, BN]: the output tile of one block
                        attention              [BQ, BKV]: query rows per block, keys per step
  tile.k                matmul                 BK: the contraction step
  tile.rows_per_block   reduction/opaque       rows one block reduces; threads per row =
                                               threads / rows_per_block (a power of two)
  tile.split            reduction/opaque       chunks per row; > 1 splits each row over that
                                               many blocks (workers), one kernel per stat level
                                               plus one, through a scratch buffer
  tile.registers        all                    estimated registers per thread (GPU)
  tile.shared_memory    all                    estimated shared memory per block, bytes

A group without attributes is tiled on the fly by the lowering. Options of
the pass (`tile{target=h200 block=128x64 k=32 threads=256 split=4}`)
override the choice for every group they apply to (`block` applies to the
kinds whose block has as many entries); a choice that breaks the
hardware's limits is an error located at the group.

The choices themselves are the tiling level's: `geometry.choose_geometry`
(matmul and attention tiles from `matmul_tiles.py`, `attention_tiles.py`, which the templates
use too), and the register and shared-memory estimates of every kind
`resources.kernel_resources`, which the fusion cost model uses for the
candidate groups it judges: `tile.registers` is the number the cost model
compared with the hardware's limit. This module is the pass: it reads and
writes the `tile.*` attributes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fusecc.compiler import attributes as A
from fusecc.compiler.dims import hinted_shape
from fusecc.compiler.diagnostics import error
from fusecc.compiler.ir import Operation
from fusecc.compiler.types import TensorType
from fusecc.compiler.pass_manager import Pass, PassContext
from fusecc.dialects.fusion import GroupOp
from fusecc.passes.backends.hardware import Hardware, pass_hardware
from fusecc.passes.tiling.geometry import BLOCK, K, ROWS_PER_BLOCK, SPLIT, THREADS, TILE_ATTRIBUTES, Overrides, TileConfig, choose_geometry, limit_problem
from fusecc.passes.tiling.resources import kernel_resources


def read_attributes(group: Operation) -> Overrides:
    """Tile attributes already on a group (written by `tile` or by hand)."""
    attrs = group.attributes

    def integer(name):
        a = attrs.get(name)
        return a.value if isinstance(a, A.IntegerAttr) else None

    block = attrs.get(BLOCK)
    return Overrides(
        threads=integer(THREADS),
        block=tuple(block.value) if isinstance(block, A.ArrayAttr) else None,
        k=integer(K),
        rows_per_block=integer(ROWS_PER_BLOCK),
        split=integer(SPLIT),
    )


def tile_config(group: GroupOp, hw: Hardware) -> TileConfig:
    """The group's tiles: its attributes where present, the tiler's choice elsewhere."""
    return choose_tiles(group, hw, read_attributes(group))


# --------------------------------------------------------------------------- choices per kind


def choose_tiles(group: GroupOp, hw: Hardware, overrides: Overrides | None = None) -> TileConfig:
    """The tiles of `group` on `hw`, with their register and shared-memory
    estimates. Sizes the user forced (`overrides`) that break the hardware's
    limits are an error at the group; the tiler's own choices fit (ask
    `limit_problem(hw, config)` to judge a config)."""
    # The estimates are the tiling level's (`resources.kernel_resources`),
    # which the fusion cost model uses for candidate groups too: one
    # estimate for the fusion decisions and the tiles.
    overrides = overrides or Overrides()
    if any(not v.type.is_static for v in _tensor_values(group)):
        hinted = hinted_copy(group)
        try:
            return choose_tiles(hinted, hw, overrides)
        finally:
            hinted.erase()
    kind = group.attr("kind")
    outputs = group.yield_op.operands
    config = choose_geometry(kind, group.body_ops(), [v.type.shape for v in outputs], hw, overrides)
    registers, shared = kernel_resources(group, hw, config)
    config = replace(config, registers_per_thread=registers, shared_memory_bytes=shared)
    if overrides != Overrides():
        check_limits(group, hw, config)
    return config


def _tensor_values(group: Operation):
    for op in group.walk():
        for v in list(op.results) + [a for r in op.regions for b in r.blocks for a in b.args]:
            if isinstance(v.type, TensorType):
                yield v


def hinted_copy(group: GroupOp) -> GroupOp:
    """A detached copy of `group` whose `?` dims are at their --shape-hint
    sizes: tiles are chosen without the sizes (the kernels take them at run
    time, docs/dynamic-shapes.md), for the sizes the user expects."""
    copy = group.clone()
    for v in _tensor_values(copy):
        if not v.type.is_static:
            v.type = v.type.with_shape(hinted_shape(v.type.shape))
    return copy


# --------------------------------------------------------------------------- limits


def check_limits(group: Operation, hw: Hardware, config: TileConfig) -> None:
    problem = limit_problem(hw, config)
    if problem:
        gid = group.attr("id")
        name = f"group {gid}" if gid is not None else "group"
        raise error(group.location, f"tile choice for {name} ({group.attr('kind')}) {problem}")


# --------------------------------------------------------------------------- the pass


def parse_block(text: str) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        dims = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"block '{text}' is not like 128x64") from None
    return dims


@dataclass(frozen=True)
class Tile(Pass):
    """Chooses tile sizes for every fusion group (`tile.*` attributes)."""

    name = "tile"
    summary = "Choose tile sizes per fusion group and target (tile.* attributes)"
    anchor = "builtin.module"

    target: str = ""  # the hardware to tile for; "" takes the context's
    block: str = ""
    k: int = 0
    threads: int = 0
    rows_per_block: int = 0
    split: int = 0

    def run(self, op: Operation, context: PassContext) -> None:
        hw = pass_hardware(self, op, context)
        try:
            forced = Overrides(self.threads or None, parse_block(self.block), self.k or None, self.rows_per_block or None, self.split or None)
        except ValueError as exc:
            raise error(op.location, f"tile: {exc}") from None
        for group in op.walk():
            if not isinstance(group, GroupOp):
                continue
            own = read_attributes(group)
            merged = Overrides(*(f if f is not None else g for f, g in zip(_fields(forced), _fields(own))))
            config = choose_tiles(group, hw, merged)
            for name in TILE_ATTRIBUTES:
                group.attributes.pop(name, None)
            group.attributes.update(config.attributes())


def _fields(o: Overrides):
    return (o.threads, o.block, o.k, o.rows_per_block, o.split)


__all__ = [
    "Overrides",  # with TileConfig and limit_problem, the geometry's (tests ask here)
    "Tile",
    "TileConfig",
    "check_limits",
    "choose_tiles",
    "limit_problem",
    "parse_block",
    "read_attributes",
    "tile_config",
]
