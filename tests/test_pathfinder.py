"""Pathfinder: the same seed gives the same bytes, every label is exact at the pixel level, options out of range are
refused before anything is drawn, and the task feeds a run."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.cli import main
from bench.runs.primary import PRIMARY, primary
from bench.runs.tasks import TaskError, TaskOptions, get, names, pathfinder

CPU = torch.device("cpu")
N = 48


def digest(x: np.ndarray, y: np.ndarray) -> str:
    return hashlib.sha256(x.tobytes() + y.astype("<i8").tobytes()).hexdigest()[:16]


def test_the_same_seed_gives_the_same_bytes() -> None:
    pathfinder._round.cache_clear()
    x, y = pathfinder.images(N, 32, 9, 1, 1)
    assert x.shape == (N, 1, 32, 32) and x.dtype == np.uint8 and set(np.unique(x)) == {0, 255}
    # Pinned: a change of the drawing (or of numpy's PCG64 words) shows here; raise pathfinder.FORMAT with it.
    assert digest(x, y) == "4ec92e9d7b5c207a"
    pathfinder._round.cache_clear()
    assert digest(*pathfinder.images(N, 32, 9, 1, 1)) == digest(x, y)
    other = pathfinder.images(N, 32, 9, 1, 1, seed=1)
    assert digest(*other) != digest(x, y)


def test_a_larger_split_extends_the_smaller_and_the_splits_differ() -> None:
    small, big = pathfinder.images(N, 32, 9, 1, 1), pathfinder.images(3 * N, 32, 9, 1, 1)
    assert np.array_equal(big[0][:N], small[0]) and np.array_equal(big[1][:N], small[1])
    val = pathfinder.images(N, 32, 9, 1, 1, split=pathfinder.VAL_SPLIT)
    assert not np.array_equal(val[0], small[0])


@pytest.mark.parametrize(("size", "length", "distractors"), [(32, 9, 1), (32, 6, 2), (24, 5, 0)])
def test_labels_are_exact_at_the_pixel_level(size: int, length: int, distractors: int) -> None:
    geo = pathfinder.geometry(N, size, length, distractors, 0, 0)
    grey, owner = pathfinder.render(geo, size)
    assert np.array_equal(grey, np.where(owner != 0, 255, 0))
    assert geo["points"].shape == (N, 2 + distractors, 2 * length, 2)
    pix = geo["points"] // pathfinder.UNIT
    marks = geo["markers"] // pathfinder.UNIT
    for i in range(N):
        on = [[c for c in range(2 + distractors) if (pix[i, c] == m).all(1).any()] for m in marks[i]]
        ends = [[c for c in range(2 + distractors) if (pix[i, c][[0, -1]] == m).all(1).any()] for m in marks[i]]
        assert len(on[0]) == len(on[1]) == 1 and on == ends  # each marker on one contour, at one of its ends
        assert (on[0] == on[1]) == bool(geo["label"][i])  # label 1 exactly when both mark the same contour
        # No pixel of one contour is an 8-neighbour of another contour's, nor of a marker of another contour.
        blocks = [np.zeros((size, size), bool) for _ in range(2 + distractors)]
        for c in range(2 + distractors):
            blocks[c][pix[i, c, :, 1], pix[i, c, :, 0]] = True
        for m, (c,) in zip(marks[i], on, strict=True):
            blocks[c][m[1] - 1 : m[1] + 2, m[0] - 1 : m[0] + 2] = True
        grown = [np.pad(b, 1)[None] for b in blocks]
        for c in range(2 + distractors):
            near = np.zeros((size + 2, size + 2), bool)
            for dy in (-1, 0, 1):
                for dx in (-1, 0, 1):
                    near |= np.roll(grown[c][0], (dy, dx), (0, 1))
            others = np.any([g[0] for k, g in enumerate(grown) if k != c], 0)
            assert not (near & others).any(), (i, c)
    assert 0.25 < geo["label"].mean() < 0.75  # both classes, drawn with probability 1/2 each


def test_channels_repeat_the_grey_image() -> None:
    x1, y1 = pathfinder.images(N, 32, 9, 1, 1)
    x3, y3 = pathfinder.images(N, 32, 9, 1, 3)
    assert x3.shape == (N, 3, 32, 32) and all(np.array_equal(x3[:, c], x1[:, 0]) for c in range(3))
    assert np.array_equal(y1, y3)


def test_the_task_caches_its_splits_and_augments_by_the_squares_symmetries(tmp_path: Path) -> None:
    options = TaskOptions(data_dir=str(tmp_path), train_size=64, val_size=32, channels=2)
    task = get("pathfinder", options=options)
    files = sorted(p.name for p in (tmp_path / "pathfinder").iterdir())
    assert files == [f"v{pathfinder.FORMAT}-s32-l9-d1-seed0-split0-n64.npz",
                     f"v{pathfinder.FORMAT}-s32-l9-d1-seed0-split1-n32.npz"]
    x, y = pathfinder.images(64, 32, 9, 1, 2)
    assert torch.equal(task.train_x, torch.as_tensor(x)) and torch.equal(task.train_y, torch.as_tensor(y))
    again = get("pathfinder", options=options)  # read back from the folder
    assert torch.equal(again.train_x, task.train_x) and torch.equal(again.val_y, task.val_y)
    assert task.model_kwargs == {"num_classes": 2, "in_chans": 2, "image_size": 32}
    assert task.default_steps == pathfinder.DEFAULT_STEPS and task.info["augment"] == "dihedral8"
    batch, labels = next(task.train_batches(64, torch.Generator().manual_seed(0)))
    plain = task._normalise(task.train_x)
    perm = torch.randperm(64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(labels, task.train_y[perm])
    # Each sample is one of the 8 symmetries of the square (flips and a transpose), not all the same one.
    square = [plain[perm].flip(-1) if h else plain[perm] for h in (0, 1)]
    square = [s.flip(-2) if v else s for s in square for v in (0, 1)]
    square = [s.transpose(-1, -2) if t else s for s in square for t in (0, 1)]
    assert all(any(torch.equal(batch[i], s[i]) for s in square) for i in range(64))
    assert not torch.equal(batch, plain[perm])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"image_size": 8}, "--image-size must be an integer in [16, 128], got 8"),
        ({"contour_length": 10}, "--contour-length must be an integer in [2, 9] at --image-size 32 (a straight "
                                 "contour of that many dashes must fit), got 10"),
        ({"distractors": -1}, "--distractors must be an integer >= 0, got -1"),
        ({"channels": 4}, "--channels must be an integer in [1, 3], got 4"),
    ],
)
def test_options_out_of_range_are_refused(options: dict[str, int], message: str) -> None:
    with pytest.raises(TaskError, match=f"^pathfinder: {message}".replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        pathfinder.pathfinder(CPU, 0, TaskOptions(**options))


def test_too_crowded_images_are_refused() -> None:
    with pytest.raises(TaskError, match=r"^pathfinder: 18 contours of 4 dashes rarely fit apart in 16×16 images \(0 of "
                                        r"1024 drawn\); use fewer --distractors"):
        pathfinder.geometry(64, 16, 4, 16, 0, 0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--image-size", "200"], "pathfinder: --image-size must be an integer in [16, 128], got 200"),
        (["--contour-length", "12"], "pathfinder: --contour-length must be an integer in [2, 9] at --image-size 32"),
        (["--contour-length", "50"], "--contour-length must be an integer in [2, 41], got 50"),
        (["--distractors", "17"], "--distractors must be an integer in [0, 16], got 17"),
        (["--channels", "0"], "--channels must be an integer in [1, 3], got 0"),
    ],
)
def test_bench_run_refuses_them_before_compute(args: list[str], message: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    res = tmp_path / "res"
    code = main(["run", "--variant", "resnet20", "--task", "pathfinder", *args, "--results-dir", str(res),
                 "--data-dir", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {message}") and len(err.strip().splitlines()) == 1, err
    assert not res.exists() and not (tmp_path / "data").exists()


def test_every_task_names_its_primary_metric_and_pathfinder_is_scored_by_its_error() -> None:
    """A task missing from the table would be read by its loss: a classifier's report and compare must read error."""
    assert set(names()) <= set(PRIMARY), sorted(set(names()) - set(PRIMARY))
    assert primary("pathfinder").final == "val_error"
