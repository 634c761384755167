"""What a target of `fusecc run` is: a name, whether it can run here, and a
runner. The registry of targets is `targets.py`; each target's module
(`cpu_target.py`, `cuda_target.py`) imports this one, never the registry.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.compiler.ir import Operation


class TargetUnavailable(Exception):
    """The target cannot run here; the message says why and what to use."""


class Target:
    name = ""

    def available(self) -> str | None:
        """None when usable, else the reason it is not."""
        return None

    def run(self, module: Operation, entry: str, inputs: Sequence[np.ndarray], engine: DiagnosticEngine) -> list[np.ndarray]:
        raise NotImplementedError

    def prepare(self, module: Operation, entry: str, engine: DiagnosticEngine) -> Callable[[Sequence[np.ndarray]], list[np.ndarray]]:
        """Do the work that does not depend on the inputs (compiling) and
        return the function that runs `entry`, so that `fusecc run` can time
        the two apart. A target that compiles nothing need not override it."""
        return lambda inputs: self.run(module, entry, inputs, engine)


class ReferenceTarget(Target):
    name = "reference"

    def run(self, module, entry, inputs, engine):
        from fusecc.runtime.reference import evaluate

        return evaluate(module, entry, inputs)
