"""Shared fixtures: fast run settings and GPU skipping."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

os.environ.setdefault("MPLBACKEND", "Agg")

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Each xdist worker gets one core: torch's default of one thread per core in every worker
    # oversubscribes the machine and slows small convs by orders of magnitude.
    torch.set_num_threads(1)

@pytest.fixture
def clean_plugins() -> Iterator[None]:
    """No plugin, and no variant it registered, outlives a test; torch on one thread (the machine is shared)."""
    import variants
    from bench.runs import plugins

    names, threads = variants.list_variants(), torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    plugins.unload_all()
    assert variants.list_variants() == names


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
