"""LLVM IR -> machine code for this CPU, loaded into the process.

Modules are optimised with LLVM's new pass manager at O3 (loop and SLP
vectorisers on) for the host CPU and its features (`-mcpu=native`), emitted
as object files and loaded with MCJIT, one engine per module so that kernel
names of different programs never clash.

Two caches: in memory, per process, by the hash of the IR text; on disk
(runtime/cache.py, kind "cpu"), object files keyed by that hash plus the
CPU, its features, the llvmlite version and the optimisation settings,
checked against their content digest before loading; concurrent processes
never read half a file and compile each module once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import llvmlite
import llvmlite.binding as llvm

from fusecc.passes.backends.llvm.host import host_cpu_features, host_cpu_name, host_isa, initialise_native  # noqa: F401 (host_isa: the executor asks here)
from fusecc.runtime import cache

OPT_LEVEL = 3
_lock = threading.Lock()
_machine = None
_compiled: dict[str, "CompiledModule"] = {}


def new_target_machine():
    """A target machine for this CPU. An MCJIT engine owns (and on disposal
    frees) the one it is created with, so each engine gets its own."""
    initialise_native()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=host_cpu_name(),
        features=host_cpu_features(),
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
    return f"{host_cpu_name()};{host_cpu_features()};llvmlite {llvmlite.__version__};O{OPT_LEVEL}+slp"


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


def _cached_object(text: str) -> tuple[bytes, bool]:
    """The object file for `text`: from the disk cache (runtime/cache.py,
    kind "cpu"; checked against its digest), else compiled and stored there.
    Returns (bytes, from disk). A cache that cannot be written only costs
    the next process a compile."""
    build = lambda: host_target_machine().emit_object(optimise(text))  # noqa: E731
    try:
        return cache.fetch_bytes("cpu", cache.digest(text, host_description()), build)
    except OSError:
        return build(), False


def compile_ir(text: str, symbols) -> CompiledModule:
    """Machine code for `text`; `symbols` are the functions to look up."""
    key = cache.digest(text)
    with _lock:
        found = _compiled.get(key)
    if found is not None:
        return found
    obj, from_disk = _cached_object(text)
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
