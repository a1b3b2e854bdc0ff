"""A resumed run's data stream, for the tasks that read from disk: the batches from step k on are exactly those of
the uninterrupted stream, across epoch ends, with any worker count, and the batches before k are not read (a run
resumed near the end of an ImageNet epoch must not decode the epoch again)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from _datafiles import make_shards, make_tree
from test_resume import assert_same, plugin, recorded
from test_tokens import llmc_set

from bench.cli import main
from bench.runs import resume
from bench.runs.tasks import TaskOptions, get, imagefolder, loading, tokens, webdata
from bench.runs.tasks.base import Task

pytestmark = pytest.mark.usefixtures("clean_plugins")


def flat(batches: Iterator[tuple[torch.Tensor, torch.Tensor]], n: int) -> list[torch.Tensor]:
    return [torch.cat([x.reshape(len(x), -1).float(), y.reshape(len(y), -1).float()], 1)
            for x, y in (next(batches) for _ in range(n))]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(u, v) for u, v in zip(a, b, strict=True))


def check_resumes(task: Task, batch: int, start: int, reads: list[int]) -> None:
    """``train_batches_from(start)`` gives the uninterrupted stream's batches from ``start`` on, reading only those
    (``reads`` counts the items the task read) and leaving its generator where the uninterrupted stream does."""
    whole_gen, from_gen = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    whole = flat(task.train_batches(batch, whole_gen), start + 4)[start:]
    reads.clear()
    resumed = flat(task.train_batches_from(batch, from_gen, start), 4)
    assert same(resumed, whole)
    assert len(reads) == 4 * batch  # the four batches taken, none of the skipped ones
    assert torch.equal(whole_gen.get_state(), from_gen.get_state())


def test_epoch_keys_start_at_a_global_batch_and_draw_the_skipped_epochs_keys() -> None:
    whole = iter(loading.EpochBatches(20, 4, torch.Generator().manual_seed(1), 1, 2))
    keys = [next(whole) for _ in range(13)]  # five batches an epoch: into the third epoch
    for start in (0, 3, 5, 11):
        resumed = iter(loading.EpochBatches(20, 4, torch.Generator().manual_seed(1), 1, 2, start))
        got = [next(resumed) for _ in range(13 - start)]
        assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
                   for a, b in zip(got, keys[start:], strict=True))


def test_a_token_stream_resumes_across_an_epoch_without_reading_the_skipped_windows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    original = tokens.TokenWindows.__getitem__

    def counted(self, key):  # type: ignore[no-untyped-def]
        out = original(self, key)
        reads.extend(range(len(out)))
        return out

    monkeypatch.setattr(tokens.TokenWindows, "__getitem__", counted)
    task = get("tokens", options=TaskOptions(data_path=str(llmc_set(tmp_path)), seq_len=16, vocab_size=4000,
                                             workers=0))
    check_resumes(task, 9, 14, reads)  # 11 batches an epoch: the resumed stream starts inside the second


@pytest.mark.parametrize("workers", [0, 2])
def test_an_image_folder_resumes_without_decoding_the_skipped_images(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    reads: list[int] = []
    original = imagefolder.FolderImages.__getitem__

    def counted(self, key):  # type: ignore[no-untyped-def]
        reads.extend(key[0].tolist())
        return original(self, key)

    monkeypatch.setattr(imagefolder.FolderImages, "__getitem__", counted)
    task = get("imagefolder", options=TaskOptions(data_path=str(make_tree(tmp_path / "tree")), image_size=16,
                                                  workers=0))
    check_resumes(task, 6, 4, reads)  # 18 images, 3 batches an epoch
    if workers:  # the order is the same with worker processes (their reads are in other processes: not counted)
        parallel = get("imagefolder", options=TaskOptions(data_path=str(tmp_path / "tree"), image_size=16,
                                                          workers=workers))
        a = flat(parallel.train_batches_from(6, torch.Generator().manual_seed(5), 4), 3)
        b = flat(task.train_batches_from(6, torch.Generator().manual_seed(5), 4), 3)
        assert same(a, b)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers", [0, 2, 3])
def test_webdataset_shards_resume_where_the_stream_stood_without_decoding_the_skipped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    """The order of a shard stream depends on the worker count (documented): a resumed run has the count it had. A
    start that is not a multiple of the workers hands the first batch to the worker whose turn it was."""
    pytest.importorskip("webdata" + "set")
    shards = make_shards(tmp_path / "shards", make_tree(tmp_path / "tree"), per_shard=3)  # 6 training shards
    decoded = []
    original = webdata._sample
    monkeypatch.setattr(webdata, "_sample", lambda raw, transform, seed: decoded.append(1) or original(raw, transform,
                                                                                                     seed))
    task = get("imagefolder", options=TaskOptions(data_path=str(shards), image_size=16, workers=workers))
    whole = flat(task.train_batches(4, torch.Generator().manual_seed(5)), 12)  # past an epoch (18 images)
    for start in (1, 5, 7):
        decoded.clear()
        resumed = flat(task.train_batches_from(4, torch.Generator().manual_seed(5), start), 12 - start)
        assert same(resumed, whole[start:]), start
        if workers == 0:
            assert len(decoded) == 4 * (12 - start)


def test_a_run_on_token_shards_stopped_and_rerun_ends_exactly_as_uninterrupted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    spec = str(plugin(monkeypatch, tmp_path, 9))
    run = ["run", "--variant", "stopper", "--task", "tokens", "--data-path", str(llmc_set(tmp_path / "data")),
           "--vocab-size", "4000", "--seq-len", "16", "--batch-size", "9", "--steps", "16", "--eval-every", "4",
           "--optimizer", "adamw", "--lr", "3e-3", "--deterministic", "--measure", "--save-checkpoint", "--quiet",
           "--workers", "0", "--plugin", spec]  # 11 batches an epoch: the run crosses one after it resumes
    assert main([*run, "--results-dir", str(tmp_path / "cut")]) == resume.EXIT_PREEMPTED, capsys.readouterr().err
    assert main([*run, "--results-dir", str(tmp_path / "cut")]) == 0
    assert main([*run, "--results-dir", str(tmp_path / "whole")]) == 0
    cut, whole = recorded(tmp_path / "cut"), recorded(tmp_path / "whole")
    assert_same(cut, whole)
