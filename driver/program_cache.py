"""Compiled models kept on disk: a second `fusecc.compile` of the same
model file with the same options loads the compiled program (kernels'
object file, schedule, constants: runtime/cpu/image.py) from the runtime's
cache (kind "program") instead of importing the model and running the
passes. The `onnx` package is not imported on such a hit.

The key is a digest of the model file's bytes, the options that change the
compiled program, this fusecc's source (every module of the packages that
compile and run programs, by content) and the host CPU (the object code is
compiled for it). The cache vets the folder's owner and mode and checks the
entry's content digest before anything is loaded (runtime/cache.py).

Not kept (compiled the usual way every time): programs with `?` dims (their
schedule is planned per call) and ONNX models with external data files
(their bytes are not in the key).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from fusecc.runtime import cache

KIND = "program"
# The packages whose code decides what a compiled program is and does.
SOURCE_PACKAGES = ("compiler", "dialects", "passes", "runtime", "frontends", "driver")
# Environment settings the import or the compiled program depends on.
ENVIRONMENT = ("FUSECC_ONNX_MEMORY_BUDGET",)


@functools.lru_cache(maxsize=None)
def compiler_identity() -> str:
    """A digest of fusecc's own source and of this host's code generation
    target: a program compiled by other code, or for another CPU, is never found."""
    from fusecc.runtime.cpu import jit

    h = hashlib.sha256()
    for package in SOURCE_PACKAGES:
        spec = importlib.util.find_spec(f"fusecc.{package}")
        for folder in (spec.submodule_search_locations or []) if spec else []:
            for root, dirs, files in os.walk(folder):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in sorted(f for f in files if f.endswith(".py")):
                    path = os.path.join(root, name)
                    relative = f"{package}/{os.path.relpath(path, folder)}".encode()
                    with open(path, "rb") as f:
                        data = f.read()
                    h.update(len(relative).to_bytes(8, "little") + relative + len(data).to_bytes(8, "little") + data)
    h.update(jit.host_description().encode())
    return h.hexdigest()


def file_digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def program_key(path: str, options: dict) -> str:
    settings = {name: os.environ.get(name) for name in ENVIRONMENT}
    return cache.digest(KIND, file_digest(path), json.dumps(options, sort_keys=True), json.dumps(settings, sort_keys=True), compiler_identity())


def compiled_model(path: str, options: dict, build: Callable[[], tuple[object, dict | None]], pool=None):
    """(CompiledProgram, meta, from the cache) for the model file `path`.
    `build()` compiles it: (CompiledProgram, meta), meta None when the
    program must not be kept; it runs on a miss, under the cache entry's lock."""
    if cache.kind_dir(KIND) is None:  # no usable disk cache (the reason was printed once)
        program, meta = build()
        return program, meta, False
    # The model's digest (hashlib lets go of the GIL) while this thread imports the CPU runtime.
    with ThreadPoolExecutor(1, thread_name_prefix="fusecc-digest") as digests:
        pending = digests.submit(program_key, path, options)
        from fusecc.runtime.cpu.image import ImageError, image_bytes, load_image

        try:
            key = pending.result()
        except OSError:  # the model cannot be read: the compile path says why
            program, meta = build()
            return program, meta, False
    built: dict = {}

    def make() -> bytes:
        program, meta = build()
        built["result"] = (program, meta)
        if meta is None:
            return b""  # a marker: compile this one every time
        try:
            return image_bytes(program, meta)
        except ImageError:
            return b""

    try:
        blob, _ = cache.fetch_bytes(KIND, key, make, aligned=True)
    except OSError:  # the cache cannot be written
        if "result" in built:
            return (*built["result"], False)
        program, meta = build()
        return program, meta, False
    if "result" in built:
        return (*built["result"], False)
    if blob:
        try:
            program, meta = load_image(blob, pool)
            return program, meta, True
        except ImageError as exc:
            cache.warn_once(f"a compiled program in the cache could not be loaded ({exc}); compiling it")
    program, meta = build()
    return program, meta, False


__all__ = ["KIND", "compiled_model", "compiler_identity", "file_digest", "program_key"]
