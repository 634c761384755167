"""Which runtime times a target's programs for `report --measure` and
`fusecc profile`: a `Measurer` compiles a loop-level module into a
`Runnable` whose `run(..., profile=[])` appends (step name, seconds) per
launch or copy. The CPU's is here; `gpu_measure.py` adds CUDA's."""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

import numpy as np

from fusecc.compiler.ir import Operation
from fusecc.passes.backends.hardware import hardware


class MeasurementUnavailable(Exception):
    """The target cannot be measured here; the message says why."""


class Runnable(Protocol):
    def run(self, inputs: Sequence[np.ndarray], entry: str | None = None, profile: list | None = None) -> list[np.ndarray]:
        """Run a schedule; with `profile`, append (step name, seconds) per launch or copy."""


class Measurer(Protocol):
    target: str

    def available(self) -> str | None:
        """None when programs can be timed here, else the reason."""

    def compile(self, module: Operation) -> Runnable:
        """A loop-level module, compiled for the target."""

    def describe(self) -> str:
        """The machine, for the report's header."""


class CpuMeasurer:
    target = "cpu"

    def __init__(self, threads: int | None = None):
        from fusecc.runtime.cpu.executor import WorkerPool

        self.threads = threads
        self.pool = WorkerPool(threads)

    def available(self) -> str | None:
        from fusecc.driver.cpu_target import CpuTarget

        return CpuTarget().available()

    def compile(self, module: Operation) -> Runnable:
        from fusecc.runtime.cpu.executor import CompiledProgram

        return CompiledProgram(module, pool=self.pool)

    def describe(self) -> str:
        from fusecc.runtime.cpu.executor import available_cpus

        cpus, threads = available_cpus(), self.pool.threads
        return f"this CPU ({cpus} CPU{'s' * (cpus != 1)}, {threads} thread{'s' * (threads != 1)})"


MEASURERS: dict[str, Callable[..., Measurer]] = {"cpu": CpuMeasurer}


def register_measurer(target: str, factory: Callable[..., Measurer]) -> None:
    MEASURERS[target] = factory


def measurer_for(target: str, threads: int | None = None) -> Measurer:
    factory = MEASURERS.get(target)
    if factory is None:
        kind = hardware(target).kind
        raise MeasurementUnavailable(
            f"--measure runs the program, and only the CPU target can be measured here (use --target cpu); "
            f"'{target}' is a {kind.upper()} model, and timing its launches through runtime/cuda is not part of the report yet"
        )
    measurer = factory(threads)
    problem = measurer.available()
    if problem:
        raise MeasurementUnavailable(problem)
    return measurer


__all__ = ["MEASURERS", "CpuMeasurer", "MeasurementUnavailable", "Measurer", "Runnable", "measurer_for", "register_measurer"]
