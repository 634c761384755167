"""Shared test setup: tests/ is importable, so test modules in subfolders can
use the helpers kept here (`program_gen`, `numerics`)."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import os

# Every pass's output is verified in the tests (fusecc.compile skips that
# outside them: driver/program.verify_each).
os.environ.setdefault("FUSECC_VERIFY_EACH", "1")
