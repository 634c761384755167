"""A compiled static CPU program as one blob of bytes, and back.

What a warm start needs and nothing more: the object files of the kernels,
each kernel's calling convention (KernelABI), each schedule resolved to
plain data (executor.PlanLayout, its constants in storage bytes), and the
caller's own metadata (JSON). Loading an image runs no pass, emits no LLVM
IR and runs no LLVM optimisation: MCJIT links the object, the constants are
copied into aligned buffers and the load-time launches (weight packing) run.

Layout: MAGIC, the header's length (8 bytes, little endian), the header
(JSON: kernels, plans, meta, and where the sections are), then the sections
(the object files, then each constant) at 64-byte aligned offsets. The
runtime's cache (kind "program") checks the blob against its digest before
this module reads it; a blob that does not parse is a ValueError.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from fusecc.compiler.types import MemRefType, parse_type_token
from fusecc.passes.backends.llvm.emit import KernelABI
from fusecc.runtime.cpu.buffers import aligned_empty
from fusecc.runtime.cpu.executor import CompiledProgram, PlanLayout, SchedulePlan, WorkerPool

MAGIC = b"FUSECC-CPU-IMAGE-2\n"
ALIGN = 64


class ImageError(ValueError):
    """The bytes are not an image this version writes (a stale or foreign entry)."""


def _slot(slot) -> list:
    root, offset = slot
    return [list(root), offset]


def _unslot(data) -> tuple:
    root, offset = data
    return (tuple(root), offset)


def _type(text: str) -> Any:
    return parse_type_token(text)


def image_bytes(program: CompiledProgram, meta: dict) -> list:
    """The image of `program` as a list of byte chunks to write one after
    the other (a model's constants are not copied once more to join them);
    every schedule must be static (prepared as a SchedulePlan). `meta` is
    the caller's JSON-able data, returned by load_image."""
    plans = [plan for plan in (program.prepare(name) for name in program.schedule_names())]
    if not all(isinstance(plan, SchedulePlan) for plan in plans):
        raise ImageError("a schedule with dynamic dims has no image (its plan is made per call)")
    sections: list = list(program.objects)
    kernels = {
        name: {
            "params": [str(t) for t in k.abi.params],
            "alignments": list(k.abi.alignments),
            "worker_extent": k.abi.worker_extent,
            "work_per_iteration": k.abi.work_per_iteration,
        }
        for name, k in program.kernels.items()
    }
    described = []
    for plan in plans:
        layout = plan.layout
        first = len(sections)
        sections += [memoryview(c) for c in (plan._pristine if plan.constants_written else layout.constants)]
        described.append({
            "name": layout.name,
            "arena_size": layout.arena_size,
            "input_names": layout.input_names,
            "input_types": [str(t) for t in layout.input_types],
            "output_types": [str(t) for t in layout.output_types],
            "constants": list(range(first, len(sections))),
            "packed_sizes": layout.packed_sizes,
            "load_steps": [[name, [_slot(s) for s in slots], sizes] for name, slots, sizes in layout.load_steps],
            "steps": [
                ["launch", step[1], [_slot(s) for s in step[2]]] if step[0] == "launch" else ["copy", _slot(step[1]), _slot(step[2]), step[3]]
                for step in layout.steps
            ],
            "inputs_written": sorted(layout.inputs_written),
            "constants_written": layout.constants_written,
        })
    placed, offset = [], 0
    for section in sections:
        placed.append([offset, len(section)])
        offset += -(-len(section) // ALIGN) * ALIGN
    header = json.dumps({"objects": len(program.objects), "kernels": kernels, "plans": described, "sections": placed, "meta": meta}, separators=(",", ":")).encode()
    start = -(-(len(MAGIC) + 8 + len(header)) // ALIGN) * ALIGN
    chunks = [MAGIC, len(header).to_bytes(8, "little"), header, bytes(start - len(MAGIC) - 8 - len(header))]
    for (at, size), section in zip(placed, sections):
        chunks += [section, bytes(-size % ALIGN)]
    return chunks


def read_header(blob: bytes) -> tuple[dict, int]:
    """The header and where the sections start; ImageError if `blob` is not an image."""
    if len(blob) < len(MAGIC) + 8 or bytes(blob[: len(MAGIC)]) != MAGIC:
        raise ImageError("not a fusecc CPU program image of this version")
    length = int.from_bytes(blob[len(MAGIC) : len(MAGIC) + 8], "little")
    try:
        header = json.loads(bytes(blob[len(MAGIC) + 8 : len(MAGIC) + 8 + length]))
    except ValueError as exc:
        raise ImageError(f"the image's header does not parse: {exc}") from None
    return header, -(-(len(MAGIC) + 8 + length) // ALIGN) * ALIGN


def _constant(data: memoryview) -> np.ndarray:
    """A constant's buffer: in place when the image lies in writable memory
    at a 64-byte aligned address (cache.fetch_bytes(aligned=True)), else a copy."""
    array = np.frombuffer(data, dtype=np.uint8)
    if array.flags.writeable and array.ctypes.data % ALIGN == 0:
        return array
    buffer = aligned_empty(len(data))
    buffer[:] = array
    return buffer


def load_image(blob, pool: WorkerPool | None = None) -> tuple[CompiledProgram, dict]:
    """The program an image (bytes, or a buffer such as cache.fetch_bytes's
    aligned one) holds, load-time launches run, and its `meta`. Constants
    use the buffer's memory in place when it is writable and aligned."""
    header, start = read_header(blob)
    view = memoryview(blob)

    def section(index: int) -> memoryview:
        at, size = header["sections"][index]
        if start + at + size > len(blob):
            raise ImageError("the image is truncated")
        return view[start + at : start + at + size]

    try:
        abis = {
            name: KernelABI(name, tuple(_type(t) for t in k["params"]), tuple(k["alignments"]), k["worker_extent"], k["work_per_iteration"])
            for name, k in header["kernels"].items()
        }
        layouts = []
        for plan in header["plans"]:
            constants = [_constant(section(index)) for index in plan["constants"]]
            input_types = [_type(t) for t in plan["input_types"]]
            output_types = [_type(t) for t in plan["output_types"]]
            if not all(isinstance(t, MemRefType) for t in input_types + output_types):
                raise ImageError("a schedule argument of the image is not a memref")
            layouts.append(PlanLayout(
                name=plan["name"],
                arena_size=plan["arena_size"],
                input_names=plan["input_names"],
                input_types=input_types,
                output_types=output_types,
                constants=constants,
                packed_sizes=plan["packed_sizes"],
                load_steps=[(name, [_unslot(s) for s in slots], sizes) for name, slots, sizes in plan["load_steps"]],
                steps=[
                    ("launch", step[1], [_unslot(s) for s in step[2]]) if step[0] == "launch" else ("copy", _unslot(step[1]), _unslot(step[2]), step[3])
                    for step in plan["steps"]
                ],
                inputs_written=set(plan["inputs_written"]),
                constants_written=plan["constants_written"],
            ))
        objects = [bytes(section(i)) for i in range(header["objects"])]
    except (KeyError, TypeError, IndexError) as exc:
        raise ImageError(f"the image's header is not one this version writes ({type(exc).__name__}: {exc})") from None
    return CompiledProgram.from_object(objects, abis, layouts, pool), header["meta"]


__all__ = ["ImageError", "image_bytes", "load_image", "read_header"]
