"""LLVM IR -> machine code for this CPU, loaded into the process.

Modules are optimised with LLVM's new pass manager at O3 (loop and SLP
vectorisers on) for the host CPU and its features (`-mcpu=native`), emitted
as object files and loaded with MCJIT, one engine per module so that kernel
names of different programs never clash.

Two caches: in memory, per process, by the hash of the IR text; on disk,
object files keyed by that hash plus the CPU, its features, the llvmlite
version and the optimisation settings, written atomically (a temporary
file, then a rename), so concurrent processes never read half a file. The
disk cache lives in $FUSECC_CACHE_DIR (default ~/.cache/fusecc); set it to
"off" to disable it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm

OPT_LEVEL = 3
_lock = threading.Lock()
_initialised = False
_machine = None
_compiled: dict[str, "CompiledModule"] = {}


def new_target_machine():
    """A target machine for this CPU. An MCJIT engine owns (and on disposal
    frees) the one it is created with, so each engine gets its own."""
    global _initialised
    with _lock:
        if not _initialised:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _initialised = True
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(),
        features=llvm.get_host_cpu_features().flatten(),
        opt=OPT_LEVEL,
        codemodel="jitdefault",
    )


def host_target_machine():
    """The machine that optimises and emits objects (never given to an engine)."""
    global _machine
    if _machine is None:
        machine = new_target_machine()
        with _lock:
            _machine = _machine or machine
    return _machine


def host_description() -> str:
    host_target_machine()
    return f"{llvm.get_host_cpu_name()};{llvm.get_host_cpu_features().flatten()};llvmlite {llvmlite.__version__};O{OPT_LEVEL}+slp"


@dataclass
class CompiledModule:
    engine: object  # the MCJIT engine that owns the code; keep it alive
    addresses: dict[str, int]
    from_disk: bool


def optimise(text: str):
    """Parse and optimise IR; returns the llvmlite module (for inspection)."""
    machine = host_target_machine()
    module = llvm.parse_assembly(text)
    module.triple = machine.triple
    module.data_layout = str(machine.target_data)
    module.verify()
    options = llvm.create_pipeline_tuning_options(speed_level=OPT_LEVEL)
    options.slp_vectorization = True
    builder = llvm.create_pass_builder(machine, options)
    builder.getModulePassManager().run(module, builder)
    return module


def assembly(text: str) -> str:
    """The host assembly for IR text (for tests and for inspecting kernels)."""
    return host_target_machine().emit_assembly(optimise(text))


def cache_directory() -> Path | None:
    setting = os.environ.get("FUSECC_CACHE_DIR")
    if setting is not None and setting.strip().lower() in ("", "0", "off", "none"):
        return None
    root = Path(setting) if setting else Path.home() / ".cache" / "fusecc"
    return root / "cpu"


def _read_cached(path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError:
        return None


def _write_cached(path: Path | None, data: bytes) -> None:
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", delete=False) as tmp:
            tmp.write(data)
        os.replace(tmp.name, path)
    except OSError:
        pass  # a read-only or full disk only costs the next process a compile


def compile_ir(text: str, symbols) -> CompiledModule:
    """Machine code for `text`; `symbols` are the functions to look up."""
    key = hashlib.sha256(text.encode()).hexdigest()
    with _lock:
        found = _compiled.get(key)
    if found is not None:
        return found
    machine = host_target_machine()
    directory = cache_directory()
    path = None
    if directory is not None:
        disk_key = hashlib.sha256((key + "\0" + host_description()).encode()).hexdigest()
        path = directory / f"{disk_key}.o"
    obj = _read_cached(path)
    from_disk = obj is not None
    if obj is None:
        obj = machine.emit_object(optimise(text))
        _write_cached(path, obj)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), new_target_machine())
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    addresses = {name: engine.get_function_address(name) for name in symbols}
    missing = [name for name, address in addresses.items() if not address]
    if missing:
        raise RuntimeError(f"compiled module lacks functions {missing}")
    compiled = CompiledModule(engine, addresses, from_disk)
    with _lock:
        _compiled.setdefault(key, compiled)
        return _compiled[key]
