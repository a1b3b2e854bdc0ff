"""CIFAR-10/100 archives: locate, verify by MD5, read, and download.

Data: "Learning Multiple Layers of Features from Tiny Images" (Krizhevsky, 2009), distributed as the
"python version" archives at https://www.cs.toronto.edu/~kriz/cifar.html. The archive MD5s below are the
ones published there (torchvision's ``datasets/cifar.py`` checks the same values).

The archives hold pickles, and unpickling runs arbitrary code, so nothing here unpickles a file before
its archive's MD5 matched the official one. Members are read straight from the tar stream: no extraction
to disk, and no stale extracted copy that could drift from the verified archive.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import pickle
import tarfile
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from bench.runs.progress import Progress
from bench.runs.tasks.base import TaskError

ENV_VAR = "RESBENCH_DATA"
DEFAULT_DIR = "~/.cache/resbench"
CHUNK = 1 << 20  # 1 MiB: big enough to stream fast, small enough to keep memory flat


@dataclass(frozen=True)
class Archive:
    """Where one official archive comes from and which of its members hold what."""

    filename: str
    url: str
    train: tuple[str, ...]  # members concatenated, in order, into the training split
    test: tuple[str, ...]
    meta: str
    label_key: bytes  # b"labels" (CIFAR-10) or b"fine_labels" (CIFAR-100, the 100-class task)
    names_key: bytes  # class names inside the meta member


_KRIZ = "https://www.cs.toronto.edu/~kriz/"
_C10 = "cifar-10-batches-py/"
_C100 = "cifar-100-python/"

ARCHIVES: dict[str, Archive] = {
    "cifar10": Archive(
        filename="cifar-10-python.tar.gz",
        url=_KRIZ + "cifar-10-python.tar.gz",
        train=tuple(f"{_C10}data_batch_{i}" for i in range(1, 6)),
        test=(f"{_C10}test_batch",),
        meta=f"{_C10}batches.meta",
        label_key=b"labels",
        names_key=b"label_names",
    ),
    "cifar100": Archive(
        filename="cifar-100-python.tar.gz",
        url=_KRIZ + "cifar-100-python.tar.gz",
        train=(f"{_C100}train",),
        test=(f"{_C100}test",),
        meta=f"{_C100}meta",
        label_key=b"fine_labels",
        names_key=b"fine_label_names",
    ),
}

# Kept apart from ARCHIVES so tests can point the check at archives they build (monkeypatch.setitem).
MD5: dict[str, str] = {
    "cifar10": "c58f30108f718f92721af3b95e74349a",
    "cifar100": "eb9058c3a382ffc7106e4002c42a8d85",
}


@dataclass(frozen=True)
class CifarArrays:
    """One CIFAR dataset in memory: uint8 images (N, 3, 32, 32) and int64 labels, official split."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    classes: list[str]
    path: Path
    md5: str


def _spec(name: str) -> Archive:
    if name not in ARCHIVES:
        raise TaskError(f"unknown dataset {name!r}; choose one of: {', '.join(sorted(ARCHIVES))}")
    return ARCHIVES[name]


def resolve_data_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The data directory: ``path`` if given, else ``$RESBENCH_DATA``, else ``~/.cache/resbench``."""
    chosen = path if path is not None else os.environ.get(ENV_VAR) or DEFAULT_DIR
    return Path(chosen).expanduser()


def archive_path(name: str, path: str | os.PathLike[str] | None = None) -> Path:
    """Where the archive of dataset ``name`` is expected (it need not exist)."""
    return resolve_data_dir(path) / _spec(name).filename


def md5sum(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(name: str, path: Path, expected_md5: str | None = None) -> str:
    """Check ``path`` against the official MD5 (or ``expected_md5``); return the digest or raise TaskError."""
    expected = expected_md5 or MD5[name]
    if not path.is_file():
        raise TaskError(
            f"{name} archive not found at {path}; run `python -m bench data download {name}` or pass --data-dir"
        )
    actual = md5sum(path)
    if actual != expected:
        raise TaskError(
            f"{name} archive {path} is corrupt (md5 {actual}, expected {expected}); delete it and run "
            f"`python -m bench data download {name}`"
        )
    return actual


def _read_members(path: Path, wanted: set[str]) -> dict[str, Any]:
    # One forward pass over the gzip stream: seeking backwards in a .tar.gz re-decompresses from the start.
    found: dict[str, Any] = {}
    with tarfile.open(path, "r:gz") as tar:
        for member in tar:
            if member.name in wanted and member.isfile():
                fh = tar.extractfile(member)
                assert fh is not None  # isfile() members always have a payload
                found[member.name] = pickle.load(fh, encoding="bytes")
    missing = sorted(wanted - found.keys())
    if missing:
        raise TaskError(f"archive {path} lacks {', '.join(missing)}; it is not an official CIFAR archive: delete it")
    return found


def _images(batch: dict[bytes, Any], label_key: bytes, member: str) -> tuple[np.ndarray, np.ndarray]:
    data = np.asarray(batch.get(b"data"))
    labels = np.asarray(batch.get(label_key), dtype=np.int64)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(labels) != len(data):
        raise TaskError(f"member {member} is malformed (data {data.dtype}{data.shape}, {len(labels)} labels)")
    # Rows are stored channel-major (1024 red, 1024 green, 1024 blue), i.e. already (C, H, W) order.
    return data.reshape(-1, 3, 32, 32), labels


def load_cifar(name: str, path: str | os.PathLike[str] | None = None, expected_md5: str | None = None) -> CifarArrays:
    """Verify and read dataset ``name`` from its archive in :func:`resolve_data_dir` (``path``)."""
    spec = _spec(name)
    file = archive_path(name, path)
    digest = verify(name, file, expected_md5)
    members = _read_members(file, {*spec.train, *spec.test, spec.meta})

    def split(names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        parts = [_images(members[m], spec.label_key, m) for m in names]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    train_x, train_y = split(spec.train)
    test_x, test_y = split(spec.test)
    raw_names = members[spec.meta].get(spec.names_key)
    if raw_names is None:
        raise TaskError(f"member {spec.meta} of {file} lacks {spec.names_key!r}; it is not an official CIFAR archive")
    classes = [n.decode() if isinstance(n, bytes) else str(n) for n in raw_names]
    top = int(max(train_y.max(initial=0), test_y.max(initial=0)))
    if top >= len(classes) or min(train_y.min(initial=0), test_y.min(initial=0)) < 0:
        raise TaskError(f"{file}: labels fall outside the {len(classes)} classes named in {spec.meta}")
    return CifarArrays(train_x, train_y, test_x, test_y, classes, file, digest)


def download(
    name: str, data_dir: str | os.PathLike[str] | None = None, url: str | None = None, progress: bool = True
) -> Path:
    """Fetch the official archive of ``name`` into ``data_dir``, verify its MD5, return its path.

    An archive already present and verified is kept. The body streams to a temporary file beside the
    target and is renamed into place only once its MD5 matches, so an interrupted or corrupt download
    never leaves a file the loader could mistake for the real one.
    """
    spec = _spec(name)
    target = archive_path(name, data_dir)
    expected = MD5[name]
    if target.is_file() and md5sum(target) == expected:
        return target
    source = url or spec.url
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{spec.filename}.", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            actual = _fetch(source, out, spec.filename, progress)
        if actual != expected:
            raise TaskError(
                f"download from {source} has md5 {actual}, expected {expected}; deleted it (check --url, or retry)"
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)  # no-op after the rename; removes the partial file on any failure
    return target


def _fetch(url: str, out: BinaryIO, label: str, progress: bool) -> str:
    """Stream ``url`` into ``out``; return the MD5 of what was written. Network failures become TaskError."""
    digest = hashlib.md5(usedforsecurity=False)
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            with Progress(total, label, enabled=progress, unit="B", scale_bytes=True) as bar:
                for block in iter(lambda: response.read(CHUNK), b""):
                    out.write(block)
                    digest.update(block)
                    bar.update(bar.n + len(block))
    except urllib.error.HTTPError as err:
        raise TaskError(f"download of {url} failed: HTTP {err.code} {err.reason}; check --url") from err
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as err:
        reason = getattr(err, "reason", None) or err
        raise TaskError(f"download of {url} failed: {reason}; check --url and your network") from err
    return digest.hexdigest()
