"""First contact with a GPU: is the installed NVIDIA driver new enough for
the CUDA wheels (CuPy, NVRTC) this environment has, and may a kernel have
the shared memory it asks for?

A CUDA 13 wheel (cupy-cuda13x, nvidia-cuda-nvrtc 13.x) needs a driver that
supports CUDA 13 (R580 or later); an R535-R570 driver supports CUDA 12 only,
so it needs cupy-cuda12x and a 12.x NVRTC (`pip install 'fusecc[cuda12]'`).
A cubin from a newer NVRTC *minor* runs on an older driver of the same major
(CUDA's minor-version compatibility), so only majors are compared.

Everything here is plain arithmetic on version numbers, testable without a
GPU; runtime.py asks the driver (cuDriverGetVersion) and calls it at start-up.
"""

from __future__ import annotations

import importlib.metadata
import re

# Dynamic + static shared memory a block may use without the kernel opting in
# (cudaFuncAttributeMaxDynamicSharedMemorySize): 48 KB on every architecture.
DEFAULT_SHARED_LIMIT = 48 * 1024

# The oldest driver branch that supports each CUDA major (NVIDIA's release notes).
DRIVER_BRANCH_FOR_CUDA = {11: "R450", 12: "R525", 13: "R580"}

_CUPY_WHEEL = re.compile(r"cupy-cuda(\d+)x$")


class DriverTooOld(RuntimeError):
    """The driver cannot run what the installed CUDA wheels produce."""


def split_driver_version(version: int) -> tuple[int, int]:
    """cuDriverGetVersion's integer (1000 * major + 10 * minor) as (major, minor)."""
    return version // 1000, version % 1000 // 10


def wheel_cuda_majors() -> dict[str, int]:
    """The CUDA major each installed wheel is built for, by what it is:
    {"CuPy (cupy-cuda13x)": 13, "NVRTC 12.8": 12}. Nothing is imported from
    CuPy; NVRTC reports its own version when cuda-bindings is installed."""
    majors: dict[str, int] = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata.get("Name") or "").lower()
        match = _CUPY_WHEEL.match(name)
        if match:
            digits = match.group(1)
            majors[f"CuPy ({name})"] = int(digits[:-1] if len(digits) == 3 else digits)
    try:
        from fusecc.runtime.cuda.nvrtc import nvrtc_version

        major, minor = nvrtc_version()
        majors[f"NVRTC {major}.{minor}"] = major
    except Exception:  # not installed, or its library does not load: the runtime says so later
        pass
    return majors


def driver_mismatch(driver: tuple[int, int], wheels: dict[str, int]) -> str | None:
    """None when a driver supporting CUDA `driver` runs what every wheel
    makes, else a message naming the wheels, the driver and the fix."""
    too_new = {what: major for what, major in wheels.items() if major > driver[0]}
    if not too_new:
        return None
    needed = max(too_new.values())
    branch = DRIVER_BRANCH_FOR_CUDA.get(needed, f"a CUDA {needed} driver")
    fix = f"pip install 'fusecc[cuda{driver[0]}]'" if driver[0] in (12, 13) else "install a newer NVIDIA driver"
    names = ", ".join(f"{what} (CUDA {major})" for what, major in sorted(too_new.items()))
    return (
        f"the NVIDIA driver supports CUDA {driver[0]}.{driver[1]}, but {names} need a CUDA {needed} driver "
        f"({branch} or later); either upgrade the driver or use wheels for CUDA {driver[0]}: {fix}"
    )


def dynamic_shared_opt_in(kernel: str, static_bytes: int, dynamic_bytes: int, allowed_dynamic: int, device_limit: int | None) -> int | None:
    """The dynamic shared size to allow `kernel` before its launch, or None
    when it needs no change. A block may use 48 KB of static + dynamic shared
    memory by default; past that, the kernel must opt in to its dynamic size
    (the static part counts: a kernel with 16 KB static and 40 KB dynamic
    needs the opt-in although 40 KB alone is under 48 KB). `device_limit` is
    the device's opt-in maximum per block (sharedMemPerBlockOptin)."""
    total = static_bytes + dynamic_bytes
    if device_limit is not None and total > device_limit:
        raise ValueError(
            f"kernel {kernel} needs {total} bytes of shared memory per block ({static_bytes} static + {dynamic_bytes} dynamic), "
            f"more than this device allows ({device_limit})"
        )
    if total > DEFAULT_SHARED_LIMIT and dynamic_bytes > allowed_dynamic:
        return dynamic_bytes
    return None
