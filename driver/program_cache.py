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

A program with `?` dims has no image (its schedule is planned per call):
it is kept as its loop-level module instead (kind "program-loops": the
module's text, its constants in a safetensors file beside it, mapped when
read, and the caller's meta); a hit parses that module and links the
kernels' objects from the LLVM cache, so it runs no pass either (the
"program" entry is then empty, a marker). Not kept (compiled the usual way
every time): ONNX models with external data files (their bytes are not in
the key).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import shutil
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from fusecc.runtime import cache

KIND = "program"
LOOPS_KIND = "program-loops"  # a program with `?` dims: its loop-level module, constants and meta
LOOPS_MODULE, LOOPS_META = "module.ir", "meta.json"
# The packages whose code decides what a compiled program is and does.
SOURCE_PACKAGES = ("compiler", "dialects", "passes", "runtime", "frontends", "driver")
# Environment settings the import or the compiled program depends on.
ENVIRONMENT = ("FUSECC_ONNX_MEMORY_BUDGET",)


@functools.lru_cache(maxsize=None)
def source_identity() -> str:
    """A digest of fusecc's own source: a program compiled by other code is never found."""
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
    return h.hexdigest()


def compiler_identity() -> str:
    """fusecc's source and this host's code generation target (its CPU, and
    the features $FUSECC_CPU_FEATURES changes, read anew each time): a
    program compiled by other code, or for another CPU, is never found."""
    from fusecc.runtime.cpu import jit

    return cache.digest(source_identity(), jit.host_description())


# A model file's content digest is kept in the cache (kind "file-digest")
# under its inode, size, modification and change times, as git's index
# does: a second compile of an unchanged file does not hash it again. Any
# write or rename changes the change time, which no user can set; a file
# changed within RACY_SECONDS before it was hashed could change again within
# the same clock tick unseen, so its digest is not kept (it is hashed again).
DIGEST_KIND = "file-digest"
RACY_SECONDS = 2.0


def _status_key(status: os.stat_result) -> str:
    return cache.digest(DIGEST_KIND, *(str(getattr(status, f)) for f in ("st_dev", "st_ino", "st_size", "st_mtime_ns", "st_ctime_ns")))


def _hash_file(f) -> str:
    # Through one small buffer: no allocation or page faults per block
    # (cheaper than hashing an mmap of it); hashlib lets go of the GIL.
    h = hashlib.sha256()
    block = bytearray(1 << 18)
    view = memoryview(block)
    while read := f.readinto(block):
        h.update(view[:read])
    return h.hexdigest()


def file_digest(path: str) -> str:
    """sha256 of the file's bytes (remembered by its status, see above)."""
    counted = cache.counts.hits, cache.counts.builds
    try:
        return _file_digest(path)
    finally:  # a remembered digest is no part of a program (`fusecc run` counts the parts it found and built)
        cache.counts.hits, cache.counts.builds = counted


def _file_digest(path: str) -> str:
    with open(path, "rb") as f:
        before = os.fstat(f.fileno())
        key = _status_key(before)
        keeps = cache.kind_dir(DIGEST_KIND) is not None
        if keeps:
            try:
                remembered = cache.lookup_bytes(DIGEST_KIND, key)
            except OSError:
                remembered = None
            if remembered:
                return bytes(remembered).decode()
        digest = _hash_file(f)
        after = os.fstat(f.fileno())
    settled = max(before.st_mtime_ns, before.st_ctime_ns) < time.time_ns() - RACY_SECONDS * 1e9
    if keeps and settled and _status_key(after) == key:
        try:
            cache.fetch_bytes(DIGEST_KIND, key, lambda: digest.encode())
        except OSError:  # only costs the next compile a hash
            pass
    return digest


def program_key(path: str, options: dict) -> str:
    settings = {name: os.environ.get(name) for name in ENVIRONMENT}
    return cache.digest(KIND, file_digest(path), json.dumps(options, sort_keys=True), json.dumps(settings, sort_keys=True), compiler_identity())


_stores: dict[str, Future] = {}  # key -> the background store of an entry this process compiled
_storer: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def compiled_model(path: str, options: dict, build: Callable[[], tuple[object, dict | None]], pool=None):
    """(CompiledProgram, meta, from the cache) for the model file `path`.
    `build()` compiles it: (CompiledProgram, meta), meta None when the
    program must not be kept. After a build the image is written to the
    cache on a background thread (store_later)."""
    if cache.kind_dir(KIND) is None:  # no usable disk cache (the reason was printed once)
        program, meta = build()
        return program, meta, False

    def find() -> tuple[str, object]:
        key = program_key(path, options)
        storing = _stores.get(key)
        if storing is not None:  # this process compiled it a moment ago: its entry first
            wait(storing)
        try:
            return key, cache.lookup_bytes(KIND, key, aligned=True)
        except OSError:
            return key, None

    from fusecc.compiler.diagnostics import DiagnosticError

    # The key and the entry's digest check (hashlib lets go of the GIL) while this thread imports the CPU runtime.
    with ThreadPoolExecutor(1, thread_name_prefix="fusecc-lookup") as lookups:
        pending = lookups.submit(find)
        from fusecc.runtime.cpu.image import ImageError, load_image

        try:
            key, blob = pending.result()
        except OSError:  # the model cannot be read: the compile path says why
            program, meta = build()
            return program, meta, False
    if blob:
        try:
            program, meta = load_image(blob, pool)
            return program, meta, True
        except ImageError as exc:
            cache.warn_once(f"a compiled program in the cache could not be loaded ({exc}); compiling it")
    loops = None
    if blob is not None and not blob:  # no image: the program is kept as its loop-level module, or not kept
        loops = _lookup_loops(key)
        if loops is not None:
            try:
                program, meta = load_loops(loops, pool)
                return program, meta, True
            except (OSError, ValueError, DiagnosticError) as exc:  # an entry this fusecc cannot read: compile it again
                cache.warn_once(f"a compiled program in the cache could not be loaded ({exc}); compiling it")
                shutil.rmtree(loops, ignore_errors=True)  # kept again below
                loops = None
    program, meta = build()
    if blob is None or (not blob and loops is None):  # not there (or its loop-level module is gone)
        store_later(key, program, meta)
    return program, meta, False


def _lookup_loops(key: str):
    """The folder of the "program-loops" entry `key` (checked against its digest), or None."""
    try:
        return cache.lookup(LOOPS_KIND, key)
    except OSError:
        return None


def write_loops(folder, module, meta: dict) -> None:
    """A loop-level module (changed: its constants become resources) and
    `meta` as the files of a "program-loops" entry."""
    from fusecc.compiler.resources import save_module

    save_module(module, os.path.join(folder, LOOPS_MODULE))
    with open(os.path.join(folder, LOOPS_META), "w", encoding="utf-8") as f:
        json.dump(meta, f)


def load_loops(folder, pool=None):
    """(CompiledProgram, meta) from a "program-loops" entry: the module
    parsed (its constants mapped from the entry's safetensors file), the
    kernels' objects from the LLVM cache, constants placed and weights
    packed as after a compile."""
    from fusecc.compiler.parser import parse_module
    from fusecc.runtime.cpu.executor import CompiledProgram

    path = os.path.join(folder, LOOPS_MODULE)
    with open(path, encoding="utf-8") as f:
        module = parse_module(f.read(), filename=path)
    with open(os.path.join(folder, LOOPS_META), encoding="utf-8") as f:
        meta = json.load(f)
    program = CompiledProgram(module, pool=pool)
    program.prepare(meta["entry"])
    return program, meta


def store_later(key: str, program, meta: dict | None) -> Future:
    """Write the image of `program` (an empty entry when `meta` is None or
    the program has no image) to the cache on a background thread: hashing
    and writing a model's weights let go of the GIL, so the caller runs on
    meanwhile. A program with `?` dims (no image) with `meta` is kept as its
    loop-level module (write_loops), before its empty "program" entry. The
    thread is joined at exit, so the entries are complete then."""
    from fusecc.runtime.cpu.image import ImageError, image_bytes

    global _storer
    loops = None
    try:
        chunks = image_bytes(program, meta) if meta is not None else b""
    except ImageError:
        chunks = b""
        if meta is not None and program.module is not None:
            loops = program.module.clone()  # (write_loops changes the module it writes)

    def store() -> None:
        try:
            if loops is not None:
                cache.fetch(LOOPS_KIND, key, lambda folder: write_loops(folder, loops, meta))
            cache.fetch_bytes(KIND, key, lambda: chunks)
        except OSError as exc:  # a cache that cannot be written only costs the next process a compile
            cache.warn_once(f"could not keep a compiled program in the cache ({exc})")

    with _lock:
        if _storer is None:
            _storer = ThreadPoolExecutor(1, thread_name_prefix="fusecc-store")
        future = _stores[key] = _storer.submit(store)
    future.add_done_callback(lambda done: _stores.pop(key, None) if _stores.get(key) is done else None)  # (it holds the weights)
    return future


def wait_for_stores() -> None:
    """Wait until every compiled program this process is storing is in the cache."""
    for future in list(_stores.values()):
        wait(future)


def wait(future: Future) -> None:
    try:
        future.result()
    except Exception:  # noqa: BLE001 (the store said why, once)
        pass


__all__ = ["KIND", "LOOPS_KIND", "compiled_model", "load_loops", "write_loops", "compiler_identity", "source_identity", "file_digest", "program_key", "store_later", "wait_for_stores"]
