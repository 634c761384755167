# lit configuration for fusecc's golden tests (`// RUN:` lines + FileCheck).
import os
import sys

import lit.formats

config.name = "fusecc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".ir"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["inputs"]

# The tools come from the same Python environment that runs lit.
bin_dir = os.path.dirname(sys.executable)
config.environment["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])
for name in ("HOME", "TMPDIR", "PYTHONPATH", "FUSECC_CACHE_DIR"):
    if name in os.environ:
        config.environment[name] = os.environ[name]
# No optional features: every golden test runs everywhere. lit counts an
# UNSUPPORTED test as a success, so tests/test_filecheck.py accepts only PASS.

# Golden outputs must not depend on the machine running them.
config.environment["FUSECC_DETERMINISTIC"] = "1"

# Round trip through the generic form: print generic, parse, print custom.
config.substitutions.append(("%roundtrip", "fusecc-opt --print-generic %s | fusecc-opt"))
config.substitutions.append(("%python", sys.executable))
