"""Where `fusecc run` executes a program.

Each target is a name and a runner; a target that cannot run on this
machine says so plainly instead of failing deep inside.
"""

from __future__ import annotations

from typing import Callable

from fusecc.driver.target_base import ReferenceTarget, Target, TargetUnavailable

__all__ = ["TARGET_NAMES", "ReferenceTarget", "Target", "TargetUnavailable", "default_target_name", "get", "get_loop_level", "register_target"]


def _cuda_target() -> Target:
    from fusecc.driver.cuda_target import CudaTarget

    return CudaTarget()


def _cpu_target() -> Target:
    from fusecc.driver.cpu_target import CpuTarget

    return CpuTarget()


def _cuda_sim_target() -> Target:
    from fusecc.driver.cuda_sim_target import CudaSimTarget

    return CudaSimTarget()


_TARGETS: dict[str, Callable[[], Target]] = {
    "reference": ReferenceTarget,
    "cpu": _cpu_target,
    "cuda": _cuda_target,
    "cuda-sim": _cuda_sim_target,
}
TARGET_NAMES = tuple(_TARGETS)


def register_target(name: str, factory: Callable[[], Target]) -> None:
    _TARGETS[name] = factory


def default_target_name() -> str:
    """cuda when a GPU is usable, else cpu, else the reference."""
    for name in ("cuda", "cpu"):
        if _TARGETS[name]().available() is None:
            return name
    return "reference"


def get(name: str | None) -> Target:
    from fusecc.compiler.diagnostics import UsageError

    name = name or default_target_name()
    factory = _TARGETS.get(name)
    if factory is None:
        raise UsageError(f"unknown target '{name}'; choose one of {', '.join(_TARGETS)}")
    target = factory()
    problem = target.available()
    if problem:
        raise UsageError(problem)
    return target


def get_loop_level(name: str | None = None) -> Target:
    """The target for an already-lowered (loop-level) program: the CPU
    unless another is asked for (cuda runs GPU-mapped loop IR)."""
    from fusecc.compiler.diagnostics import UsageError

    if name == "reference":
        raise UsageError("the reference interpreter runs tensor programs; run loop-level programs with --target cpu (or cuda)")
    if name not in (None, "cpu"):
        return get(name)
    from fusecc.driver.cpu_target import LoopLevelCpuTarget

    target = LoopLevelCpuTarget()
    problem = target.available()
    if problem:
        raise UsageError(problem)
    return target
