"""What the host CPU is, as LLVM sees it: compile-time target knowledge.

The emitter specialises math for the host's instruction set extensions
(`host_isa`), and the runtime's JIT builds its target machines for the same
CPU; both ask here, so the backend never reaches into the runtime.
"""

from __future__ import annotations

import threading

import llvmlite.binding as llvm

from fusecc.passes.backends import hardware

_lock = threading.Lock()
_initialised = False


def initialise_native() -> None:
    """Initialise LLVM's native target and assembly printer (once)."""
    global _initialised
    with _lock:
        if not _initialised:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _initialised = True


def host_cpu_name() -> str:
    initialise_native()
    return llvm.get_host_cpu_name()


def host_cpu_features() -> str:
    """LLVM's `+feature,-feature,...` string for this CPU (with the changes
    of $FUSECC_CPU_FEATURES: `hardware.host_cpu_features`, which also picks
    the tiles for it)."""
    initialise_native()
    return hardware.host_cpu_features()


def host_isa() -> frozenset[str]:
    """The instruction set extensions of this CPU that LLVM enables (its
    `+feature` names), for emit_llvm's host-specific math."""
    return hardware.isa_of(host_cpu_features())


__all__ = ["host_cpu_features", "host_cpu_name", "host_isa", "initialise_native"]
