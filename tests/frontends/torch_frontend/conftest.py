"""Shared fixtures of the PyTorch front end's tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def fresh_dynamo():
    """Dynamo's caches and fusecc's backend state cleared around a test, torch's seed fixed."""
    torch = pytest.importorskip("torch", reason="needs PyTorch: pip install 'fusecc[torch]'")
    import fusecc.torch

    torch._dynamo.reset()
    fusecc.torch.reset()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()
