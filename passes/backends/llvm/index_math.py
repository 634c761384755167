"""Index arithmetic of the CPU backend, symbolic where it can be: a value
`base + stride * lane` stays LINEAR through add/mul and through division by
a positive constant when the lanes of a chunk cannot cross a multiple of it,
so accesses contiguous in the lane become vector loads and stores."""

from __future__ import annotations

import math

from fusecc.passes.backends.llvm.text import LINEAR, UNIFORM, VECTOR, Val, const_val, is_literal


class IndexMath:
    """Mixed into the kernel emitter (uses its `fb`, `width`, `vec`, `full`, `vector`)."""

    def scalar_index_op(self, opcode: str, a: str, b: str) -> str:
        """`a opcode b` on i64 scalars, folded when both are literals."""
        if is_literal(a) and is_literal(b):
            x, y = int(a), int(b)
            return str({"add": x + y, "sub": x - y, "mul": x * y}[opcode])
        if opcode == "mul" and "0" in (a, b):
            return "0"
        if opcode == "mul" and (a == "1" or b == "1"):
            return b if a == "1" else a
        if opcode == "add" and (a == "0" or b == "0"):
            return b if a == "0" else a
        if opcode == "sub" and b == "0":
            return a
        return self.fb.emit(f"{opcode} i64 {a}, {b}")

    def ix_add(self, a: Val, b: Val, subtract: bool = False) -> Val:
        if a.const is not None and b.const is not None:
            return const_val(a.const - b.const if subtract else a.const + b.const)
        if a.kind == VECTOR or b.kind == VECTOR:
            return self.vector(self.fb.emit(f"{'sub' if subtract else 'add'} {self.full('i64')} {self.vec(a)}, {self.vec(b)}"), "i64")
        base = self.scalar_index_op("sub" if subtract else "add", a.ref, b.ref)
        stride = a.stride - b.stride if subtract else a.stride + b.stride
        nonneg = a.nonneg and (b.const == 0 if subtract else b.nonneg)
        return Val(base, "i64", LINEAR if stride else UNIFORM, stride, math.gcd(a.multiple, b.multiple), nonneg)

    def ix_mul(self, a: Val, b: Val) -> Val:
        if a.const is not None and b.const is not None:
            return const_val(a.const * b.const)
        if a.const is not None:
            a, b = b, a
        if b.const is not None and a.kind != VECTOR:
            c = b.const
            if c == 0:
                return const_val(0)
            base = self.scalar_index_op("mul", a.ref, str(c))
            stride = a.stride * c
            return Val(base, "i64", LINEAR if stride else UNIFORM, stride, a.multiple * abs(c), a.nonneg and c > 0)
        if a.kind == UNIFORM and b.kind == UNIFORM:
            ref = self.scalar_index_op("mul", a.ref, b.ref)
            return Val(ref, "i64", multiple=a.multiple * b.multiple, nonneg=a.nonneg and b.nonneg)
        return self.vector(self.fb.emit(f"mul {self.full('i64')} {self.vec(a)}, {self.vec(b)}"), "i64")

    def ix_divrem(self, a: Val, b: Val, rem: bool) -> Val | None:
        """Division/remainder by a positive constant, keeping lane-linearity
        when the lanes of a chunk cannot cross a multiple of the divisor."""
        c = b.const
        if c is None or c <= 0 or a.kind == VECTOR:
            return None
        if a.const is not None:
            q = abs(a.const) // c * (1 if a.const >= 0 else -1)
            return const_val(a.const - q * c if rem else q)
        if not a.nonneg:
            return None
        opcode = "urem" if rem else "udiv"
        if a.kind == UNIFORM:
            ref = self.fb.emit(f"{opcode} i64 {a.ref}, {c}")
            multiple = math.gcd(a.multiple, c) if rem else (a.multiple // c if a.multiple % c == 0 else 1)
            return Val(ref, "i64", multiple=multiple, nonneg=True)
        s = a.stride
        if s > 0 and s * (self.width - 1) < math.gcd(a.multiple, c):
            ref = self.fb.emit(f"{opcode} i64 {a.ref}, {c}")
            if rem:
                return Val(ref, "i64", LINEAR, s, math.gcd(a.multiple, c), True)
            return Val(ref, "i64", multiple=a.multiple // c if a.multiple % c == 0 else 1, nonneg=True)
        if s > 0 and s % c == 0 and a.multiple % c == 0:
            if rem:
                return const_val(0)
            ref = self.fb.emit(f"udiv exact i64 {a.ref}, {c}")
            return Val(ref, "i64", LINEAR, s // c, a.multiple // c, True)
        return None

