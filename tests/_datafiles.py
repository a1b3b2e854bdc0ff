"""Real data files for the tests of the tasks that read from disk: image trees (JPEG and PNG written by PIL), a
WebDataset tar of the same images, token shards in nanoGPT's and llm.c's formats."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

CLASSES = ("cat", "dog", "eel")  # sorted: labels 0, 1, 2
COLOURS = ((200, 30, 30), (30, 200, 30), (30, 30, 200))  # each class a solid colour under noise


def image(cls: int, index: int, size: tuple[int, int] = (40, 48)) -> Image.Image:
    rng = np.random.default_rng([cls, index])
    pixels = np.array(COLOURS[cls], dtype=np.float64) + rng.normal(0, 10, (size[1], size[0], 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def gradient(size: int = 256) -> Image.Image:
    """A PNG-safe image whose every pixel is known: red rises along x, green along y, blue is 77."""
    x = np.arange(size) % 256
    pixels = np.stack(np.broadcast_arrays(x[None, :], x[:, None], np.full((size, size), 77)), axis=-1)
    return Image.fromarray(pixels.astype(np.uint8))


def make_tree(root: Path, train: int = 6, val: int = 2, classes: tuple[str, ...] = CLASSES) -> Path:
    """``root/{train,val}/<class>/`` with ``train``/``val`` images per class: JPEGs, every third one a PNG."""
    for split, count in (("train", train), ("val", val)):
        for c, name in enumerate(classes):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                ext = "png" if i % 3 == 2 else "jpg"
                image(c % len(COLOURS), i + (100 if split == "val" else 0)).save(folder / f"{name}_{i:03d}.{ext}")
    return root


def encoded(img: Image.Image, fmt: str = "JPEG") -> bytes:
    out = io.BytesIO()
    img.save(out, format=fmt)
    return out.getvalue()


def add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def make_shards(root: Path, tree: Path, per_shard: int = 4) -> Path:
    """WebDataset shards of the images of ``tree``: ``root/{train,val}-NNNNNN.tar``, ``KEY.jpg|png`` + ``KEY.cls``."""
    root.mkdir(parents=True, exist_ok=True)
    for split in ("train", "val"):
        files = sorted((tree / split).glob("*/*"))
        for s in range(0, len(files), per_shard):
            with tarfile.open(root / f"{split}-{s // per_shard:06d}.tar", "w") as tar:
                for f in files[s : s + per_shard]:
                    key = f"{f.parent.name}_{f.stem}"
                    add_member(tar, f"{key}{f.suffix}", f.read_bytes())
                    add_member(tar, f"{key}.cls", str(CLASSES.index(f.parent.name)).encode())
    return root


def write_llmc(path: Path, tokens: np.ndarray, *, magic: int = 20240520, version: int = 1,
               count: int | None = None) -> Path:
    header = np.zeros(256, dtype="<i4")
    header[:3] = (magic, version, len(tokens) if count is None else count)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())
    return path


def write_nanogpt(root: Path, train: np.ndarray, val: np.ndarray) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.bin").write_bytes(np.asarray(train, dtype="<u2").tobytes())
    (root / "val.bin").write_bytes(np.asarray(val, dtype="<u2").tobytes())
    return root
