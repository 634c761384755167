"""Op traits: facts about an op that passes read instead of op names.

A trait is a marker class listed in an op's `traits`. The fusion-class
traits (`Elementwise`, `Injective`, `Reduction`, `Contraction`, `Composite`,
`Opaque`) classify every tensor op in the way TVM does, so fusion rules ask
"is the producer injective?" rather than listing op names.
"""

from __future__ import annotations


class Trait:
    """Base marker; traits are never instantiated."""


# --- structure ---------------------------------------------------------------
class Terminator(Trait):
    """Ends a block; control leaves the region after it."""


class IsolatedFromAbove(Trait):
    """Regions may not use values defined outside the op."""


class SymbolTable(Trait):
    """The op's single region holds ops named by `sym_name`."""


class Symbol(Trait):
    """The op has a `sym_name` attribute unique within its symbol table."""


class NoTerminator(Trait):
    """The op's regions' blocks need no terminator (e.g. the module)."""


# --- side effects and algebra ------------------------------------------------
class Pure(Trait):
    """No side effects: the op may be erased when unused, CSE'd and hoisted."""


class Commutative(Trait):
    """The first two operands may be swapped."""


class ConstantLike(Trait):
    """The op materialises a compile-time constant held in `value`."""


# --- fusion classes (one per tensor op) --------------------------------------
class Elementwise(Trait):
    """Each result element depends only on the same-index operand elements."""


class Broadcasting(Trait):
    """Operands broadcast to the result shape with numpy's rules."""


class Injective(Trait):
    """Layout op: each result element is one input element (reshape, transpose,
    slice, concat, broadcast_to). Cheap to recompute, so fusable anywhere."""


class Reduction(Trait):
    """Reduces some axes of its input."""


class Contraction(Trait):
    """A contraction such as matmul: compute-bound, tiled, the anchor of
    epilogue fusion."""


class Composite(Trait):
    """A named pattern with its own fused lowering (softmax, layernorm,
    rmsnorm, attention); decomposable into simpler ops."""


class Opaque(Trait):
    """Never fused with anything."""


FUSION_CLASSES = (Elementwise, Injective, Reduction, Contraction, Composite, Opaque)
