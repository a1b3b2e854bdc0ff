"""CIFAR archives: verify-before-unpickle, reading the official format, the cifar tasks, and download."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import pickle
import re
import socket
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.runs.tasks import TaskError, TaskOptions, datasets, images

CPU = torch.device("cpu")
C10_DIR = "cifar-10-batches-py/"
C100_DIR = "cifar-100-python/"


def _batch(rng: np.random.Generator, n: int, label_key: bytes, classes: int, label: bytes) -> dict[bytes, object]:
    return {
        b"batch_label": label,
        label_key: rng.integers(0, classes, n).tolist(),  # the official files store plain lists
        b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        b"filenames": [b"img_%d.png" % i for i in range(n)],
    }


def _write_tar(path: Path, members: dict[str, object]) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for name, obj in members.items():
            payload = obj if isinstance(obj, bytes) else pickle.dumps(obj, protocol=2)
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return hashlib.md5(path.read_bytes()).hexdigest()


def cifar10_members(n: int = 4, seed: int = 0) -> dict[str, object]:
    """The official CIFAR-10 layout in miniature: n images per data batch, n in the test batch."""
    rng = np.random.default_rng(seed)
    members: dict[str, object] = {C10_DIR + "readme.html": b"<html></html>"}
    for i in range(1, 6):
        members[f"{C10_DIR}data_batch_{i}"] = _batch(rng, n, b"labels", 10, b"training batch %d of 5" % i)
    members[C10_DIR + "test_batch"] = _batch(rng, n, b"labels", 10, b"testing batch 1 of 1")
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
    members[C10_DIR + "batches.meta"] = {b"label_names": names, b"num_cases_per_batch": n, b"num_vis": 3072}
    return members


def cifar100_members(n: int = 6, seed: int = 1) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    members: dict[str, object] = {}
    for split in ("train", "test"):
        batch = _batch(rng, n, b"fine_labels", 100, split.encode())
        batch[b"coarse_labels"] = rng.integers(0, 20, n).tolist()
        members[C100_DIR + split] = batch
    members[C100_DIR + "meta"] = {
        b"fine_label_names": [b"class%d" % i for i in range(100)],
        b"coarse_label_names": [b"super%d" % i for i in range(20)],
    }
    return members


def install(root: Path, name: str, members: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> Path:
    """Write the archive under root and make the checksum table expect it (the official MD5 cannot match)."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / datasets.ARCHIVES[name].filename
    monkeypatch.setitem(datasets.MD5, name, _write_tar(path, members))
    return path


@pytest.fixture
def no_unpickling(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        pytest.fail("a file was unpickled before its checksum was verified")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)


# --- locating and verifying -------------------------------------------------------------------------


def test_official_checksums_and_urls() -> None:
    assert datasets.MD5 == {
        "cifar10": "c58f30108f718f92721af3b95e74349a",
        "cifar100": "eb9058c3a382ffc7106e4002c42a8d85",
    }
    assert datasets.ARCHIVES["cifar10"].url == "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    assert datasets.ARCHIVES["cifar100"].url == "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"


def test_data_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESBENCH_DATA", str(tmp_path / "env"))
    assert datasets.resolve_data_dir(tmp_path / "arg") == tmp_path / "arg"
    assert datasets.resolve_data_dir() == tmp_path / "env"
    monkeypatch.delenv("RESBENCH_DATA")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert datasets.resolve_data_dir() == tmp_path / "home" / ".cache" / "resbench"
    assert datasets.archive_path("cifar100", "~/d") == tmp_path / "home" / "d" / "cifar-100-python.tar.gz"


def test_missing_archive_names_the_fix(tmp_path: Path) -> None:
    fix = re.escape("run `python -m bench data download cifar10` or pass --data-dir")
    with pytest.raises(TaskError, match=f"not found at {re.escape(str(tmp_path))}.*{fix}"):
        images.cifar10(CPU, 0, TaskOptions(data_dir=str(tmp_path)))


def test_corrupt_archive_is_never_unpickled(tmp_path: Path, no_unpickling: None) -> None:
    path = tmp_path / "cifar-10-python.tar.gz"
    _write_tar(path, cifar10_members())  # a well-formed archive, but not the official bytes
    with pytest.raises(TaskError, match=f"{re.escape(str(path))} is corrupt .*expected c58f3010"):
        datasets.load_cifar("cifar10", tmp_path)
    with pytest.raises(TaskError, match="is corrupt"):
        images.cifar10(CPU, 0, TaskOptions(data_dir=str(tmp_path)))


def test_expected_md5_parameter(tmp_path: Path) -> None:
    digest = _write_tar(tmp_path / "cifar-10-python.tar.gz", cifar10_members(n=2))
    assert datasets.load_cifar("cifar10", tmp_path, expected_md5=digest).md5 == digest


def test_unknown_dataset(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="unknown dataset 'mnist'; choose one of: cifar10, cifar100"):
        datasets.load_cifar("mnist", tmp_path)
    with pytest.raises(TaskError, match="unknown dataset 'svhn'"):
        datasets.download("svhn", tmp_path)


# --- reading the official format ---------------------------------------------------------------------


def test_load_cifar10_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    members = cifar10_members(n=4)
    install(tmp_path, "cifar10", members, monkeypatch)
    arrays = datasets.load_cifar("cifar10", tmp_path)
    batches = [members[f"{C10_DIR}data_batch_{i}"] for i in range(1, 6)]
    assert arrays.train_x.shape == (20, 3, 32, 32) and arrays.train_x.dtype == np.uint8
    assert arrays.test_x.shape == (4, 3, 32, 32) and arrays.train_y.dtype == np.int64
    # Batches concatenate in order; each row is channel-major: 1024 red values, then green, then blue.
    first_row = batches[0][b"data"][0]
    np.testing.assert_array_equal(arrays.train_x[0, 0].ravel(), first_row[:1024])
    np.testing.assert_array_equal(arrays.train_x[0, 2].ravel(), first_row[2048:])
    np.testing.assert_array_equal(arrays.train_x.reshape(20, -1), np.concatenate([b[b"data"] for b in batches]))
    np.testing.assert_array_equal(arrays.train_y, np.concatenate([b[b"labels"] for b in batches]))
    np.testing.assert_array_equal(arrays.test_y, members[C10_DIR + "test_batch"][b"labels"])
    assert arrays.classes[:2] == ["airplane", "automobile"] and len(arrays.classes) == 10


def test_load_cifar100_uses_fine_labels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    members = cifar100_members(n=6)
    install(tmp_path, "cifar100", members, monkeypatch)
    arrays = datasets.load_cifar("cifar100", tmp_path)
    np.testing.assert_array_equal(arrays.train_y, members[C100_DIR + "train"][b"fine_labels"])
    assert len(arrays.classes) == 100 and arrays.classes[7] == "class7"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.pop(C10_DIR + "test_batch"), "lacks cifar-10-batches-py/test_batch"),
        (lambda m: m[C10_DIR + "data_batch_3"].update({b"data": np.zeros((4, 100), np.uint8)}), "malformed"),
        (lambda m: m[C10_DIR + "data_batch_1"].update({b"labels": [1, 2]}), "malformed"),
        (lambda m: m[C10_DIR + "batches.meta"].pop(b"label_names"), "lacks b'label_names'"),
        (lambda m: m[C10_DIR + "test_batch"].update({b"labels": [0, 1, 2, 10]}), "outside the 10 classes"),
    ],
)
def test_malformed_archives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit, message: str) -> None:
    members = cifar10_members(n=4)
    edit(members)
    install(tmp_path, "cifar10", members, monkeypatch)
    with pytest.raises(TaskError, match=re.escape(message)):
        datasets.load_cifar("cifar10", tmp_path)


# --- the cifar tasks ---------------------------------------------------------------------------------


def test_cifar10_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    members = cifar10_members(n=8)
    path = install(tmp_path, "cifar10", members, monkeypatch)
    task = images.cifar10(CPU, 0, TaskOptions(data_dir=str(tmp_path)))
    assert task.model_kwargs == {"num_classes": 10, "in_chans": 3, "image_size": 32}
    assert task.info["train_size"] == 40 and task.info["val_size"] == 8
    assert task.info["md5"] == datasets.MD5["cifar10"] and task.info["archive"] == str(path)
    assert task.info["augment"] == "pad4-crop32-hflip" and task.info["pixel_scale"] == 255.0
    raw = np.concatenate([members[f"{C10_DIR}data_batch_{i}"][b"data"] for i in range(1, 6)]).reshape(40, 3, -1)
    np.testing.assert_allclose(task.info["mean"], raw.mean(axis=(0, 2)) / 255, rtol=1e-9)
    np.testing.assert_allclose(task.info["std"], raw.std(axis=(0, 2)) / 255, rtol=1e-9)
    # Normalised with the train split's statistics: the whole normalised train split has mean 0, std 1.
    x = torch.cat([xb for xb, _ in task.val_batches(5)])
    assert x.shape == (8, 3, 32, 32) and x.dtype == torch.float32
    train = torch.cat([xb for xb, _ in task.train_eval_batches(7)])
    assert torch.allclose(train.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-5)
    assert torch.allclose(train.std(dim=(0, 2, 3), correction=0), torch.ones(3), atol=1e-5)
    xb, yb = next(task.train_batches(16, torch.Generator().manual_seed(0)))
    assert xb.shape == (16, 3, 32, 32) and yb.dtype == torch.long


def test_cifar100_task_from_env_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(tmp_path, "cifar100", cifar100_members(n=6), monkeypatch)
    monkeypatch.setenv("RESBENCH_DATA", str(tmp_path))
    task = images.cifar100(CPU, 0, TaskOptions(augment=False))
    assert task.model_kwargs == {"num_classes": 100, "in_chans": 3, "image_size": 32}
    assert task.info["augment"] == "none" and task.info["train_size"] == 6


def test_constant_channel_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    members = cifar10_members(n=2)
    for i in range(1, 6):
        members[f"{C10_DIR}data_batch_{i}"][b"data"][:] = 7
    install(tmp_path, "cifar10", members, monkeypatch)
    with pytest.raises(TaskError, match="cifar10: a channel of the training split is constant"):
        images.cifar10(CPU, 0, TaskOptions(data_dir=str(tmp_path)))


# --- download ----------------------------------------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # keep pytest output clean
        pass


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An HTTP server on 127.0.0.1 (free port) serving the files of a fresh directory."""
    root = tmp_path / "served"
    root.mkdir()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", root
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/cifar-10-python.tar.gz"


def test_download_verifies_and_renames(server, tmp_path: Path, monkeypatch, capsys) -> None:
    base, root = server
    served = install(root, "cifar10", cifar10_members(n=2), monkeypatch)
    dest = tmp_path / "data" / "nested"
    path = datasets.download("cifar10", dest, url=f"{base}/{served.name}", progress=True)
    assert path == dest / "cifar-10-python.tar.gz" and path.read_bytes() == served.read_bytes()
    assert sorted(p.name for p in dest.iterdir()) == ["cifar-10-python.tar.gz"]  # no partial file left
    assert "cifar-10-python.tar.gz" in capsys.readouterr().err  # the tqdm bar
    assert datasets.load_cifar("cifar10", dest).train_x.shape == (10, 3, 32, 32)
    # Already present and verified: kept, the network is not touched.
    assert datasets.download("cifar10", dest, url=_closed_port_url(), progress=False) == path


def test_download_replaces_a_corrupt_archive(server, tmp_path: Path, monkeypatch) -> None:
    base, root = server
    served = install(root, "cifar10", cifar10_members(n=2), monkeypatch)
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(b"truncated")
    path = datasets.download("cifar10", tmp_path, url=f"{base}/{served.name}", progress=False)
    assert path.read_bytes() == served.read_bytes()


def test_download_checksum_mismatch_deletes(server, tmp_path: Path) -> None:
    base, root = server
    _write_tar(root / "cifar-10-python.tar.gz", cifar10_members(n=2))  # not the official bytes
    dest = tmp_path / "data"
    with pytest.raises(TaskError, match=r"has md5 [0-9a-f]{32}, expected c58f3010.*deleted it"):
        datasets.download("cifar10", dest, url=f"{base}/cifar-10-python.tar.gz", progress=False)
    assert list(dest.iterdir()) == []


def test_download_http_error(server, tmp_path: Path) -> None:
    base, _ = server
    with pytest.raises(TaskError, match=r"download of .*/nothing\.tar\.gz failed: HTTP 404 .*check --url"):
        datasets.download("cifar100", tmp_path / "data", url=f"{base}/nothing.tar.gz", progress=False)
    assert list((tmp_path / "data").iterdir()) == []


def test_download_network_error(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match=r"failed: .*check --url and your network"):
        datasets.download("cifar10", tmp_path, url=_closed_port_url(), progress=False)
    assert list(tmp_path.iterdir()) == []


def test_download_default_url_is_official(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def fake_urlopen(url: str, timeout: float) -> None:
        seen.append(url)
        raise OSError("offline")

    monkeypatch.setattr(datasets.urllib.request, "urlopen", fake_urlopen)
    with pytest.raises(TaskError, match="offline"):
        datasets.download("cifar100", tmp_path, progress=False)
    assert seen == ["https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"]
