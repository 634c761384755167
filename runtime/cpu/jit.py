"""LLVM IR -> machine code for this CPU, loaded into the process.

Modules are optimised with LLVM's new pass manager at O3 (loop and SLP
vectorisers on) for the host CPU and its features (`-mcpu=native`), or, for
hand-written IR that is already what it should be (the call-sequence
runner), given to code generation alone (`ir_passes=False`); emitted
as object files and loaded with MCJIT, one engine per module so that kernel
names of different programs never clash. LLVM runs in forked child
processes: an LLVM assertion aborts that child, not the caller, and becomes
an internal error (LLVMCrash) with LLVM's message. A long module is split
by function into two modules compiled at once (split_module), one per core.

Two caches: in memory, per process, by the hash of the IR text; on disk
(runtime/cache.py, kind "cpu"), object files keyed by that hash plus the
CPU, its features, the llvmlite version and the optimisation settings,
checked against their content digest before loading; concurrent processes
never read half a file (two that miss the same module at once may both
compile it; the first stores it).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import threading
from dataclasses import dataclass

import llvmlite
import llvmlite.binding as llvm

from fusecc.passes.backends.llvm.host import host_cpu_features, host_cpu_name, host_isa, initialise_native  # noqa: F401 (host_isa: the executor asks here)
from fusecc.compiler.progress import working
from fusecc.runtime import cache

OPT_LEVEL = 3
_lock = threading.Lock()
_machines: dict[str, object] = {}  # features -> target machine ($FUSECC_CPU_FEATURES may change them)
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
    features = host_cpu_features()
    if features not in _machines:
        machine = new_target_machine()
        with _lock:
            _machines.setdefault(features, machine)
    return _machines[features]


def host_description(ir_passes: bool = True) -> str:
    passes = f"O{OPT_LEVEL}+slp" if ir_passes else "codegen only"
    return f"{host_cpu_name()};{host_cpu_features()};llvmlite {llvmlite.__version__};{passes}"


@dataclass
class CompiledModule:
    engine: object  # the MCJIT engine that owns the code; keep it alive
    addresses: dict[str, int]
    from_disk: bool
    objects: tuple  # the object files loaded (runtime/cpu/image.py stores them with a program)


def parse(text: str):
    """The llvmlite module of IR `text` for this host, verified."""
    machine = host_target_machine()
    module = llvm.parse_assembly(text)
    module.triple = machine.triple
    module.data_layout = str(machine.target_data)
    module.verify()
    return module


def optimise(text: str):
    """Parse and optimise IR; returns the llvmlite module (for inspection)."""
    module = parse(text)
    options = llvm.create_pipeline_tuning_options(speed_level=OPT_LEVEL)
    options.slp_vectorization = True
    builder = llvm.create_pass_builder(host_target_machine(), options)
    builder.getModulePassManager().run(module, builder)
    return module


def _module(text: str, ir_passes: bool):
    return optimise(text) if ir_passes else parse(text)


def assembly(text: str) -> str:
    """The host assembly for IR text (for tests and for inspecting kernels)."""
    return host_target_machine().emit_assembly(optimise(text))


class LLVMCrash(RuntimeError):
    """LLVM died (an assertion, a signal) while compiling CPU kernels: a
    compiler bug, which the driver reports as an internal error."""


def object_code(text: str, ir_passes: bool = True) -> bytes:
    """Optimise `text` and emit its object file in a forked child process,
    so that an LLVM assertion (which aborts) or crash cannot kill the
    caller: it becomes an LLVMCrash with LLVM's message."""
    return _finish_child(_start_child(text, ir_passes))


def _start_child(text: str, ir_passes: bool = True):
    """Fork a child that compiles `text`; (pid, object pipe, error pipe), or
    the object itself where there is no fork."""
    machine = host_target_machine()  # initialised here, inherited by the child
    if not hasattr(os, "fork"):
        return machine.emit_object(_module(text, ir_passes))
    object_read, object_write = os.pipe()
    error_read, error_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no Python cleanup, no exception escapes
        status = 1
        try:
            os.close(object_read)
            os.close(error_read)
            os.dup2(error_write, 2)
            faulthandler.disable()  # a crash is reported by the parent, with LLVM's message
            data = machine.emit_object(_module(text, ir_passes))
            with os.fdopen(object_write, "wb") as out:
                out.write(data)
            status = 0
        except BaseException as exc:  # noqa: BLE001 (reported to the parent through the error pipe)
            os.write(error_write, f"{type(exc).__name__}: {exc}".encode(errors="replace"))
        finally:
            os._exit(status)
    os.close(object_write)
    os.close(error_write)
    return pid, object_read, error_read


def _finish_child(child) -> bytes:
    """The object a child of _start_child wrote (it writes only once it is
    done, so reading children one after the other never blocks them)."""
    if isinstance(child, bytes):
        return child
    pid, object_read, error_read = child
    with os.fdopen(object_read, "rb") as objects, os.fdopen(error_read, "rb") as errors:
        data = objects.read()
        message = errors.read().decode(errors="replace").strip()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        raise LLVMCrash(f"LLVM crashed ({name}) while compiling the CPU kernels: {message or 'no message'}")
    if os.WEXITSTATUS(status) != 0:
        raise LLVMCrash(f"LLVM failed while compiling the CPU kernels: {message or 'no message'}")
    return data


# A module at least this long (characters of IR) is split to compile its
# kernels on two cores at once: MiniLM-L3's 16 kernels are ~160 k and take
# ~0.4 s of LLVM; a few small kernels are not worth a second fork.
SPLIT_CHARACTERS = 60_000


def split_module(text: str, parts: int) -> list[str]:
    """`text`'s functions spread over at most `parts` modules of about equal
    size, each with every declaration, attribute group and metadata node
    (unused ones cost nothing). [text] when it has global variables (they
    must be defined once) or fewer than two functions."""
    header: list[str] = []
    functions: list[str] = []
    trailer: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines(keepends=True):
        if current is not None:
            current.append(line)
            if line.startswith("}"):
                functions.append("".join(current))
                current = None
        elif line.startswith("define "):
            current = [line]
        elif line.startswith("@"):
            return [text]
        else:
            (trailer if functions else header).append(line)
    if current is not None or len(functions) < 2 or parts < 2:
        return [text]
    groups: list[list[str]] = [[] for _ in range(min(parts, len(functions)))]
    sizes = [0] * len(groups)
    for function in sorted(functions, key=len, reverse=True):
        smallest = sizes.index(min(sizes))
        groups[smallest].append(function)
        sizes[smallest] += len(function)
    head, tail = "".join(header), "".join(trailer)
    return [head + "".join(group) + tail for group in groups]


def _cached_object(text: str, ir_passes: bool = True) -> tuple[bytes, bool]:
    """The object file for `text`: from the disk cache (runtime/cache.py,
    kind "cpu"; checked against its digest), else compiled and stored there.
    Returns (bytes, from disk). A cache that cannot be written only costs
    the next process a compile."""
    build = lambda: object_code(text, ir_passes)  # noqa: E731
    try:
        return cache.fetch_bytes("cpu", cache.digest(text, host_description(ir_passes)), build)
    except OSError:
        return build(), False


def _cached_objects(texts: list[str], ir_passes: bool = True) -> tuple[list[bytes], bool]:
    """The object files for `texts`: each from the disk cache (kind "cpu",
    checked against its digest), else compiled, all misses at once in
    children of their own, and stored. Returns (objects, all from disk)."""
    keys = [cache.digest(text, host_description(ir_passes)) for text in texts]
    objects: list[bytes | None] = []
    for key in keys:
        try:
            objects.append(cache.lookup_bytes("cpu", key))
        except OSError:
            objects.append(None)
    from_disk = all(o is not None for o in objects)
    children = {i: _start_child(texts[i], ir_passes) for i, found in enumerate(objects) if found is None}
    failure = None
    for i, child in children.items():  # every child is waited for, even after one failed
        try:
            data = _finish_child(child)
        except LLVMCrash as exc:
            failure = failure or exc
            continue
        try:  # a cache that cannot be written only costs the next process a compile
            objects[i] = cache.fetch_bytes("cpu", keys[i], lambda data=data: data)[0]
        except OSError:
            objects[i] = data
    if failure is not None:
        raise failure
    return objects, from_disk


def compile_ir(text: str, symbols, ir_passes: bool = True, split: bool = True) -> CompiledModule:
    """Machine code for `text`; `symbols` are the functions to look up. A
    long module is compiled in parts on all cores (split_module; `split`
    False: in one, for functions that call each other). `ir_passes` False:
    code generation alone, for IR written by hand that LLVM's IR passes
    would only spend time on."""
    key = cache.digest(text, host_cpu_features(), str(ir_passes))
    with _lock:
        found = _compiled.get(key)
    if found is not None:
        return found
    parts = split_module(text, min(2, os.cpu_count() or 1)) if split and len(text) >= SPLIT_CHARACTERS else [text]
    with working(f"compiling {len(symbols)} CPU kernels with LLVM"):  # a bar on a terminal past a second
        objects, from_disk = _cached_objects(parts, ir_passes)
    compiled = load_object(objects, symbols, from_disk)
    with _lock:
        _compiled.setdefault(key, compiled)
        return _compiled[key]


def load_object(objects: list[bytes], symbols, from_disk: bool = True) -> CompiledModule:
    """Link object files of this host's kernels into one MCJIT engine (no
    LLVM optimisation or code generation); `symbols` are the functions to look up."""
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), new_target_machine())
    for obj in objects:
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    addresses = {name: engine.get_function_address(name) for name in symbols}
    missing = [name for name, address in addresses.items() if not address]
    if missing:
        raise RuntimeError(f"compiled module lacks functions {missing}")
    return CompiledModule(engine, addresses, from_disk, tuple(objects))
