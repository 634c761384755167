"""Shared test setup: tests/ is importable, so test modules in subfolders can
use the helpers kept here (`program_gen`, `numerics`)."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
