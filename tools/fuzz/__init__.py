"""Differential fuzzing of fusecc (issue 16; docs/fuzzing.md).

    python -m fusecc.tools.fuzz --seeds 300                # reference + CPU
    python -m fusecc.tools.fuzz --seeds 300 --harness-every 20
    python -m fusecc.tools.fuzz --reduce case.json          # shrink a failure

A seeded generator (`generate.py`) writes random tensor programs from the
language reference: every op of the tensor dialect, broadcasting, negative
axes, negative-step slices, empty tensors, f16/bf16 chains, casts, i1
logic, NaN/±inf/-0 inputs, calls with several results, attention feeding
layout ops. Each program runs on the reference interpreter, the CPU target
and (for a subset) the generated CUDA C on the CPU harness; every result is
compared with `oracle.py`, an independent float64 evaluation written from
the language reference (it shares no code with the dialect's `evaluate`
hooks), under the per-dtype tolerances of `compare.py`. `reduce.py`
shrinks a failing program by delta debugging over its ops and shapes.

The package sits with the tools: it drives every level (runtime, driver)
and nothing imports it.
"""
