"""Ranges of concatenated pieces along an axis of a contraction.

Sibling matmuls merged on concatenated weights and biases read, along N
(or K, M), one piece per range of the axis. Tiling each range on its own
(`spans`) keeps every tile inside one piece, so a uniform branch per block
(`in_span`) picks the piece once and the inner loops read its buffer
directly. matmul.py explains the scheme; the FMA and tensor-core matmul
templates both use it.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusecc.compiler.ir import Value
from fusecc.passes.lowering.kernel_builder import Part, ceil_div, dispatch


@dataclass(frozen=True)
class Span:
    """A range [start, end) of one axis of the product in which every
    concatenated operand reads one piece, and where its tiles are among the
    axis' tiles: tiles never straddle two spans, so the piece is chosen once
    per tile (a uniform branch) and the inner loops read its buffer directly."""

    start: int
    end: int
    first_tile: int
    tiles: int

    @property
    def width(self) -> int:
        return self.end - self.start

    def guard(self, w, i: Value, tile: int) -> Value | None:
        """`i < end` for an index of this span's tiles, or None where its
        tiles divide it; records the range [start, end) of `i`. An empty
        span has no tile but is guarded all the same (always false): a
        prologue that stages its first tile must not read (seed 5120)."""
        w.im.assume(i, self.start, self.end)
        return w.below(i, self.end, self.width % tile != 0 or self.width == 0)


def spans(bounds: tuple[int, ...], tile: int) -> list[Span]:
    """The spans between consecutive `bounds`, each cut into tiles of `tile`.
    An empty piece (a concatenated 8x0 operand) makes no span: it has no
    tile to read. An empty axis keeps one empty span, so that `in_span`
    still has a body to dispatch to (its zero tiles are never reached)."""
    out, first = [], 0
    for start, end in zip(bounds, bounds[1:]):
        if end == start and (out or end != bounds[-1]):
            continue
        out.append(Span(start, end, first, ceil_div(end - start, tile)))
        first += out[-1].tiles
    return out


def total_tiles(axis: list[Span]) -> int:
    return sum(s.tiles for s in axis)


def in_span(w, axis: list[Span], tile_index: Value, body) -> None:
    """`body(span, tile)` for the span owning tile `tile_index` (its index
    within the span): a chain of uniform `loop.if`s on the tile index, one
    specialised copy of `body` per span (no branch for a single span)."""
    dispatch(w, [Part(s.tiles, lambda kb, local, s=s: body(s, local)) for s in axis], tile_index, 0)


__all__ = ["Span", "in_span", "spans", "total_tiles"]
