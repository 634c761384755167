"""Packaging: the `fusecc` namespace covers every package folder, and an
installed wheel puts nothing generic at the top of site-packages."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE_ROOTS = ("compiler", "dialects", "passes", "runtime", "tools")


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def package_folders() -> dict[str, str]:
    """Import name -> folder (relative to the repository) of every package."""
    found = {}
    for root in SOURCE_ROOTS:
        for init in sorted((ROOT / root).rglob("__init__.py")):
            folder = init.parent.relative_to(ROOT)
            if "__pycache__" in folder.parts:
                continue
            found["fusecc." + ".".join(folder.parts)] = folder.as_posix()
    return found


def test_every_package_folder_is_listed():
    config = pyproject()["tool"]["setuptools"]
    listed = set(config["packages"])
    missing = sorted(set(package_folders()) - listed)
    assert not missing, f"add these to pyproject.toml's packages: {missing}"
    for name, folder in config["package-dir"].items():
        assert (ROOT / folder).is_dir(), f"package-dir maps {name} to missing {folder}"
    for root in SOURCE_ROOTS:
        assert config["package-dir"][f"fusecc.{root}"] == root


def test_console_scripts_and_extras():
    project = pyproject()["project"]
    assert project["scripts"] == {"fusecc": "fusecc.tools.fusecc:main", "fusecc-opt": "fusecc.tools.opt:main"}
    extras = project["optional-dependencies"]
    assert {"test", "cuda"} <= set(extras)
    test_requirements = " ".join(extras["test"])
    for needed in ("pytest", "pytest-xdist", "filecheck", "lit", "hypothesis"):
        assert needed in test_requirements


def can_build_offline() -> bool:
    """Whether this environment can build a wheel without fetching setuptools."""
    try:
        import setuptools
    except ImportError:
        return False
    try:
        import wheel  # noqa: F401  (setuptools < 70.1 needs it for bdist_wheel)
    except ImportError:
        return tuple(int(p) for p in setuptools.__version__.split(".")[:2]) >= (70, 1)
    return True


def test_wheel_installs_only_the_fusecc_namespace(tmp_path):
    """Build the wheel from a copy of the sources (so no build/ lands in the
    checkout) and check every file lies under fusecc/ or the dist-info."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for root in SOURCE_ROOTS:
        shutil.copytree(ROOT / root, source / root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path / "dist"), str(source)]
    if can_build_offline():
        command.insert(4, "--no-build-isolation")
    proc = subprocess.run(command, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("fusecc-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names}
    assert {t for t in top_level if not t.endswith(".dist-info")} == {"fusecc"}
    for package in package_folders():
        assert package.replace(".", "/") + "/__init__.py" in names
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "fusecc-opt = fusecc.tools.opt:main" in entry_points
    # The CUDA tools read these at run time (package-data in pyproject.toml).
    assert {"fusecc/runtime/cuda/cpu_harness/cuda_cpu.h", "fusecc/runtime/cuda/include/fusecc_cuda.cuh"} <= set(names)
