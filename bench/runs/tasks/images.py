"""Image classification tasks: digits, synthetic, CIFAR-10 and CIFAR-100, held on the device.

- ``cifar10``/``cifar100``: "Learning Multiple Layers of Features from Tiny Images" (Krizhevsky, 2009),
  the official 50k/10k train/test split; augmentation is that of "Deep Residual Learning for Image
  Recognition" (He et al., 2015), Sec. 4.2: 4-pixel zero padding, a random 32×32 crop and a random
  horizontal flip. As in fb.resnet.torch (Facebook's reference reimplementation), images are normalised
  before the crop, so the zero padding is zero in normalised units (the mean pixel).
- ``digits``: scikit-learn's 8×8 handwritten digits (the UCI optical digits test set, Alpaydin & Kaynak,
  1998), no download; never augmented: digits are not flip-invariant and an 8×8 image has no margin to crop.
- ``synthetic``: class templates plus noise, any size; ``random_labels`` replaces every label by an
  independent uniform draw, as in "Understanding deep learning requires rethinking generalization"
  (Zhang et al., 2017), so fitting the training set measures pure optimisation and val accuracy is chance.

The datasets are fixed: the run seed changes the model init and the batch order (through the generator the
loop passes to :meth:`ImageTask.train_batches`), never the data or the split.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bench.runs.tasks import datasets
from bench.runs.tasks.base import Batch, Task, TaskError, TaskOptions, check_fits, prior_entropy

DIGITS_SPLIT_SEED = 0  # fixed stratified 80/20 split: 1437 train / 360 val
DIGITS_VAL_FRACTION = 0.2
SYNTHETIC_DATA_SEED = 0  # templates, noise and labels of `synthetic`; independent of the run seed
SYNTHETIC_NOISE = 1.0  # per-pixel noise std against unit-std templates
TRAIN_EVAL_CAP = 10_000  # training-error pass: a fixed subset, so its cost stays bounded on CIFAR
TRAIN_EVAL_SEED = 0

Augmentation = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


def pad_crop(pad: int) -> Augmentation:
    """Zero-pad by ``pad`` pixels and crop back to the input size at a random offset, per sample, vectorised."""

    def apply(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        b, c, h, w = x.shape
        padded = F.pad(x, (pad, pad, pad, pad))
        off = torch.randint(0, 2 * pad + 1, (b, 2), generator=gen, device=x.device)
        # Two gathers, rows then columns, cut every sample's own window at once: no per-sample Python loop.
        rows = (off[:, :1] + torch.arange(h, device=x.device)).view(b, 1, h, 1).expand(b, c, h, w + 2 * pad)
        cols = (off[:, 1:] + torch.arange(w, device=x.device)).view(b, 1, 1, w).expand(b, c, h, w)
        return padded.gather(2, rows).gather(3, cols)

    return apply


def hflip(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Mirror each sample left-right with probability 1/2."""
    flip = torch.rand(x.shape[0], generator=gen, device=x.device) < 0.5
    return torch.where(flip.view(-1, 1, 1, 1), x.flip(-1), x)


def cifar_augmentation(image_size: int) -> tuple[tuple[Augmentation, ...], str]:
    # He et al. pad 4 pixels around 32; other sizes keep that ratio (size // 8).
    pad = image_size // 8
    return (pad_crop(pad), hflip), f"pad{pad}-crop{image_size}-hflip"


@dataclass(kw_only=True, repr=False, eq=False)
class ImageTask(Task):
    """Images (N, C, H, W) and labels on the device; raw pixels are normalised per batch.

    Raw pixels stay in their storage dtype (uint8 for CIFAR and digits) so the dataset takes a quarter of
    the device memory a float copy would, which keeps the memory measurement about the model.
    """

    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    mean: torch.Tensor  # (1, C, 1, 1), raw pixel units, from the training split
    std: torch.Tensor
    augmentations: tuple[Augmentation, ...] = ()
    eval_index: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))

    def _normalise(self, raw: torch.Tensor) -> torch.Tensor:
        return (raw.float() - self.mean) / self.std

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        n = self.train_y.shape[0]
        _check_batch_size(batch_size)
        if batch_size > n:
            raise TaskError(
                f"batch size {batch_size} exceeds the {n} training samples of {self.name}; use a smaller one"
            )
        if generator.device.type != self.device.type:
            raise TaskError(
                f"generator is on {generator.device} but {self.name} data is on {self.device}; "
                "create it with torch.Generator(device=task.device)"
            )
        return self._train_batches(batch_size, generator)

    def _train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        n = self.train_y.shape[0]
        while True:  # one permutation per epoch; drop_last keeps every batch the same shape
            perm = torch.randperm(n, generator=generator, device=self.device)
            for start in range(0, n - batch_size + 1, batch_size):
                idx = perm[start : start + batch_size]
                x = self._normalise(self.train_x[idx])
                for augment in self.augmentations:
                    x = augment(x, generator)
                yield x, self.train_y[idx]

    def val_batches(self, batch_size: int) -> Iterator[Batch]:
        _check_batch_size(batch_size)
        return self._passes(self.val_x, self.val_y, batch_size)

    def train_eval_batches(self, batch_size: int) -> Iterator[Batch]:
        _check_batch_size(batch_size)
        return self._passes(self.train_x[self.eval_index], self.train_y[self.eval_index], batch_size)

    def _passes(self, xs: torch.Tensor, ys: torch.Tensor, batch_size: int) -> Iterator[Batch]:
        for start in range(0, ys.shape[0], batch_size):
            yield self._normalise(xs[start : start + batch_size]), ys[start : start + batch_size]


def _check_batch_size(batch_size: int) -> None:
    if batch_size < 1:
        raise TaskError(f"batch size must be a positive integer, got {batch_size}")


def channel_stats(x: np.ndarray, chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and population std of (N, C, H, W) data, accumulated in float64 over chunks."""
    total = np.zeros(x.shape[1])
    square = np.zeros(x.shape[1])
    for start in range(0, len(x), chunk):
        part = x[start : start + chunk].astype(np.float64)
        total += part.sum(axis=(0, 2, 3))
        square += np.square(part).sum(axis=(0, 2, 3))
    count = x.shape[0] * x.shape[2] * x.shape[3]
    mean = total / count
    return mean, np.sqrt(np.maximum(square / count - mean**2, 0.0))


def _build(
    name: str,
    device: torch.device,
    train: tuple[np.ndarray, np.ndarray],
    val: tuple[np.ndarray, np.ndarray],
    *,
    num_classes: int,
    scale: float,
    augmentation: tuple[tuple[Augmentation, ...], str] | None,
    info: Mapping[str, Any],
) -> ImageTask:
    """Move a split to ``device`` with train-split stats; ``scale`` converts raw units to [0, 1] for the record."""
    mean, std = channel_stats(train[0])
    if np.any(std == 0):
        raise TaskError(f"{name}: a channel of the training split is constant (std 0); the data is degenerate")
    augmentations, augment_name = augmentation or ((), "none")
    c, h, w = train[0].shape[1:]
    eval_gen = torch.Generator().manual_seed(TRAIN_EVAL_SEED)
    eval_index = torch.randperm(len(train[1]), generator=eval_gen)[:TRAIN_EVAL_CAP].sort().values

    def put(a: np.ndarray, dtype: torch.dtype | None = None) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(a), dtype=dtype).to(device)

    info = {
        "train_size": len(train[1]),
        "val_size": len(val[1]),
        "train_eval_size": len(eval_index),
        "image_shape": [int(c), int(h), int(w)],
        "num_classes": num_classes,
        "mean": [float(m / scale) for m in mean],
        "std": [float(s / scale) for s in std],
        "pixel_scale": scale,
        "augment": augment_name,
        **info,
    }
    return ImageTask(
        name=name,
        kind="image",
        device=device,
        info=info,
        num_train=len(train[1]),
        model_kwargs={"num_classes": num_classes, "in_chans": int(c), "image_size": int(h)},
        train_x=put(train[0]),
        train_y=put(train[1], torch.long),
        val_x=put(val[0]),
        val_y=put(val[1], torch.long),
        mean=put(mean.reshape(1, -1, 1, 1), torch.float32),
        std=put(std.reshape(1, -1, 1, 1), torch.float32),
        augmentations=augmentations,
        eval_index=eval_index.to(device),
        chance_loss=prior_entropy(train[1]),
    )


def digits(device: torch.device, seed: int, options: TaskOptions) -> Task:
    """scikit-learn's 1797 8×8 digits, stratified 80/20 split (split seed 0), 1 channel, no augmentation."""
    from sklearn.datasets import load_digits  # scikit-learn loads in ~2 s: only when the digits are asked for
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x = bunch.images.astype(np.uint8)[:, None]  # pixel values are integers 0..16
    y = bunch.target.astype(np.int64)
    train_i, val_i = train_test_split(
        np.arange(len(y)), test_size=DIGITS_VAL_FRACTION, stratify=y, random_state=DIGITS_SPLIT_SEED
    )
    info = {"split": f"stratified {1 - DIGITS_VAL_FRACTION:.0%}/{DIGITS_VAL_FRACTION:.0%}, seed {DIGITS_SPLIT_SEED}"}
    return _build(
        "digits",
        device,
        (x[train_i], y[train_i]),
        (x[val_i], y[val_i]),
        num_classes=10,
        scale=16.0,
        augmentation=None,
        info=info,
    )


def synthetic(device: torch.device, seed: int, options: TaskOptions) -> Task:
    """Low-frequency class templates plus Gaussian noise, 3 channels; optionally random labels."""
    size, k = options.image_size, options.num_classes
    for value, what, flag in (
        (size, "image_size", "--image-size"),
        (options.train_size, "train_size", "--train-size"),
        (options.val_size, "val_size", "--val-size"),
    ):
        if value < 1:
            raise TaskError(f"synthetic: {what} must be at least 1, got {value}; pass {flag} 1 or more")
    if k < 2:
        raise TaskError(f"synthetic: num_classes must be at least 2, got {k}; pass --num-classes 2 or more")
    n = options.train_size + options.val_size
    # float32 inputs, drawn noise and the sum of the two, then the class templates: checked before any of it exists
    check_fits(4 * 3 * size * size * (3 * n + k) + 16 * n, f"synthetic: --train-size {options.train_size} and "
               f"--val-size {options.val_size} images of --image-size {size}")
    gen = torch.Generator().manual_seed(SYNTHETIC_DATA_SEED)
    # Templates upsampled from a 4×4 grid are smooth, so a 1/8-image shift or a flip keeps most of the class
    # signal and the augmented task stays learnable.
    coarse = torch.randn(k, 3, 4, 4, generator=gen)
    templates = F.interpolate(coarse, size=(size, size), mode="bilinear", align_corners=False)
    templates = (templates - templates.mean()) / templates.std().clamp_min(1e-6)
    n_train, n_val = options.train_size, options.val_size
    classes = torch.randint(0, k, (n_train + n_val,), generator=gen)
    x = templates[classes] + SYNTHETIC_NOISE * torch.randn(n_train + n_val, 3, size, size, generator=gen)
    # Drawn after the inputs, so the inputs are identical in both modes and only the labels differ.
    random = torch.randint(0, k, (n_train + n_val,), generator=gen)
    y = random if options.random_labels else classes
    xs, ys = x.numpy(), y.numpy()
    info = {"data_seed": SYNTHETIC_DATA_SEED, "noise_std": SYNTHETIC_NOISE, "random_labels": options.random_labels}
    return _build(
        "synthetic",
        device,
        (xs[:n_train], ys[:n_train]),
        (xs[n_train:], ys[n_train:]),
        num_classes=k,
        scale=1.0,
        augmentation=cifar_augmentation(size) if options.augment else None,
        info=info,
    )


def _cifar(name: str, device: torch.device, options: TaskOptions) -> Task:
    arrays = datasets.load_cifar(name, options.data_dir)
    info = {"split": "official train/test", "archive": str(arrays.path), "md5": arrays.md5, "classes": arrays.classes}
    return _build(
        name,
        device,
        (arrays.train_x, arrays.train_y),
        (arrays.test_x, arrays.test_y),
        num_classes=len(arrays.classes),
        scale=255.0,
        augmentation=cifar_augmentation(32) if options.augment else None,
        info=info,
    )


def cifar10(device: torch.device, seed: int, options: TaskOptions) -> Task:
    """CIFAR-10 from its verified archive: 50,000 train / 10,000 test, 10 classes."""
    return _cifar("cifar10", device, options)


def cifar100(device: torch.device, seed: int, options: TaskOptions) -> Task:
    """CIFAR-100 from its verified archive, fine labels: 50,000 train / 10,000 test, 100 classes."""
    return _cifar("cifar100", device, options)
