"""Image tasks: digits split, synthetic data, batching by index, and on-device augmentation."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from bench.runs.tasks import Task, TaskError, TaskOptions, images

CPU = torch.device("cpu")


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def take(it, n: int) -> list:
    return [next(it) for _ in range(n)]


def indexed_task(n: int = 10) -> images.ImageTask:
    """A task whose i-th training image is the constant i, so batches reveal which samples they hold."""
    x = torch.arange(n, dtype=torch.float32).view(n, 1, 1, 1).expand(n, 1, 2, 2).contiguous()
    y = torch.arange(n)
    return images.ImageTask(
        name="indexed", kind="image", model_kwargs={}, device=CPU, train_x=x, train_y=y, val_x=x[:7], val_y=y[:7],
        mean=torch.zeros(1, 1, 1, 1), std=torch.ones(1, 1, 1, 1), eval_index=torch.tensor([8, 1, 3]),
    )  # fmt: skip


# --- digits ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def digits() -> Task:
    return images.digits(CPU, 0, TaskOptions())


def test_digits_shapes_and_kwargs(digits: Task) -> None:
    assert digits.model_kwargs == {"num_classes": 10, "in_chans": 1, "image_size": 8}
    assert digits.info["train_size"] == 1437 and digits.info["val_size"] == 360
    assert digits.info["split"] == "stratified 80%/20%, seed 0"
    assert digits.info["augment"] == "none" and digits.info["image_shape"] == [1, 8, 8]
    x, y = next(digits.val_batches(500))
    assert x.shape == (360, 1, 8, 8) and x.dtype == torch.float32 and y.dtype == torch.long


def test_digits_split_is_stratified_and_fixed(digits: Task) -> None:
    from sklearn.datasets import load_digits

    total = np.bincount(load_digits().target, minlength=10)
    val = np.bincount(torch.cat([y for _, y in digits.val_batches(100)]).numpy(), minlength=10)
    assert np.all(np.abs(val - 0.2 * total) < 1)  # every class keeps its share within one sample
    again = images.digits(CPU, 123, TaskOptions())  # the run seed does not move the split
    assert torch.equal(
        torch.cat([x for x, _ in again.val_batches(64)]), torch.cat([x for x, _ in digits.val_batches(64)])
    )


def test_digits_normalised_with_train_stats(digits: Task) -> None:
    x = digits._normalise(digits.train_x)
    assert abs(x.mean().item()) < 1e-5 and abs(x.std(correction=0).item() - 1) < 1e-5
    assert 0 < digits.info["mean"][0] < 1 and digits.info["pixel_scale"] == 16.0


def test_digits_never_augmented(digits: Task) -> None:
    # augment=True is the default, yet batches are exactly the normalised samples in permutation order.
    x, y = next(digits.train_batches(64, gen(3)))
    idx = torch.randperm(1437, generator=gen(3))[:64]
    assert torch.equal(x, digits._normalise(digits.train_x[idx])) and torch.equal(y, digits.train_y[idx])


# --- batching ----------------------------------------------------------------------------------------


def test_train_batches_are_epochs_of_permutations() -> None:
    task = indexed_task(10)
    batches = take(task.train_batches(3, gen(0)), 6)  # 3 batches per epoch: the 10th sample is dropped
    ids = [x[:, 0, 0, 0].long() for x, _ in batches]
    assert all(len(i) == 3 for i in ids)
    g = gen(0)
    first, second = torch.randperm(10, generator=g), torch.randperm(10, generator=g)
    assert torch.equal(torch.cat(ids[:3]), first[:9]) and torch.equal(torch.cat(ids[3:]), second[:9])
    assert all(torch.equal(x[:, 0, 0, 0].long(), y) for x, y in batches)


def test_train_batches_deterministic_in_generator() -> None:
    task = images.synthetic(CPU, 0, TaskOptions(image_size=16, train_size=64, val_size=8))
    a, b, c = (take(task.train_batches(16, gen(s)), 5) for s in (7, 7, 8))
    assert all(torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b, strict=True))
    assert not torch.equal(a[0][0], c[0][0])


def test_val_and_train_eval_passes() -> None:
    task = indexed_task(10)
    val = list(task.val_batches(3))
    assert [len(y) for _, y in val] == [3, 3, 1]  # one pass, the last batch partial, in order
    assert torch.equal(torch.cat([y for _, y in val]), torch.arange(7))
    assert torch.equal(torch.cat([y for _, y in task.train_eval_batches(2)]), torch.tensor([8, 1, 3]))


def test_train_eval_subset_is_capped_and_fixed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images, "TRAIN_EVAL_CAP", 50)
    opts = TaskOptions(image_size=8, train_size=200, val_size=4)
    task, again = images.synthetic(CPU, 0, opts), images.synthetic(CPU, 1, opts)
    assert task.info["train_eval_size"] == 50
    x, _ = next(task.train_eval_batches(1000))
    assert x.shape == (50, 3, 8, 8) and len(set(task.eval_index.tolist())) == 50
    assert torch.equal(x, task._normalise(task.train_x[task.eval_index]))  # no augmentation
    assert torch.equal(x, next(again.train_eval_batches(1000))[0])


@pytest.mark.parametrize("bs", [0, -4])
def test_batch_size_must_be_positive(bs: int) -> None:
    task = indexed_task()
    for call in (
        lambda: task.train_batches(bs, gen()),
        lambda: task.val_batches(bs),
        lambda: task.train_eval_batches(bs),
    ):
        with pytest.raises(TaskError, match=f"batch size must be a positive integer, got {bs}"):
            call()


def test_batch_larger_than_train_split() -> None:
    with pytest.raises(TaskError, match="batch size 11 exceeds the 10 training samples of indexed"):
        indexed_task(10).train_batches(11, gen())


def test_generator_on_another_device() -> None:
    task = indexed_task()
    task.device = torch.device("meta")  # stands in for an accelerator: only the device type is compared
    with pytest.raises(TaskError, match=r"generator is on cpu but indexed data is on meta.*torch.Generator\(device="):
        task.train_batches(2, gen())


# --- synthetic ---------------------------------------------------------------------------------------


def nearest_mean_accuracy(task: Task) -> float:
    """Val accuracy of a nearest-class-mean classifier fitted on the train split."""
    xt, yt = task._normalise(task.train_x).flatten(1), task.train_y
    centres = torch.stack([xt[yt == k].mean(0) for k in range(task.model_kwargs["num_classes"])])
    xv = task._normalise(task.val_x).flatten(1)
    return (torch.cdist(xv, centres).argmin(1) == task.val_y).float().mean().item()


def test_synthetic_shapes_and_learnable() -> None:
    opts = TaskOptions(image_size=12, num_classes=5, train_size=500, val_size=300, augment=False)
    task = images.synthetic(CPU, 0, opts)
    assert task.model_kwargs == {"num_classes": 5, "in_chans": 3, "image_size": 12}
    assert task.train_x.shape == (500, 3, 12, 12) and task.val_x.shape == (300, 3, 12, 12)
    assert task.info["augment"] == "none" and task.info["random_labels"] is False
    assert nearest_mean_accuracy(task) > 0.95
    assert torch.equal(images.synthetic(CPU, 99, opts).train_x, task.train_x)  # fixed data seed


def test_synthetic_random_labels() -> None:
    opts = TaskOptions(image_size=12, num_classes=5, train_size=500, val_size=1000, augment=False)
    true, rand = images.synthetic(CPU, 0, opts), images.synthetic(CPU, 0, replace(opts, random_labels=True))
    assert rand.info["random_labels"] is True
    assert torch.equal(rand.train_x, true.train_x)  # same inputs, only the labels differ
    assert set(rand.train_y.unique().tolist()) == set(range(5))
    # Labels are independent of the inputs: they agree with the hidden classes at chance rate (1/5).
    assert abs((rand.val_y == true.val_y).float().mean().item() - 0.2) < 0.06
    assert nearest_mean_accuracy(rand) < 0.3


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_classes", 1, "num_classes must be at least 2, got 1; pass --num-classes 2 or more"),
        ("image_size", 0, "image_size must be at least 1, got 0; pass --image-size 1 or more"),
        ("train_size", 0, "train_size must be at least 1, got 0; pass --train-size 1 or more"),
        ("val_size", -1, "val_size must be at least 1, got -1; pass --val-size 1 or more"),
    ],
)
def test_synthetic_rejects_bad_options(field: str, value: int, message: str) -> None:
    with pytest.raises(TaskError, match=f"^synthetic: {message}$"):
        images.synthetic(CPU, 0, TaskOptions(**{field: value}))


def test_synthetic_augmented_batches() -> None:
    task = images.synthetic(CPU, 0, TaskOptions(image_size=32, train_size=256, val_size=8))
    assert task.info["augment"] == "pad4-crop32-hflip"
    x, y = next(task.train_batches(128, gen(5)))
    idx = torch.randperm(256, generator=gen(5))[:128]
    plain = task._normalise(task.train_x[idx])
    assert x.shape == plain.shape and torch.equal(y, task.train_y[idx])
    changed = (x != plain).flatten(1).any(1)
    assert changed.float().mean() > 0.9  # only the centred, unflipped draws (1/81 · 1/2) stay put


# --- augmentation primitives -------------------------------------------------------------------------


def test_pad_crop_windows_stay_inside_padding() -> None:
    x = torch.randn(64, 3, 10, 10, generator=gen(1))
    out = images.pad_crop(2)(x, gen(2))
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    offsets = []
    for i in range(64):  # each output is exactly one 10×10 window of the zero-padded image
        hits = [(r, c) for r in range(5) for c in range(5) if torch.equal(out[i], padded[i, :, r : r + 10, c : c + 10])]
        assert len(hits) == 1
        offsets.append(hits[0])
    assert len(set(offsets)) > 10  # offsets vary per sample, so most crops move pixels
    again = images.pad_crop(2)(x, gen(2))
    assert torch.equal(out, again)


def test_pad_crop_pads_with_zeros() -> None:
    out = images.pad_crop(4)(torch.ones(200, 1, 32, 32), gen(0))
    zero_rows = (out == 0).all(dim=3).sum(dim=(1, 2))
    zero_cols = (out == 0).all(dim=2).sum(dim=(1, 2))
    assert zero_rows.max() == 4 and zero_cols.max() == 4  # a shift never exceeds the padding
    assert out.sum() < 200 * 32 * 32 and set(out.unique().tolist()) == {0.0, 1.0}


def test_hflip_mirrors_about_half() -> None:
    x = torch.arange(400 * 4, dtype=torch.float32).view(400, 1, 1, 4)
    out = images.hflip(x, gen(0))
    flipped = (out == x.flip(-1)).flatten(1).all(1)
    kept = (out == x).flatten(1).all(1)
    assert torch.all(flipped ^ kept) and 150 < flipped.sum() < 250


def test_cifar_augmentation_scales_padding() -> None:
    assert images.cifar_augmentation(32)[1] == "pad4-crop32-hflip"
    assert images.cifar_augmentation(8)[1] == "pad1-crop8-hflip"


def test_channel_stats_exact() -> None:
    x = np.random.default_rng(0).integers(0, 256, (9, 3, 4, 5), dtype=np.uint8)
    mean, std = images.channel_stats(x, chunk=4)
    np.testing.assert_allclose(mean, x.mean(axis=(0, 2, 3)), rtol=1e-12)
    np.testing.assert_allclose(std, x.std(axis=(0, 2, 3)), rtol=1e-10)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_augmentation_on_the_device_matches_shapes_and_is_deterministic(device: str) -> None:
    dev = torch.device(device)
    task = images.synthetic(dev, 0, TaskOptions(image_size=32, train_size=256, val_size=8))
    a = take(task.train_batches(64, torch.Generator(device=dev).manual_seed(1)), 3)
    b = take(task.train_batches(64, torch.Generator(device=dev).manual_seed(1)), 3)
    assert all(x.device.type == device and x.shape == (64, 3, 32, 32) for x, _ in a)
    assert all(torch.equal(x1, x2) for (x1, _), (x2, _) in zip(a, b, strict=True))
