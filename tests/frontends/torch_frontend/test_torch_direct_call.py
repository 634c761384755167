"""The backend's runner calls a static CPU program with the tensors' data
pointers (fusecc.torch._DirectCall, no arrays, no Program.__call__): it is
the path calls take, it matches eager and the general path bit for bit, in
f32 and bf16, and it hands back to the general path any tensor that does
not fit (dtype, shape, layout) and every `?`-shaped program."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch: pip install 'fusecc[torch]'")

import fusecc.torch  # noqa: E402
from torch_models import MLP  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("fresh_dynamo")]  # fresh_dynamo: conftest.py


@pytest.fixture
def direct_calls(monkeypatch):
    """How many runner calls went by data pointers, and how many were handed back."""
    counts = {"direct": 0, "handed back": 0}
    call = fusecc.torch._DirectCall.__call__

    def counting(self, tensors):
        outs = call(self, tensors)
        counts["direct" if outs is not None else "handed back"] += 1
        return outs

    monkeypatch.setattr(fusecc.torch._DirectCall, "__call__", counting)
    return counts


@pytest.fixture
def programs(monkeypatch):
    """The programs the backend compiles, in order."""
    found = []
    runner = fusecc.torch._runner

    def recording(program, *args, **kwargs):
        found.append(program)
        return runner(program, *args, **kwargs)

    monkeypatch.setattr(fusecc.torch, "_runner", recording)
    return found


def compile_mlp(dtype=torch.float32, **options):
    model = MLP().eval().to(dtype)
    return model, torch.compile(model, backend="fusecc", **options)


def test_frozen_calls_go_by_data_pointers_and_match_eager(direct_calls):
    model, compiled = compile_mlp()
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(4, 32)
            x[0, :3] = torch.tensor([float("nan"), -0.0, float("inf")])
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5, equal_nan=True)
    assert direct_calls == {"direct": 3, "handed back": 0}


def test_weights_as_inputs_go_by_data_pointers_too(direct_calls):
    model, compiled = compile_mlp(options={"freeze": False})
    with torch.no_grad():
        x = torch.randn(4, 32)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    assert direct_calls["direct"] == 1


def test_bf16_goes_by_data_pointers_with_the_general_paths_bits(direct_calls, monkeypatch):
    model, compiled = compile_mlp(torch.bfloat16)
    x = torch.randn(4, 32).to(torch.bfloat16)
    with torch.no_grad():
        direct = compiled(x)
        assert direct_calls["direct"] == 1 and direct.dtype == torch.bfloat16
        torch._dynamo.reset()
        monkeypatch.setattr(fusecc.torch._DirectCall, "of", staticmethod(lambda program, dtypes: None))
        general = torch.compile(model, backend="fusecc")(x)
    assert direct_calls["direct"] == 1  # the second compile took the general path
    torch.testing.assert_close(direct, general, rtol=0, atol=0)


def test_tensors_that_do_not_fit_are_handed_back(programs):
    model, compiled = compile_mlp()
    x = torch.randn(4, 32)
    with torch.no_grad():
        compiled(x)
    (program,) = programs
    direct = fusecc.torch._DirectCall.of(program, [torch.float32])
    (got,) = direct([x])
    np.testing.assert_array_equal(got.numpy(), next(iter(program(x.numpy()).values())))
    (again,) = direct([x])
    assert not np.shares_memory(got.numpy(), again.numpy())  # fresh outputs every call
    assert direct([x.double()]) is None
    assert direct([torch.randn(32, 4).t()]) is None  # the right shape, not contiguous
    assert direct([torch.randn(5, 32)]) is None
    assert direct([x.numpy()]) is None
    assert direct([x, x]) is None


def test_programs_with_dynamic_dims_take_the_general_path(programs, direct_calls):
    model, compiled = compile_mlp(dynamic=True)
    with torch.no_grad():
        for rows in (3, 7, 2):
            x = torch.randn(rows, 32)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    assert programs and all(fusecc.torch._DirectCall.of(p, [torch.float32]) is None for p in programs)
    assert direct_calls["direct"] == 0


def test_the_call_overhead_benchmark_runs_its_torch_program():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    import call_overhead

    result = call_overhead.measure_torch(layers=2, threads=1, calls=2, rounds=1)  # checks the output against eager
    assert result["launch steps"] == 2
    assert [row["name"] for row in result["rows"]][:3] == [
        "torch.compile(backend='fusecc') call", "... the backend's runner alone", "... its call of the program by data pointers"]
