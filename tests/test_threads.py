"""torch's thread count set for a block and set back after it (bench.runs.threads), however the block ends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from bench.runs.config import RunConfig
from bench.runs.threads import run_threads, threads_set


@pytest.fixture
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_threads_set_restores_the_count_after_an_exception(one_thread: None) -> None:
    with pytest.raises(RuntimeError, match="step failed"), threads_set(2) as n:
        assert (n, torch.get_num_threads()) == (2, 2)
        raise RuntimeError("step failed")
    assert torch.get_num_threads() == 1


def test_threads_set_restores_the_count_after_a_block_that_ends_normally(one_thread: None) -> None:
    with threads_set(3):
        assert torch.get_num_threads() == 3
    assert torch.get_num_threads() == 1


def test_a_run_gets_its_threads_and_leaves_the_count_as_it_found_it_when_it_fails(one_thread: None) -> None:
    with pytest.raises(ValueError, match="diverged"), run_threads(RunConfig(variant="resnet20", threads=2)) as n:
        assert (n, torch.get_num_threads()) == (2, 2)
        raise ValueError("diverged")
    assert torch.get_num_threads() == 1
