"""Pathfinder: are the two marked dots joined by one dashed contour? A generated image task with exact labels.

"Learning long-range spatial dependencies with horizontal gated recurrent units" (Linsley et al., NeurIPS 2018)
built it to need long-range spatial integration; the Long Range Arena ("Long Range Arena: A Benchmark for
Efficient Transformers", Tay et al., ICLR 2021) made its 32×32 version (Pathfinder-32) a standard task. Each image
holds ``2 + distractors`` dashed contours of ``contour_length`` dashes each, drawn as random walks whose heading
turns by at most 15° per dash. Two 3×3 markers sit on contour ends: both ends of one contour (label 1) or one end of
each of two contours (label 0). Every contour is drawn the same way in both classes, so only the markers' places
differ.

The labels are exact at the pixel level: a sample is kept only when the pixels of different contours are never
8-neighbours and no marker touches a contour other than its own (distances checked on the drawn geometry).

Everything is integer arithmetic on a fixed-point grid (1/16 pixel) fed by the raw 64-bit words of numpy's PCG64:
no float reduction, no library-dependent bounded draw, so the same seed gives the same bytes on every machine
(tests pin a hash). Generation is vectorised over samples; each split is a function of (data seed, split) only and
cached in the process, and a larger ``train_size`` extends the smaller one's samples.
"""

from __future__ import annotations

import functools
import math
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.runs.tasks import datasets
from bench.runs.tasks.base import Task, TaskError, TaskOptions
from bench.runs.tasks.images import Augmentation, _build, hflip

DATA_SEED = 0  # the task's images and labels; independent of the run seed (the run seed orders the batches)
TRAIN_SPLIT, VAL_SPLIT = 0, 1  # each split has its own stream, so the validation set is the same at every train size
UNIT = 16  # fixed-point subdivisions of a pixel
HEADINGS = 24  # a dash's heading is one of 24 directions, 15° apart; it turns by -15°, 0 or +15° per dash
DASH = 2  # pixels drawn per dash, one pixel apart
STEP = 3  # pixels from a dash's start to the next dash's start: one pixel of gap
MARGIN = 2  # pixels kept free at the border, so a 3×3 marker stays inside the image
CLEAR = 3.0  # pixels between the points of two contours: their pixels are never 8-neighbours
END_CLEAR = 4.5  # pixels between a contour end (a marker's centre) and any other contour: the marker touches none
MARKER_APART = 6.0  # pixels between two ends that may both carry markers: the two markers never touch
DEFAULT_STEPS = 60  # the calibrated run length (docs/data.md): resnet20 lands between chance and its ceiling
SIZES = (16, 128)  # image sides the task accepts
CANDIDATES = 1024  # samples drawn per round; the accepted ones are kept in order, so each split is a prefix stream
FORMAT = 1  # the cache file's version: raise it when the drawing changes
TRIES = 32  # places drawn for each contour of a sample; it takes the first that keeps apart from those before it
MIN_ACCEPTED = 0.01  # a first round that keeps fewer than this fraction is refused as too crowded

# Unit headings in fixed point, rounded once (no entry lies near a rounding tie, so every machine gets these).
_ANGLES = [2 * math.pi * k / HEADINGS for k in range(HEADINGS)]
_HEADING = np.array([(round(UNIT * math.cos(a)), round(UNIT * math.sin(a))) for a in _ANGLES], dtype=np.int64)


def max_contour_length(size: int) -> int:
    """The longest contour (dashes) whose straight form fits inside the margins of a ``size``-pixel image."""
    return (size - 2 * MARGIN - DASH) // STEP + 1


def check(size: int, length: int, distractors: int, channels: int) -> None:
    """Refuse options the task cannot draw, naming the option and its range, before anything is generated."""
    if not SIZES[0] <= size <= SIZES[1]:
        raise TaskError(f"pathfinder: --image-size must be an integer in [{SIZES[0]}, {SIZES[1]}], got {size}")
    longest = max_contour_length(size)
    if not 2 <= length <= longest:
        raise TaskError(f"pathfinder: --contour-length must be an integer in [2, {longest}] at --image-size {size} "
                        f"(a straight contour of that many dashes must fit), got {length}")
    if distractors < 0:
        raise TaskError(f"pathfinder: --distractors must be an integer >= 0, got {distractors}")
    if not 1 <= channels <= 3:
        raise TaskError(f"pathfinder: --channels must be an integer in [1, 3], got {channels}")


def _uniform(words: np.ndarray, span: np.ndarray | int) -> np.ndarray:
    """Integers in [0, span) from raw 64-bit words: the top 32 bits scaled (exact integer arithmetic)."""
    return ((words >> np.uint64(32)) * np.asarray(span, dtype=np.uint64) >> np.uint64(32)).astype(np.int64)


def _contours(raw: Any, m: int, size: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """``m`` contours placed at random: points (m, P, 2) in fixed point, and which fit inside the margins."""
    words = raw.random_raw(m * (length + 2)).reshape(m, -1)
    turns = _uniform(words[:, 1:length], 3) - 1  # -15°, 0 or +15° at each dash after the first
    heading = _uniform(words[:, :1], HEADINGS) + np.concatenate([np.zeros((m, 1), np.int64), np.cumsum(turns, 1)], 1)
    unit = _HEADING[heading % HEADINGS]  # (m, L, 2)
    starts = np.concatenate([np.zeros((m, 1, 2), np.int64), np.cumsum(STEP * unit[:, :-1], 1)], 1)
    points = (starts[:, :, None] + np.arange(DASH)[:, None] * unit[:, :, None]).reshape(m, length * DASH, 2)
    low, high = points.min(1), points.max(1)  # each contour's box, moved to a random place inside the margins
    lo, hi = MARGIN * UNIT - low, (size - MARGIN) * UNIT - 1 - high
    shift = lo + _uniform(words[:, length:], np.maximum(hi - lo + 1, 1))
    return points + shift[:, None], (hi >= lo).all(1)


def _apart(cand: np.ndarray, placed: np.ndarray) -> np.ndarray:
    """Which candidates (n, T, P, 2) keep :data:`CLEAR` from every placed point (n, Q, 2), and :data:`END_CLEAR`
    between an end of one and any point of the other (ends are where markers go)."""
    if placed.shape[1] == 0:
        return np.ones(cand.shape[:2], bool)
    cand, placed = cand.astype(np.int32), placed.astype(np.int32)  # squared distances stay below 2**24
    d2 = np.square(cand[:, :, :, None, 0] - placed[:, None, None, :, 0])  # (n, T, P, Q), exact integers
    d2 += np.square(cand[:, :, :, None, 1] - placed[:, None, None, :, 1])
    ok = d2.min((2, 3)) >= (CLEAR * UNIT) ** 2
    ok &= d2[:, :, [0, -1]].min((2, 3)) >= (END_CLEAR * UNIT) ** 2
    length = cand.shape[2]
    placed_ends = np.concatenate([np.arange(0, d2.shape[3], length), np.arange(length - 1, d2.shape[3], length)])
    return ok & (d2[..., placed_ends].min((2, 3)) >= (END_CLEAR * UNIT) ** 2)


def _far(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether points ``a`` and ``b`` (..., 2) are :data:`MARKER_APART` apart: two markers there never touch."""
    return np.square(a - b).sum(-1) >= (MARKER_APART * UNIT) ** 2


def _draw(raw: Any, n: int, size: int, length: int, contours: int) -> dict[str, np.ndarray]:
    """``n`` candidate samples: contours placed one after another, each the first of :data:`TRIES` draws that keeps
    apart from those placed before it; ``fits`` says which samples found a place for every contour."""
    words = raw.random_raw(2 * n).reshape(n, 2)
    label = (words[:, 0] >> np.uint64(63)).astype(np.int64)
    ends = (words[:, 1] >> np.uint64(62)).astype(np.int64)  # two bits: the ends the markers of a label-0 sample take
    p = length * DASH
    placed = np.zeros((n, 0, 2), np.int64)
    fits = np.ones(n, bool)
    rows = np.arange(n)
    for c in range(contours):
        cand, inside = _contours(raw, n * TRIES, size, length)
        cand = cand.reshape(n, TRIES, p, 2)
        ok = inside.reshape(n, TRIES) & _apart(cand, placed)
        if c == 0:  # contour 0's two ends carry the markers of label 1
            ok &= _far(cand[:, :, 0], cand[:, :, -1])
        if c == 1:  # an end of contour 0 and one of contour 1 carry those of label 0
            ok &= np.stack([_far(cand[:, :, i], placed[:, None, j]) for i in (0, -1) for j in (0, p - 1)]).all(0)
        fits &= ok.any(1)
        if not fits.any():  # no sample of the round has room left: the contours after this one change nothing
            return {"points": np.zeros((0, contours, p, 2), np.int64), "label": label[:0], "ends": ends[:0],
                    "fits": fits[:0]}
        placed = np.concatenate([placed, cand[rows, ok.argmax(1)]], 1)
    return {"points": placed.reshape(n, contours, p, 2), "label": label, "ends": ends, "fits": fits}


def _markers(sample: dict[str, np.ndarray]) -> np.ndarray:
    """The two marker centres (n, 2, 2): contour 0's two ends (label 1), else an end of contour 0 and of contour 1."""
    points, label, ends = sample["points"], sample["label"], sample["ends"]
    rows = np.arange(len(label))
    first = points[rows, 0, np.where(label == 1, 0, -(ends & 1))]
    other = points[rows, np.where(label == 1, 0, 1), np.where(label == 1, -1, -(ends >> 1))]
    return np.stack([first, other], 1)


@functools.lru_cache(maxsize=64)
def _round(size: int, length: int, contours: int, seed: int, split: int, index: int) -> dict[str, np.ndarray]:
    """The accepted samples of round ``index`` of stream (``seed``, ``split``). Every round reads the same number of
    words, so round i starts i rounds' words into the stream: a round is drawn (and cached) without those before."""
    words = 2 * CANDIDATES + contours * CANDIDATES * TRIES * (length + 2)  # what :func:`_draw` reads
    raw = np.random.PCG64(np.random.SeedSequence([seed, split])).advance(index * words)
    sample = _draw(raw, CANDIDATES, size, length, contours)
    return {key: v[sample["fits"]] for key, v in sample.items() if key != "fits"}


def geometry(n: int, size: int, length: int, distractors: int, seed: int, split: int) -> dict[str, np.ndarray]:
    """The first ``n`` accepted samples of stream (``seed``, ``split``): points (n, K, P, 2), markers (n, 2, 2) in
    fixed point, labels (n,). Refuses options whose contours rarely fit apart."""
    check(size, length, distractors, 1)
    kept = [_round(size, length, 2 + distractors, seed, split, 0)]
    if len(kept[0]["label"]) < MIN_ACCEPTED * CANDIDATES:
        raise TaskError(f"pathfinder: {2 + distractors} contours of {length} dashes rarely fit apart in "
                        f"{size}×{size} images ({len(kept[0]['label'])} of {CANDIDATES} drawn); use fewer "
                        "--distractors, a shorter --contour-length or a larger --image-size")
    while sum(len(k["label"]) for k in kept) < n:
        kept.append(_round(size, length, 2 + distractors, seed, split, len(kept)))
    out = {key: np.concatenate([k[key] for k in kept])[:n] for key in kept[0]}
    out["markers"] = _markers(out)
    return out


def render(geo: dict[str, np.ndarray], size: int) -> tuple[np.ndarray, np.ndarray]:
    """Images (n, size, size) uint8 (contours and markers 255 on 0) and each pixel's owner (0: background, c + 1:
    contour c; marker pixels are -1), for tests of the labels."""
    points, markers = geo["points"] // UNIT, geo["markers"] // UNIT  # fixed point to pixels
    n, k = points.shape[:2]
    owner = np.zeros((n, size, size), np.int64)
    rows = np.arange(n)[:, None, None]
    owner[rows, points[..., 1], points[..., 0]] = np.arange(1, k + 1)[:, None]
    offsets = np.array([(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)])
    my = markers[:, :, None, 1] + offsets[:, 0]
    mx = markers[:, :, None, 0] + offsets[:, 1]
    owner[np.arange(n)[:, None, None], my, mx] = -1
    return np.where(owner != 0, 255, 0).astype(np.uint8), owner


def images(n: int, size: int, length: int, distractors: int, channels: int, seed: int = DATA_SEED,
           split: int = TRAIN_SPLIT) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images (n, channels, size, size) uint8, the grey image in each channel, and their labels (n,)."""
    check(size, length, distractors, channels)
    geo = geometry(n, size, length, distractors, seed, split)
    grey, _ = render(geo, size)
    return np.repeat(grey[:, None], channels, 1), geo["label"].copy()


def cached(folder: Path, n: int, size: int, length: int, distractors: int, seed: int = DATA_SEED,
           split: int = TRAIN_SPLIT) -> tuple[np.ndarray, np.ndarray]:
    """:func:`images` of one channel, kept in ``folder`` (``pathfinder/<options>.npz``) for the next process: the
    runs of a sweep draw a split once. A file that cannot be read is drawn again and replaced."""
    path = folder / "pathfinder" / f"v{FORMAT}-s{size}-l{length}-d{distractors}-seed{seed}-split{split}-n{n}.npz"
    try:
        with np.load(path) as saved:
            return saved["x"], saved["y"]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        pass
    x, y = images(n, size, length, distractors, 1, seed, split)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".npz", delete=False) as tmp:
            np.savez(tmp, x=x, y=y)
        os.replace(tmp.name, path)  # atomic: a concurrent run reads the old file or the whole new one
    except OSError:  # a read-only data folder: the split is drawn in every process instead
        pass
    return x, y


def vflip(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Mirror each sample top-bottom with probability 1/2."""
    flip = torch.rand(x.shape[0], generator=gen, device=x.device) < 0.5
    return torch.where(flip.view(-1, 1, 1, 1), x.flip(-2), x)


def transpose(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Swap rows and columns of each sample with probability 1/2 (square images)."""
    swap = torch.rand(x.shape[0], generator=gen, device=x.device) < 0.5
    return torch.where(swap.view(-1, 1, 1, 1), x.transpose(-1, -2), x)


# The label is whether two marked ends lie on one contour: every symmetry of the square keeps it.
DIHEDRAL: tuple[Augmentation, ...] = (hflip, vflip, transpose)


def pathfinder(device: torch.device, seed: int, options: TaskOptions) -> Task:
    """Pathfinder images, 2 classes; augmented by the square's 8 symmetries unless ``augment`` is off."""
    size, length, k, c = options.image_size, options.contour_length, options.distractors, options.channels
    check(size, length, k, c)
    folder = datasets.resolve_data_dir(options.data_dir)
    train, val = (cached(folder, n, size, length, k, split=split)
                  for n, split in ((options.train_size, TRAIN_SPLIT), (options.val_size, VAL_SPLIT)))
    train, val = ((np.repeat(x, c, 1), y) for x, y in (train, val))
    info = {"data_seed": DATA_SEED, "contour_length": length, "distractors": k, "dash_px": DASH, "gap_px": STEP - DASH,
            "max_turn_degrees": 360 // HEADINGS, "positive_fraction": float(train[1].mean())}
    task = _build("pathfinder", device, train, val, num_classes=2, scale=255.0,
                  augmentation=(DIHEDRAL, "dihedral8") if options.augment else None, info=info)
    task.default_steps = DEFAULT_STEPS
    return task
