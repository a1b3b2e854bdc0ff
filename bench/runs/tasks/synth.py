"""Synthetic datasets in the on-disk formats, for checking the pipeline (and a GPU) without downloading anything:
``python -m bench data synth-imagefolder ROOT`` and ``python -m bench data synth-tokens ROOT``.

- **Images**: ``classes`` classes, each a hue and a stripe orientation of its own under pixel noise, saved as JPEG
  (every fifth as PNG) at sizes between ``size`` and 1.5 x ``size``, in ImageFolder's layout or as WebDataset shards
  (``train-NNNNNN.tar``, ``val-NNNNNN.tar``: ``KEY.jpg``/``KEY.png`` and ``KEY.cls``). Learnable: a network's
  validation accuracy rises above chance within a few hundred steps.
- **Tokens**: documents drawn from a fixed pool of random "sentences" (token ids drawn from a Zipf law), each ended
  by the end-of-text id (``vocab_size - 1``), in nanoGPT's or llm.c's format. Learnable too: the unigram law is
  learnt at once, and a sentence is predictable once its first tokens have been seen.

Everything is a function of ``seed``: the same command writes the same bytes.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from bench.runs.progress import Progress
from bench.runs.tasks import tokenshards
from bench.runs.tasks.base import TaskError

IMAGE_FORMATS = ("folders", "webdataset")
POOL_SENTENCES = 4096
ZIPF_EXPONENT = 1.1


def _refuse_nonempty(root: Path) -> None:
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise TaskError(f"{root} exists and is not an empty directory; pass a new ROOT")


def synth_image(cls: int, classes: int, index: int, size: int, seed: int) -> tuple[bytes, str]:
    """One image of class ``cls`` as encoded bytes and its extension: the class's hue, stripes at the class's angle,
    noise; JPEG, or PNG for every fifth ``index``."""
    rng = np.random.default_rng([seed, cls, index])
    h, w = (int(v) for v in rng.integers(size, size * 3 // 2 + 1, size=2))
    angle = np.pi * cls / classes
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    stripes = np.sin((xx * np.cos(angle) + yy * np.sin(angle)) * (2 * np.pi / max(size / 6, 2)) + rng.uniform(0, 6.3))
    hue = np.array([np.cos(2 * np.pi * (cls / classes + k / 3)) for k in range(3)], dtype=np.float32)
    pixels = 128 + 60 * hue + 40 * stripes[..., None] + rng.normal(0, 25, (h, w, 3))
    img = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    out = io.BytesIO()
    ext = "png" if index % 5 == 4 else "jpg"
    img.save(out, format="PNG" if ext == "png" else "JPEG", quality=90)
    return out.getvalue(), ext


def _one(job: tuple[int, int, int, int, int]) -> tuple[bytes, str]:
    return synth_image(*job)


def synth_imagefolder(root: str | os.PathLike[str], *, classes: int = 10, train_per_class: int = 100,
                      val_per_class: int = 20, size: int = 160, fmt: str = "folders", shard_samples: int = 1000,
                      seed: int = 0, jobs: int | None = None, progress: bool = True) -> dict[str, Any]:
    """Write a synthetic ImageNet-format dataset under ``root``; what was written."""
    if fmt not in IMAGE_FORMATS:
        raise TaskError(f"--format must be one of {', '.join(IMAGE_FORMATS)}, got {fmt!r}")
    for name, value in (("classes", classes), ("train-per-class", train_per_class), ("val-per-class", val_per_class),
                        ("size", size), ("shard-samples", shard_samples)):
        if value < 1:
            raise TaskError(f"--{name} must be >= 1, got {value}")
    out = Path(root).expanduser()
    _refuse_nonempty(out)
    out.mkdir(parents=True, exist_ok=True)
    counts = {"train": train_per_class, "val": val_per_class}
    total = classes * (train_per_class + val_per_class)
    jobs = jobs or max(1, (os.cpu_count() or 1))
    with ProcessPoolExecutor(max_workers=jobs) as pool, Progress(total, "synth-imagefolder", enabled=progress,
                                                                 unit="img") as bar:
        done = 0
        for split, per_class in counts.items():
            # Interleaved classes, so that every WebDataset shard holds all of them.
            order = [(c, i) for i in range(per_class) for c in range(classes)]
            offset = 0 if split == "train" else train_per_class  # val images are other draws than train's
            encoded = pool.map(_one, [(c, classes, offset + i, size, seed) for c, i in order], chunksize=16)
            writer = _FolderWriter(out, split, classes) if fmt == "folders" else _TarWriter(out, split, shard_samples)
            for (c, i), (data, ext) in zip(order, encoded, strict=True):
                writer.add(c, f"{split}_{c:04d}_{i:06d}", ext, data)
                done += 1
                bar.update(done)
            writer.close()
    info = {"format": fmt, "classes": classes, "train": classes * train_per_class, "val": classes * val_per_class,
            "size": size, "seed": seed}
    (out / "synth.json").write_text(json.dumps(info) + "\n", encoding="utf-8")
    return info


class _FolderWriter:
    def __init__(self, root: Path, split: str, classes: int) -> None:
        self.dirs = [root / split / f"class{c:04d}" for c in range(classes)]
        for d in self.dirs:
            d.mkdir(parents=True, exist_ok=True)

    def add(self, cls: int, key: str, ext: str, data: bytes) -> None:
        (self.dirs[cls] / f"{key}.{ext}").write_bytes(data)

    def close(self) -> None:
        pass


class _TarWriter:
    def __init__(self, root: Path, split: str, per_shard: int) -> None:
        self.root, self.split, self.per_shard = root, split, per_shard
        self.tar: tarfile.TarFile | None = None
        self.shard = self.count = 0

    def _member(self, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), 0, 0o644
        self.tar.addfile(info, io.BytesIO(data))  # type: ignore[union-attr]

    def add(self, cls: int, key: str, ext: str, data: bytes) -> None:
        if self.tar is None or self.count == self.per_shard:
            self.close()
            path = self.root / f"{self.split}-{self.shard:06d}.tar"
            self.tar = tarfile.open(path, "w", format=tarfile.USTAR_FORMAT)  # noqa: SIM115  (closed by close())
            self.shard, self.count = self.shard + 1, 0
        self._member(f"{key}.{ext}", data)
        self._member(f"{key}.cls", str(cls).encode())
        self.count += 1

    def close(self) -> None:
        if self.tar is not None:
            self.tar.close()
            self.tar = None


def sentence_pool(vocab_size: int, seed: int) -> list[np.ndarray]:
    """The fixed sentences documents are drawn from: lengths 16-256, ids from a Zipf law over ``vocab_size - 1``."""
    rng = np.random.default_rng([seed, 1])
    ranks = np.arange(1, vocab_size, dtype=np.float64)
    p = ranks**-ZIPF_EXPONENT
    p /= p.sum()
    ids = rng.permutation(vocab_size - 1)  # which id is frequent: not simply the small ones
    lengths = rng.integers(16, 257, size=POOL_SENTENCES)
    draws = ids[rng.choice(vocab_size - 1, size=int(lengths.sum()), p=p)].astype(np.int64)
    return np.split(draws, np.cumsum(lengths)[:-1])


def token_stream(count: int, vocab_size: int, seed: int, stream: int, chunk: int = 1 << 20) -> Iterator[np.ndarray]:
    """``count`` tokens of documents (pool sentences, each ended by ``vocab_size - 1``), in chunks."""
    pool = sentence_pool(vocab_size, seed)
    eot = np.array([vocab_size - 1], dtype=np.int64)
    rng = np.random.default_rng([seed, 2, stream])
    left = count
    while left > 0:
        parts, n = [], 0
        while n < min(chunk, left):
            s = pool[int(rng.integers(len(pool)))]
            parts += [s, eot]
            n += len(s) + 1
        tokens = np.concatenate(parts)[: min(chunk, left)]
        left -= len(tokens)
        yield tokens


def synth_tokens(root: str | os.PathLike[str], *, train_tokens: int = 20_000_000, val_tokens: int = 1_048_576,
                 vocab_size: int = 50257, fmt: str = "llmc", shard_tokens: int = 100_000_000, seed: int = 0,
                 progress: bool = True) -> dict[str, Any]:
    """Write synthetic token shards under ``root``; what was written."""
    if fmt not in tokenshards.FORMATS:
        raise TaskError(f"--format must be one of {', '.join(tokenshards.FORMATS)}, got {fmt!r}")
    if not 2 < vocab_size <= tokenshards.MAX_VOCAB:
        raise TaskError(f"--vocab-size must be in 3..{tokenshards.MAX_VOCAB}, got {vocab_size}")
    for name, value in (("train-tokens", train_tokens), ("val-tokens", val_tokens), ("shard-tokens", shard_tokens)):
        if value < 1:
            raise TaskError(f"--{name} must be >= 1, got {value}")
    out = Path(root).expanduser()
    _refuse_nonempty(out)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, list[str]] = {}
    with Progress(train_tokens + val_tokens, "synth-tokens", enabled=progress, unit="tok") as bar:
        done = 0
        for stream, (split, count) in enumerate((("train", train_tokens), ("val", val_tokens))):
            writer = tokenshards.ShardWriter(out, split, fmt, out.resolve().name, shard_tokens)
            try:
                for tokens in token_stream(count, vocab_size, seed, stream):
                    writer.write(tokens)
                    done += len(tokens)
                    bar.update(done)
                files[split] = [p.name for p in writer.commit()]
            except BaseException:
                writer.abort()
                raise
    meta = {"tokenizer": {"name": "synthetic", "vocab_size": vocab_size, "eot": vocab_size - 1}, "format": fmt,
            "train_tokens": train_tokens, "val_tokens": val_tokens, "seed": seed, "files": files}
    (out / tokenshards.META).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return meta
