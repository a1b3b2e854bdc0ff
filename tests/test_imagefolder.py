"""The imagefolder task on real JPEG/PNG trees and WebDataset tars: decoded pixels, batch order, per-rank shares,
worker-independent augmentation, the loader measured apart from the model, and every bad input (exit 2, one
line naming the file and the fix, nothing written)."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from _datafiles import CLASSES, add_member, encoded, gradient, image, make_shards, make_tree

from bench.cli import main
from bench.runs.tasks import TaskError, TaskOptions, diskimages, get, loading, webdata

CPU = torch.device("cpu")
MEAN = torch.tensor(diskimages.IMAGENET_MEAN).view(3, 1, 1) * 255
STD = torch.tensor(diskimages.IMAGENET_STD).view(3, 1, 1) * 255
# two steps cannot leave chance: no chance rule
RUN = ["--steps", "2", "--batch-size", "6", "--measure", "--quiet", "--workers", "0", "--chance-band", "0"]


def task(root: Path, **kw: object) -> diskimages.LoaderImageTask:
    options = TaskOptions(data_path=str(root), **{"image_size": 32, "workers": 0, **kw})  # type: ignore[arg-type]
    built = get("imagefolder", options=options)
    assert isinstance(built, diskimages.LoaderImageTask)
    return built


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "tree")


def test_the_tree_is_read_as_imagefolder_lays_it_out(tree: Path) -> None:
    t = task(tree)
    assert t.model_kwargs == {"num_classes": 3, "in_chans": 3, "image_size": 32}
    assert (t.num_train, t.info["val_size"], t.info["classes"], t.loader_workers) == (18, 6, 3, 0)
    assert t.info["class_names"] == list(CLASSES) and t.info["layout"] == "folders"
    assert t.per_rank_batches and t.kind == "image"


def test_a_validation_image_decodes_to_its_centre_crop(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "tree", val=1)
    shutil.rmtree(root / "val" / "cat")
    (root / "val" / "cat").mkdir()
    gradient(256).save(root / "val" / "cat" / "known.png")
    t = task(root, image_size=224)
    x, y = next(t.val_batches(3))
    assert x.shape == (3, 3, 224, 224) and x.dtype == torch.float32 and y.tolist() == [0, 1, 2]
    # Resize(256) leaves a 256x256 image as it is; CenterCrop(224) starts at (16, 16).
    i, j = torch.meshgrid(torch.arange(224), torch.arange(224), indexing="ij")
    want = torch.stack([j + 16, i + 16, torch.full_like(i, 77)]).float()
    assert torch.allclose(x[0], (want - MEAN) / STD, atol=1e-5)
    # A JPEG of one colour under noise keeps its colour through resize and crop.
    dog = x[1] * STD + MEAN
    assert torch.allclose(dog.mean(dim=(1, 2)), torch.tensor([30.0, 200.0, 30.0]), atol=4)


def test_training_batches_are_seeded_per_sample_whatever_the_workers(tree: Path) -> None:
    def batches(workers: int, seed: int) -> list[torch.Tensor]:
        stream = task(tree, workers=workers).train_batches(6, torch.Generator().manual_seed(seed))
        return [torch.cat([x.flatten(1), y[:, None].float()], 1) for x, y in (next(stream) for _ in range(4))]

    alone = batches(0, 3)
    assert all(torch.equal(a, b) for a, b in zip(alone, batches(2, 3), strict=True))  # two worker processes
    assert not all(torch.equal(a, b) for a, b in zip(alone, batches(0, 4), strict=True))
    assert alone[0].shape == (6, 3 * 32 * 32 + 1)


def test_two_ranks_read_the_two_halves_of_the_one_process_batch(tree: Path) -> None:
    def first(rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
        return next(task(tree, rank=rank, world_size=world).train_batches(6, torch.Generator().manual_seed(0)))

    x, y = first(0, 1)
    (x0, y0), (x1, y1) = first(0, 2), first(1, 2)
    assert len(x0) == len(x1) == 3
    assert torch.equal(torch.cat([x0, x1]), x) and torch.equal(torch.cat([y0, y1]), y)


def test_an_epoch_visits_every_item_once_and_ranks_share_it_disjointly() -> None:
    def items(rank: int, world: int) -> list[int]:
        keys = iter(loading.EpochBatches(20, 4, torch.Generator().manual_seed(1), rank, world))
        return [int(i) for _ in range(5) for i in next(keys)[0]]

    one = items(0, 1)
    assert sorted(one) == list(range(20))
    halves = items(0, 2), items(1, 2)
    assert not set(halves[0]) & set(halves[1])
    assert [i for b in range(5) for h in halves for i in h[2 * b : 2 * b + 2]] == one
    assert loading.permute(np.arange(7), 5, 7).tolist() != list(range(7))


def test_subset_per_class_takes_the_first_images_of_each_class(tree: Path) -> None:
    t = task(tree, subset_per_class=2)
    assert (t.num_train, t.info["val_size"]) == (6, 6)
    assert t.reader.train_index.relative(0) == "train/cat/cat_000.jpg"
    assert [t.reader.train_index.relative(i) for i in range(6)][-1] == "train/eel/eel_001.jpg"


def test_eval_batches_caps_both_passes_on_a_fixed_subset(tree: Path) -> None:
    t = task(tree, eval_batches=1)
    first = [x for x, _ in t.val_batches(2)]
    assert len(first) == 1 and len(list(t.train_eval_batches(4))) == 1
    assert t.info["val_eval_size"] == 2 and t.info["train_eval_size"] == 4
    assert torch.equal(first[0], next(t.val_batches(2))[0])


def test_bench_run_writes_both_throughputs_and_the_input_bound_fraction(tree: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results"
    args = ["run", "--variant", "resnet18", "--task", "imagefolder", "--data-path", str(tree), "--image-size", "32",
            "--workers", "2", "--prefetch", "1", "--steps", "2", "--batch-size", "6", "--measure", "throughput",
            "--timing-warmup", "1", "--timing-repeats", "2", "--timing-steps", "3", "--eval-batches", "1",
            "--chance-band", "0", "--results-dir", str(results)]
    before = set(multiprocessing.active_children())
    assert main(args) == 0
    assert set(multiprocessing.active_children()) <= before  # the loaders' workers ended with the run
    run = json.loads(next((results / "runs").glob("*.json")).read_text())
    row, thr = run["row"], run["measurements"]["throughput"]
    assert row["status"] == "ok" and row["loader_workers"] == 2 and row["eval_time_s"] > 0
    assert row["model_samples_per_s"] > 0 and row["train_samples_per_s"] > 0
    assert 0 <= row["input_bound_fraction"] < 1
    assert row["input_bound_fraction"] == pytest.approx(max(0, 1 - thr["model_median_step_ms"] / thr["median_step_ms"]))
    assert thr["warmup_steps"] == 1 + 2 * 1  # the batches the workers prefetched are drained before timing
    assert thr["steps_per_repeat"] == 4  # 3 asked for, rounded up to whole rounds of the 2 workers
    assert run["task"]["workers"] == 2 and run["task"]["val_eval_size"] == 6
    assert "Throughput" in capsys.readouterr().out


def test_perf_loader_prints_a_row_per_worker_count(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perf", "loader", "--task", "imagefolder", "--data-path", str(tree), "--workers", "0", "1",
                 "--batch-size", "6", "--batches", "2", "--image-size", "32", "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "images per second" in lines[0] and "steady state" in lines[0]
    assert lines[1].split() == ["workers", "images_per_s", "ms_per_batch", "timed_batches", "first_batch_s", "queue_s"]
    assert [line.split()[0] for line in lines[2:]] == ["0", "1"]


# -- WebDataset shards -------------------------------------------------------------------------------------------------


def test_webdataset_shards_hold_the_same_images(tree: Path, tmp_path: Path) -> None:
    pytest.importorskip("webdataset")
    shards = make_shards(tmp_path / "shards", tree, per_shard=4)
    t = task(shards, eval_batches=None)
    assert t.info["layout"] == "webdataset" and (t.num_train, t.info["val_size"], t.info["classes"]) == (18, 6, 3)
    assert t.info["train_shards"] == 5 and t.info["val_shards"] == 2
    folder = torch.cat([x for x, _ in task(tree).val_batches(6)])
    sharded = torch.cat([x for x, _ in t.val_batches(6)])
    assert torch.equal(sharded, folder)  # same files, same order, same transform
    x, y = next(t.train_batches(6, torch.Generator().manual_seed(0)))
    assert x.shape == (6, 3, 32, 32) and set(y.tolist()) <= {0, 1, 2}


def test_webdataset_shards_are_split_over_ranks_and_workers(tree: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("webdataset")
    urls = [str(p) for p in webdata.shards(make_shards(tmp_path / "shards", tree, per_shard=3), "train")]
    assert len(urls) == 6  # 18 images, 3 per shard
    monkeypatch.setattr(webdata, "_sample", lambda raw, transform, seed: (raw["__key__"], 0, None))

    def epoch(rank: int, worker: int, workers: int) -> set[str]:
        if workers > 1:
            monkeypatch.setattr(webdata, "get_worker_info", lambda: type("W", (), {"id": worker,
                                                                                  "num_workers": workers}))
        stream = iter(webdata.TrainShards(urls, key=7, rank=rank, world=2, transform=None))
        mine = len(range(worker, 3, workers))  # of the rank's 3 shards of 3 samples, this worker's
        return {next(stream)[0] for _ in range(3 * mine)}

    ranks = [epoch(r, 0, 1) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == 9 and not ranks[0] & ranks[1] and len(ranks[0] | ranks[1]) == 18
    workers = [epoch(0, w, 2) for w in (0, 1)]  # rank 0's three shards over two workers: 2 + 1
    assert not workers[0] & workers[1] and workers[0] | workers[1] == ranks[0]


def test_bench_run_trains_on_webdataset_shards(tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("webdataset")
    shards = make_shards(tmp_path / "shards", tree, per_shard=4)
    results = tmp_path / "results"
    assert main(["run", "--variant", "resnet", "--depth", "8", "--task", "imagefolder", "--data-path", str(shards),
                 *RUN, "--results-dir", str(results)]) == 0
    run = json.loads(next((results / "runs").glob("*.json")).read_text())
    assert run["row"]["status"] == "ok" and run["task"]["layout"] == "webdataset" and run["row"]["steps"] == 2


# -- bad input ---------------------------------------------------------------------------------------------------------


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def broken_png_body(path: Path) -> None:
    """A PNG whose header and end marker are intact but whose pixel data is garbage: only decoding finds it."""
    data = bytearray(encoded(image(0, 9), "PNG"))
    start = data.index(b"IDAT") + 8
    data[start : start + 64] = bytes(64)
    path.write_bytes(bytes(data))


def bad_tree(tmp_path: Path, damage: str) -> tuple[Path, str]:
    """A tree with one defect; the text its error must name."""
    root = make_tree(tmp_path / "tree")
    victim = root / "train" / "dog" / "dog_001.jpg"
    if damage == "truncated":
        truncate(victim)
        return root, f"image {victim} is truncated"
    if damage == "not an image":
        victim.write_text("hello")
        return root, f"image {victim} is not an image"
    if damage == "empty file":
        victim.write_bytes(b"")
        return root, f"image {victim} is empty"
    if damage == "loose val":
        folders = [d for d in (root / "val").iterdir() if d.is_dir()]
        for d in folders:
            for f in list(d.iterdir()):
                f.rename(root / "val" / f.name)
            d.rmdir()
        return root, f"{root / 'val'} holds 6 images but no class folders"
    if damage == "loose train":
        shutil.rmtree(root / "train")
        (root / "train").mkdir()
        image(0, 0).save(root / "train" / "a.jpg")
        return root, f"{root / 'train'} has no class folders (1 images directly in it)"
    if damage == "classes differ":
        (root / "val" / "eel").rename(root / "val" / "emu")
        return root, "only in train: ['eel']; only in val: ['emu']"
    if damage == "empty class":
        shutil.rmtree(root / "val" / "eel")
        (root / "val" / "eel").mkdir()
        return root, f"{root / 'val' / 'eel'} holds no images"
    if damage == "no val":
        shutil.rmtree(root / "val")
        return root, f"{root / 'val'} is missing"
    if damage == "not a directory":
        return root / "train" / "cat" / "cat_000.jpg", "is not a directory"
    raise AssertionError(damage)


DAMAGES = ("truncated", "not an image", "empty file", "loose val", "loose train", "classes differ", "empty class",
           "no val", "not a directory")


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_bad_tree_is_one_error_line_before_anything_runs(damage: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    root, names = bad_tree(tmp_path, damage)
    results = tmp_path / "results"
    code = main(["run", "--variant", "resnet", "--depth", "8", "--task", "imagefolder", "--data-path", str(root), *RUN,
                 "--results-dir", str(results)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert names in err
    assert not results.exists()


def test_skip_bad_images_leaves_them_out_and_counts_them(tmp_path: Path) -> None:
    root, _ = bad_tree(tmp_path, "truncated")
    (root / "val" / "cat" / "cat_000.jpg").write_bytes(b"")
    t = task(root, skip_bad_images=True)
    assert (t.num_train, t.info["val_size"]) == (17, 5)
    left_out = t.info["bad_images_left_out"]
    assert left_out["count"] == 2 and [Path(p).name for p, _ in left_out["first"]] == ["dog_001.jpg", "cat_000.jpg"]


def test_an_image_that_fails_to_decode_in_training_is_named_or_replaced(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "tree", train=2)
    for f in (root / "train").glob("*/*"):
        broken_png_body(f)  # every training image: the first batch meets one whatever the order
    assert diskimages.check_image(str(next((root / "train").glob("*/*")))) is None  # the file check cannot see it
    with pytest.raises(TaskError, match=r"image .*train/.* cannot be decoded .*pass --skip-bad-images"):
        next(task(root).train_batches(2, torch.Generator().manual_seed(0)))
    make_tree(tmp_path / "good", train=2)
    shutil.copy(tmp_path / "good" / "train" / "cat" / "cat_000.jpg", root / "train" / "cat" / "cat_000.jpg")
    t = task(root, skip_bad_images=True)
    x, y = next(t.train_batches(6, torch.Generator().manual_seed(0)))
    assert x.shape == (6, 3, 32, 32) and (y == 0).all()  # each broken image replaced by the batch's good one
    assert t.info["bad_images_in_training"]["count"] == 5


def test_a_missing_data_path_is_bad_input() -> None:
    with pytest.raises(TaskError, match="task imagefolder needs --data-path ROOT"):
        get("imagefolder", options=TaskOptions())


@pytest.mark.parametrize("damage", ["no cls", "bad cls", "not a tar", "no val"])
def test_a_bad_webdataset_shard_is_named(damage: str, tree: Path, tmp_path: Path) -> None:
    pytest.importorskip("webdataset")
    shards = make_shards(tmp_path / "shards", tree, per_shard=4)
    victim = shards / "train-000001.tar"
    if damage == "no cls":
        with tarfile.open(victim, "w") as tar:
            add_member(tar, "lonely.jpg", encoded(image(0, 0)))
        want = f"WebDataset shard {victim}: sample 'lonely' has no .cls member"
    elif damage == "bad cls":
        with tarfile.open(victim, "w") as tar:
            add_member(tar, "x.jpg", encoded(image(0, 0)))
            add_member(tar, "x.cls", b"cat")
        want = f"WebDataset shard {victim}: sample 'x' has class b'cat'"
    elif damage == "not a tar":
        victim.write_bytes(b"not a tar at all" * 64)
        want = f"WebDataset shard {victim} is not a readable tar file"
    else:
        for p in shards.glob("val-*.tar"):
            p.unlink()
        want = "has train-*.tar shards but no val-*.tar shards"
    with pytest.raises(TaskError) as caught:
        task(shards)
    assert want in str(caught.value)
