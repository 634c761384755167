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
# `REQUIRES: loop-pipeline`: tests that compile tensor programs down to
# loops (and LLVM IR) run once those passes are registered.
try:
    from fusecc.compiler.pass_manager import parse_pipeline
    from fusecc.driver.pipelines import pipeline_for_level

    parse_pipeline(pipeline_for_level("loop", target="cpu"))
    config.available_features.add("loop-pipeline")
except Exception:
    pass

# Golden outputs must not depend on the machine running them.
config.environment["FUSECC_DETERMINISTIC"] = "1"

# Round trip through the generic form: print generic, parse, print custom.
config.substitutions.append(("%roundtrip", "fusecc-opt --print-generic %s | fusecc-opt"))
config.substitutions.append(("%python", sys.executable))
