"""Packaging: the `fusecc` namespace covers every package folder, and an
installed wheel puts nothing generic at the top of site-packages."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE_ROOTS = ("api", "compiler", "dialects", "passes", "runtime", "driver", "frontends", "tools", "examples")


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
            name = "fusecc" if folder.as_posix() == "api" else "fusecc." + ".".join(folder.parts)
            found[name] = folder.as_posix()
    return found


def test_every_package_folder_is_listed():
    config = pyproject()["tool"]["setuptools"]
    listed = set(config["packages"])
    missing = sorted(set(package_folders()) - listed)
    assert not missing, f"add these to pyproject.toml's packages: {missing}"
    for name, folder in config["package-dir"].items():
        assert (ROOT / folder).is_dir(), f"package-dir maps {name} to missing {folder}"
    for root in SOURCE_ROOTS:
        assert config["package-dir"]["fusecc" if root == "api" else f"fusecc.{root}"] == root


def test_console_scripts_and_extras():
    project = pyproject()["project"]
    assert project["scripts"] == {"fusecc": "fusecc.tools.fusecc:main", "fusecc-opt": "fusecc.tools.opt:main"}
    extras = project["optional-dependencies"]
    assert {"test", "cuda"} <= set(extras)
    test_requirements = " ".join(extras["test"])
    for needed in ("pytest", "pytest-xdist", "filecheck", "lit", "hypothesis"):
        assert needed in test_requirements


def test_installed_files_lie_only_under_fusecc(tmp_path):
    """Run setuptools' build step (what a wheel holds, offline and in a
    second or two) on a copy of the sources, so no build/ lands in the
    checkout, and check every file lies under fusecc/."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for root in SOURCE_ROOTS:
        shutil.copytree(ROOT / root, source / root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path / "lib"
    proc = subprocess.run(
        [sys.executable, "-c", "import setuptools; setuptools.setup()", "-q", "build_py", "--build-lib", str(out)],
        cwd=source,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = [p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()]
    assert {f.split("/")[0] for f in files} == {"fusecc"}
    assert (out / "fusecc" / "__init__.py").read_text() == (ROOT / "api" / "__init__.py").read_text()  # `import fusecc` is the public API
    for package in package_folders():
        assert package.replace(".", "/") + "/__init__.py" in files
    assert "fusecc/compiler/parser.py" in files and "fusecc/tools/opt.py" in files
    # issue 14.8: the examples ship in the wheel (python -m fusecc.examples says where)
    shipped = {p.name for p in (ROOT / "examples").glob("*.ir")}
    assert shipped and all(f"fusecc/examples/{name}" in files for name in shipped)
    assert {"fusecc/examples/host/launch.py", "fusecc/examples/host/launch.cpp", "fusecc/examples/README.md"} <= set(files)
    # The CUDA tools read these at run time (package-data in pyproject.toml).
    assert {"fusecc/runtime/cuda/cpu_harness/cuda_cpu.h", "fusecc/passes/backends/cuda/fusecc_cuda.cuh"} <= set(files)
