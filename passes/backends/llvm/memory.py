"""Buffers and memory access of the CPU backend: allocas, constant data,
views, and loads/stores that become vector loads/stores (contiguous in the
lane), gathers/scatters, or masked accesses under guards and lane masks."""

from __future__ import annotations

from fusecc.compiler.types import ScalarType, bf16, i1
from fusecc.dialects import loop
from fusecc.passes.backends.llvm.text import (
    LINEAR,
    STORAGE,
    UNIFORM,
    VECTOR,
    Buffer,
    REGISTER,
    Val,
    const_val,
    constant_bytes,
    low_bit,
    mangle,
    scalar_literal,
    storage_literal,
    vty,
)


class MemoryAccess:
    """Mixed into the kernel emitter (uses its `fb`, `buffers`, `width`, `mask`, index math)."""

    def emit_alloc(self, op: loop.AllocOp) -> None:
        t = op.result.type
        ptr = self.fb.fresh("buf")
        self.fb.allocas.append(f"  {ptr} = alloca [{t.num_elements} x {STORAGE[t.element_type.name]}], align 64")
        # The interpreter gives fresh buffers zeros; LLVM drops this when overwritten.
        self.fb.call("llvm.memset.p0.i64", "void", [("ptr align 64", ptr), ("i8", "0"), ("i64", str(t.byte_size)), ("i1", "false")])
        self.buffers[op.result] = Buffer(ptr, t, 64)

    def emit_constant_buffer(self, op: loop.ConstantOp) -> None:
        t = op.result.type
        data = constant_bytes(op.attr("value").array, t)
        self.constants += 1
        name = f'@"{self.kernel.sym_name}.const{self.constants}"'
        body = "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:02X}" for b in data)
        self.mb.globals.append(f'{name} = private unnamed_addr constant [{len(data)} x i8] c"{body}", align 64')
        self.buffers[op.result] = Buffer(name, t, 64)

    def emit_view(self, op: loop.ViewOp) -> None:
        source = self.buffers[op.source]
        ptr = source.ptr if op.offset == 0 else self.fb.emit(f"getelementptr inbounds i8, ptr {source.ptr}, i64 {op.offset}")
        self.buffers[op.result] = Buffer(ptr, op.result.type, min(source.align, low_bit(op.offset)))


    def flat_index(self, buf: Buffer, indices) -> Val:
        if buf.sizes is not None:
            flat, stride = const_val(0), const_val(1)
            for axis in reversed(range(len(buf.sizes))):
                flat = self.ix_add(self.ix_mul(self.get(indices[axis]), stride), flat)
                if axis:
                    stride = self.ix_mul(stride, buf.sizes[axis])
            return flat
        shape = buf.type.shape
        flat = const_val(0)
        stride = 1
        for axis in reversed(range(len(shape))):
            flat = self.ix_add(self.ix_mul(self.get(indices[axis]), const_val(stride)), flat)
            stride *= shape[axis]
        return flat

    def access_mask(self, op) -> Val | None:
        guard = self.get(op.guard) if op.guard is not None else None
        if self.mask is None:
            return guard
        if guard is None:
            return self.mask
        return self.vector(self.fb.emit(f"and {self.full('i1')} {self.mask.ref}, {self.vec(guard)}"), "i1")

    def any_lane(self, mask: Val) -> str:
        if mask.kind == UNIFORM:
            return mask.ref
        return self.fb.call(f"llvm.vector.reduce.or.{mangle('i1', self.width)}", "i1", [(self.full("i1"), mask.ref)])

    def pointer(self, buf: Buffer, flat: Val, inbounds: bool = True) -> str:
        if flat.const == 0 or flat.ref == "0":
            return buf.ptr
        return self.fb.emit(f"getelementptr {'inbounds ' if inbounds else ''}{STORAGE[buf.type.element_type.name]}, ptr {buf.ptr}, i64 {flat.ref}")

    def access_align(self, buf: Buffer, flat: Val) -> int:
        size = buf.type.element_type.byte_size
        return max(size, min(buf.align, size * low_bit(flat.multiple)))

    def guarded(self, cond: str, emit_inside, default: tuple[str, str] | None = None) -> str | None:
        """Run emit_inside() only when `cond`; with `default` = (type, value),
        return a phi of its result and the default."""
        fb = self.fb
        start = fb.block
        inside, after = fb.label("guard"), fb.label("guarded")
        fb.cond_br(cond, inside, after)
        fb.begin(inside)
        result = emit_inside()
        end = fb.block
        fb.br(after)
        fb.begin(after)
        if default is None:
            return None
        return fb.emit(f"phi {default[0]} [ {result}, %{end} ], [ {default[1]}, %{start} ]")

    def from_storage(self, t: ScalarType, ref: str, width: int) -> str:
        if t is bf16:
            wide = self.fb.emit(f"zext {vty('i16', width)} {ref} to {vty('i32', width)}")
            shifted = self.fb.emit(f"shl {vty('i32', width)} {wide}, {self.lit('i32', '16', width)}")
            return self.fb.emit(f"bitcast {vty('i32', width)} {shifted} to {vty('float', width)}")
        if t is i1:
            return self.fb.emit(f"icmp ne {vty('i8', width)} {ref}, {self.lit('i8', '0', width) if width > 1 else '0'}")
        return ref

    def to_storage(self, t: ScalarType, ref: str, width: int) -> str:
        if t is bf16:
            bits = self.fb.emit(f"bitcast {vty('float', width)} {ref} to {vty('i32', width)}")
            high = self.fb.emit(f"lshr {vty('i32', width)} {bits}, {self.lit('i32', '16', width)}")
            return self.fb.emit(f"trunc {vty('i32', width)} {high} to {vty('i16', width)}")
        if t is i1:
            return self.fb.emit(f"zext {vty('i1', width)} {ref} to {vty('i8', width)}")
        return ref

    def padding_literal(self, op, t: ScalarType) -> str:
        padding = op.attributes.get("padding")
        value = getattr(padding, "value", 0) if padding is not None else 0
        return scalar_literal(value, t)

    def emit_load(self, op: loop.LoadOp) -> None:
        buf = self.buffers[op.buffer]
        t = buf.type.element_type
        reg, store_ty = REGISTER[t.name], STORAGE[t.name]
        flat = self.flat_index(buf, op.indices)
        mask = self.access_mask(op)
        pad = self.padding_literal(op, t)
        align = self.access_align(buf, flat)
        fb = self.fb
        if flat.kind == UNIFORM:

            def scalar_load():
                return self.from_storage(t, fb.emit(f"load {store_ty}, ptr {self.pointer(buf, flat)}, align {align}"), 1)

            if mask is None:
                self.bind(op.result, self.uniform(scalar_load(), reg))
                return
            value = self.guarded(self.any_lane(mask), scalar_load, (reg, pad))
            guard = self.get(op.guard) if op.guard is not None else None
            if guard is None or guard.kind == UNIFORM:
                self.bind(op.result, self.uniform(value, reg))
            else:
                t_full = self.full(reg)
                ref = fb.emit(f"select {self.full('i1')} {guard.ref}, {t_full} {self.splat(reg, value)}, {t_full} {self.lit(reg, pad)}")
                self.bind(op.result, self.vector(ref, reg))
            return
        W = self.width
        vt = vty(store_ty, W)
        pad_storage = storage_literal(t, pad)
        if flat.kind == LINEAR and flat.stride == 1:
            ptr = self.pointer(buf, flat, inbounds=mask is None)
            if mask is None:
                raw = fb.emit(f"load {vt}, ptr {ptr}, align {align}")
            else:
                raw = fb.call(
                    f"llvm.masked.load.{mangle(store_ty, W)}.p0", vt,
                    [(f"ptr align {align}", ptr), (self.full("i1"), self.vec(mask)), (vt, self.lit(store_ty, pad_storage))],
                )
        else:
            ptrs = fb.emit(f"getelementptr {store_ty}, ptr {buf.ptr}, {self.full('i64')} {self.vec(flat)}")
            all_lanes = self.lit("i1", "true")
            raw = fb.call(
                f"llvm.masked.gather.{mangle(store_ty, W)}.{mangle('ptr', W)}", vt,
                [(f"{self.full('ptr')} align {self.access_align(buf, const_val(1))}", ptrs),
                 (self.full("i1"), self.vec(mask) if mask is not None else all_lanes), (vt, self.lit(store_ty, pad_storage))],
            )
        self.bind(op.result, self.vector(self.from_storage(t, raw, W), reg))

    def emit_prefetch(self, op: loop.PrefetchOp) -> None:
        """One `llvm.prefetch` into L2 (locality 2: `prefetcht1` on x86) of the
        first lane's address; the GEP is not `inbounds`: the address may lie
        past the buffer (loop.PrefetchOp)."""
        buf = self.buffers[op.buffer]
        flat = self.flat_index(buf, op.indices)
        if flat.kind == VECTOR:
            flat = Val(self.fb.emit(f"extractelement {self.full('i64')} {flat.ref}, i64 0"), "i64")
        ptr = self.pointer(buf, flat, inbounds=False)
        self.fb.call("llvm.prefetch.p0", "void", [("ptr", ptr), ("i32", "0"), ("i32", "2"), ("i32", "1")])

    def emit_store(self, op: loop.StoreOp) -> None:
        buf = self.buffers[op.buffer]
        t = buf.type.element_type
        store_ty = STORAGE[t.name]
        value = self.get(op.value)
        flat = self.flat_index(buf, op.indices)
        mask = self.access_mask(op)
        align = self.access_align(buf, flat)
        fb = self.fb
        W = self.width
        if flat.kind == UNIFORM:
            if value.kind == UNIFORM:

                def scalar_store():
                    fb.do(f"store {store_ty} {self.to_storage(t, value.ref, 1)}, ptr {self.pointer(buf, flat)}, align {align}")

                if mask is None:
                    scalar_store()
                else:
                    self.guarded(self.any_lane(mask), scalar_store)
                return
            # Lanes store to one place: the last active lane's value lands last.
            vector = self.vec(value)
            if mask is None:
                lane = str(W - 1)
            else:
                m = self.vec(mask)
                bits = fb.emit(f"bitcast {self.full('i1')} {m} to i{W}")
                zeros = fb.call(f"llvm.ctlz.i{W}", f"i{W}", [(f"i{W}", bits), ("i1", "false")])
                lane = fb.emit(f"sub i{W} {W - 1}, {zeros}")
            last = fb.emit(f"extractelement {self.full(value.ty)} {vector}, i{W if mask is not None else 64} {lane}")

            def store_last():
                fb.do(f"store {store_ty} {self.to_storage(t, last, 1)}, ptr {self.pointer(buf, flat)}, align {align}")

            if mask is None:
                store_last()
            else:
                self.guarded(self.any_lane(mask), store_last)
            return
        data = self.to_storage(t, self.vec(value), W)
        vt = vty(store_ty, W)
        if flat.kind == LINEAR and flat.stride == 1:
            ptr = self.pointer(buf, flat, inbounds=mask is None)
            if mask is None:
                fb.do(f"store {vt} {data}, ptr {ptr}, align {align}")
            else:
                fb.call(f"llvm.masked.store.{mangle(store_ty, W)}.p0", "void", [(vt, data), (f"ptr align {align}", ptr), (self.full("i1"), self.vec(mask))])
            return
        ptrs = fb.emit(f"getelementptr {store_ty}, ptr {buf.ptr}, {self.full('i64')} {self.vec(flat)}")
        lanes = self.vec(mask) if mask is not None else self.lit("i1", "true")
        fb.call(
            f"llvm.masked.scatter.{mangle(store_ty, W)}.{mangle('ptr', W)}", "void",
            [(vt, data), (f"{self.full('ptr')} align {self.access_align(buf, const_val(1))}", ptrs), (self.full("i1"), lanes)],
        )

    # --- index arithmetic (lane-linear where possible) ---------------------------------
