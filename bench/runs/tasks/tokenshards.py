"""Token shards on disk, in the two formats LM training code writes: finding, checking and writing them.

- **nanoGPT** (Karpathy's ``data/*/prepare.py``): ``ROOT/train.bin`` and ``ROOT/val.bin``, raw little-endian uint16
  token ids, nothing else.
- **llm.c** / modded-nanogpt (``dev/data/fineweb.py``): ``ROOT/<name>_train_<NNNNNN>.bin`` and
  ``<name>_val_<NNNNNN>.bin``, each a header of 256 little-endian int32 (magic 20240520, version 1, the number of
  tokens; the rest zero) followed by that many uint16 token ids.

Nothing here reads a shard whole: headers are 1 KiB, and the id check streams a file through a fixed buffer with
plain reads (no mapping, so nothing of the file stays resident in the process).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from bench.runs.tasks.base import TaskError

MAGIC = 20240520  # llm.c's shard header magic (the date of its format)
VERSION = 1  # uint16 tokens
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
TOKEN = np.dtype("<u2")
MAX_VOCAB = 1 << 16  # uint16 ids
FORMATS = ("nanogpt", "llmc")
CHUNK_TOKENS = 1 << 20  # 2 MiB per read of the id check
META = "resbench-tokens.json"  # what `bench data tokenize` wrote there (tokenizer, vocabulary): read into the task info


@dataclass(frozen=True)
class Shard:
    """One file of tokens: ``tokens`` uint16 ids starting ``offset`` bytes into ``path``."""

    path: Path
    offset: int
    tokens: int


def nanogpt_shard(path: Path) -> Shard:
    size = path.stat().st_size
    if size % 2:
        raise TaskError(f"{path} has an odd number of bytes ({size}): it is not a file of uint16 token ids; "
                        "re-create it (nanoGPT's prepare.py, or python -m bench data tokenize)")
    with open(path, "rb") as f:
        head = np.frombuffer(f.read(8), dtype="<i4")
    if len(head) == 2 and head[0] == MAGIC:
        raise TaskError(f"{path} starts with llm.c's shard header (magic {MAGIC}): it is an llm.c shard, not nanoGPT's "
                        "headerless train.bin/val.bin; name it <name>_train_000000.bin / <name>_val_000000.bin")
    return Shard(path, 0, size // 2)


def llmc_shard(path: Path) -> Shard:
    size = path.stat().st_size
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(HEADER_BYTES), dtype="<i4")
    if len(header) < HEADER_INTS:
        raise TaskError(f"{path} has {size} bytes, fewer than llm.c's {HEADER_BYTES}-byte header: it is truncated or "
                        "not an llm.c token shard; re-create it")
    magic, version, count = (int(v) for v in header[:3])
    if magic != MAGIC:
        raise TaskError(f"{path}: header magic {magic} is not llm.c's {MAGIC}: not an llm.c token shard (nanoGPT's "
                        "headerless files are named train.bin and val.bin); re-create it with python -m bench data "
                        "tokenize --format llmc")
    if version != VERSION:
        raise TaskError(f"{path}: llm.c shard version {version}; resbench reads version {VERSION} (uint16 token ids), "
                        "so re-tokenize with a vocabulary of at most 65,536 tokens into version-1 shards")
    if size != HEADER_BYTES + 2 * count:
        raise TaskError(f"{path}: its header says {count:,} tokens ({HEADER_BYTES + 2 * count:,} bytes) but the file "
                        f"has {size:,} bytes: it is truncated, still being written, or damaged; re-create it")
    return Shard(path, HEADER_BYTES, count)


def find(root: Path) -> tuple[str, dict[str, list[Shard]]]:
    """The format and the checked shards (``train``, ``val``) under ``root``; TaskError names what is wrong."""
    if not root.is_dir():
        raise TaskError(f"--data-path {root} is not a directory; pass the directory holding train.bin and val.bin "
                        "(nanoGPT) or *_train_*.bin and *_val_*.bin shards (llm.c)")
    nano = {s: root / f"{s}.bin" for s in ("train", "val")}
    llmc = {s: sorted(p for p in root.glob(f"*_{s}_*.bin") if p.is_file()) for s in ("train", "val")}
    if nano["train"].exists() and (llmc["train"] or llmc["val"]):
        raise TaskError(f"{root} holds both nanoGPT's train.bin and llm.c-style *_train_*/*_val_* shards; keep one "
                        "format per directory")
    if nano["train"].exists() or nano["val"].exists():
        missing = [str(p) for p in nano.values() if not p.is_file()]
        if missing:
            raise TaskError(f"{missing[0]} is missing: nanoGPT's format needs both train.bin and val.bin")
        return "nanogpt", {s: [nanogpt_shard(p)] for s, p in nano.items()}
    if llmc["train"] or llmc["val"]:
        for split, paths in llmc.items():
            if not paths:
                raise TaskError(f"{root} has no *_{split}_*.bin shard; llm.c's format needs train and val shards")
        return "llmc", {s: [llmc_shard(p) for p in paths] for s, paths in llmc.items()}
    raise TaskError(f"{root} holds no token shards: neither train.bin + val.bin (nanoGPT) nor *_train_*.bin + "
                    "*_val_*.bin (llm.c); make them with python -m bench data tokenize (docs/data.md)")


def check_ids(shard: Shard, vocab_size: int, chunk: int = CHUNK_TOKENS) -> int:
    """The largest token id of ``shard``, streamed in chunks; TaskError at the first id >= ``vocab_size``."""
    largest = -1
    buf = np.empty(min(chunk, max(shard.tokens, 1)), dtype=TOKEN)
    with open(shard.path, "rb", buffering=0) as f:
        f.seek(shard.offset)
        done = 0
        while done < shard.tokens:
            want = min(len(buf), shard.tokens - done)
            n = (f.readinto(buf.data.cast("B")[: 2 * want]) or 0) // 2
            if n == 0:
                raise TaskError(f"{shard.path} ended after {done:,} of its {shard.tokens:,} tokens; re-create it")
            part = buf[:n]
            top = int(np.max(part))
            if top >= vocab_size:
                at = done + int(np.argmax(part >= vocab_size))
                raise TaskError(f"{shard.path}: token id {top} (first too large at token {at:,}) is not below "
                                f"--vocab-size {vocab_size}; pass --vocab-size {top + 1} or more (the tokenizer's "
                                "vocabulary size; GPT-2's is 50257), or re-tokenize")
            largest = max(largest, top)
            done += n
    return largest


class ShardWriter:
    """Writes one split's tokens as nanoGPT's ``<split>.bin`` or llm.c's ``<name>_<split>_NNNNNN.bin`` shards of at
    most ``shard_tokens`` tokens. Files are written under a temporary name and renamed by :meth:`commit`;
    :meth:`abort` removes them, so a failed run leaves nothing behind."""

    def __init__(self, root: Path, split: str, fmt: str, name: str = "tokens", shard_tokens: int = 100_000_000
                 ) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown token shard format {fmt!r}; choose one of {', '.join(FORMATS)}")
        self.root, self.split, self.fmt, self.name, self.limit = root, split, fmt, name, shard_tokens
        self.done: list[tuple[Path, Path]] = []  # (temporary, final)
        self.file: BinaryIO | None = None
        self.in_shard = 0
        self.total = 0

    def _final(self, i: int) -> Path:
        return self.root / (f"{self.split}.bin" if self.fmt == "nanogpt" else f"{self.name}_{self.split}_{i:06d}.bin")

    def _open(self) -> BinaryIO:
        final = self._final(len(self.done))
        tmp = final.with_name(f".{final.name}.tmp")
        self.done.append((tmp, final))
        file = self.file = open(tmp, "wb")  # noqa: SIM115  (closed by _close)
        if self.fmt == "llmc":
            file.write(bytes(HEADER_BYTES))  # the header is written last, when the count is known
        self.in_shard = 0
        return file

    def _close(self) -> None:
        if self.file is None:
            return
        f = self.file
        if self.fmt == "llmc":
            header = np.zeros(HEADER_INTS, dtype="<i4")
            header[:3] = (MAGIC, VERSION, self.in_shard)
            f.seek(0)
            f.write(header.tobytes())
        f.close()
        self.file = None

    def write(self, tokens: Iterable[int] | np.ndarray) -> None:
        ids = np.asarray(tokens, dtype=np.int64)
        low, high = (int(np.min(ids)), int(np.max(ids))) if ids.size else (0, 0)
        if low < 0 or high >= MAX_VOCAB:
            raise ValueError(f"token ids must fit uint16 (0..{MAX_VOCAB - 1}); got {low}..{high}")
        ids16 = ids.astype(TOKEN)
        while len(ids16):
            file = self.file
            if file is None or (self.fmt == "llmc" and self.in_shard >= self.limit):
                self._close()
                file = self._open()
            room = len(ids16) if self.fmt == "nanogpt" else self.limit - self.in_shard
            part, ids16 = ids16[:room], ids16[room:]
            file.write(part.tobytes())
            self.in_shard += len(part)
            self.total += len(part)

    def commit(self) -> list[Path]:
        """Close and rename the files into place; the final paths."""
        if self.file is None and not self.done:
            self._open()  # an empty split still gets its (empty) file, which the tokens task then refuses by name
        self._close()
        for tmp, final in self.done:
            os.replace(tmp, final)
        return [final for _, final in self.done]

    def abort(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        for tmp, _ in self.done:
            tmp.unlink(missing_ok=True)
