"""``tokens``: language modelling on pre-tokenized corpora that stay on disk, memory-mapped, never read whole.

``--data-path ROOT`` holds nanoGPT's ``train.bin``/``val.bin`` or llm.c's ``*_train_*.bin``/``*_val_*.bin`` shards
(:mod:`bench.runs.tasks.tokenshards`): OpenWebText as nanoGPT prepares it, FineWeb as llm.c and modded-nanogpt do,
or any text through ``python -m bench data tokenize``.

- **Windows.** A split is cut into windows of ``--seq-len + 1`` tokens at a stride of ``--seq-len`` inside each
  shard (window ``k`` of a shard is its tokens ``[kT, kT + T]``: every token is predicted once, none across a shard's
  end). An epoch visits every training window once in a seeded pseudorandom order (:mod:`bench.runs.tasks.loading`);
  under torchrun each rank reads only its own share of each global batch, which is the one-process batch.
- **Reading.** A batch maps the shards it touches for the moment of the read and unmaps them after (as nanoGPT
  re-creates its memmap each batch), so the pages read never accumulate in the process: its resident memory stays
  that of a few batches, whatever the corpus size. Reads happen in DataLoader workers (``--workers``, default 1).
- **Evaluation** is on a fixed set of validation windows, spread evenly over the split and the same for every seed
  and variant: ``--eval-tokens`` tokens (default :data:`DEFAULT_EVAL_TOKENS`; modded-nanogpt's speedrun scores
  10,485,760), at most ``--eval-batches`` batches. The training-error pass takes as many windows of the training split.
- **Before training** every shard's header is checked against its size, and every token id against
  ``--vocab-size`` (a streamed pass over the files); the task info records the shards, their token counts and the
  largest id.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from bench.runs.tasks import loading, tokenshards
from bench.runs.tasks.base import Batch, Task, TaskError, TaskOptions
from bench.runs.tasks.sequences import DEFAULT_STEPS, SequenceTask

DEFAULT_EVAL_TOKENS = 1 << 20  # 1,048,576 tokens per evaluation pass: 1024 windows of GPT-2's 1024
DEFAULT_WORKERS = 1  # reading a batch of windows is cheap; one worker overlaps it with the step
SHOWN = 64  # shards named in the task info (all are counted)
CHANCE_TOKENS = 1 << 24  # the training tokens whose unigram entropy is the task's chance level (the first ones)
CHUNK = 1 << 20  # tokens counted at a time: the counts never hold more than a few MB


def unigram_entropy(shards: list[tokenshards.Shard], vocab_size: int, limit: int = CHANCE_TOKENS) -> tuple[float, int]:
    """The entropy (nats) of the unigram distribution of the first ``limit`` tokens of ``shards``, and how many
    tokens it read: counted a chunk at a time, so a shard set larger than memory is never read whole."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    read = 0
    for shard in shards:
        tokens = np.memmap(shard.path, dtype=tokenshards.TOKEN, mode="r", offset=shard.offset, shape=(shard.tokens,))
        take = min(shard.tokens, limit - read)
        for start in range(0, take, CHUNK):
            counts += np.bincount(np.asarray(tokens[start : min(start + CHUNK, take)]), minlength=vocab_size)
        read += take
        del tokens
        if read >= limit:
            break
    p = counts[counts > 0] / max(read, 1)
    return float(-(p * np.log(p)).sum()), read


class Windows:
    """The windows of one split: ``(n_tokens - 1) // seq_len`` per shard, numbered across the shards in order; with
    ``tokens``, those within the split's first ``tokens`` tokens (the shards in order) only."""

    def __init__(self, shards: list[tokenshards.Shard], seq_len: int, tokens: int | None = None) -> None:
        self.shards, self.seq_len = shards, seq_len
        held = np.array([s.tokens for s in shards], dtype=np.int64)
        if tokens is not None:  # each shard's share of the first `tokens`
            held = np.clip(tokens - np.concatenate([[0], np.cumsum(held)[:-1]]), 0, held)
        counts = np.maximum(held - 1, 0) // seq_len
        self.ends = np.cumsum(counts)  # window w lives in the first shard whose end is above w

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def locate(self, windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Shard index and first-token offset (in tokens) of each window."""
        shard = np.searchsorted(self.ends, windows, side="right")
        first = windows - np.concatenate([[0], self.ends])[shard]
        return shard, first * self.seq_len


class TokenWindows(Dataset[Any]):
    """Map-style dataset whose key is ``(split, windows)``: the windows' ``seq_len + 1`` tokens as one int32 tensor
    (inputs and targets overlap: half the bytes of two int64 tensors, a quarter after the cast on the device)."""

    def __init__(self, splits: dict[str, Windows]) -> None:
        self.splits = splits

    def __getitem__(self, key: tuple[str, np.ndarray]) -> torch.Tensor:
        split, windows = key
        index = self.splits[split]
        span = index.seq_len + 1
        out = np.empty((len(windows), span), dtype=np.int32)
        shard_of, start = index.locate(np.asarray(windows, dtype=np.int64))
        for s in np.unique(shard_of):
            shard = index.shards[int(s)]
            # Mapped for this read only: unmapping drops the pages from the process (they stay in the page cache).
            tokens = np.memmap(shard.path, dtype=tokenshards.TOKEN, mode="r", offset=shard.offset,
                               shape=(shard.tokens,))
            for row in np.flatnonzero(shard_of == s):
                out[row] = tokens[start[row] : start[row] + span]
            del tokens
        return torch.from_numpy(out)


class TokenTask(SequenceTask):
    """Random training windows and fixed evaluation windows of a shard set, through a DataLoader."""

    def __init__(self, splits: dict[str, Windows], options: TaskOptions, device: torch.device, workers: int,
                 info: dict[str, Any], chance_loss: float | None = None) -> None:
        self.splits, self.options = splits, options
        self.dataset = TokenWindows(splits)
        self._eval_loaders: dict[tuple[str, int], DataLoader[Any]] = {}
        self._workers = loading.Workers()
        super().__init__(name="tokens", kind="sequence", device=device, info=info, unit="tokens",
                         units_per_sample=options.seq_len, num_train=len(splits["train"]),
                         default_steps=DEFAULT_STEPS, loader_workers=workers, per_rank_batches=True,
                         model_kwargs={"vocab_size": options.vocab_size, "max_len": options.seq_len},
                         chance_loss=chance_loss)

    def set_workers(self, workers: int) -> None:
        """Load with ``workers`` worker processes from now on (``bench perf loader`` compares counts)."""
        self.loader_workers = self.info["workers"] = workers

    def _loader(self, keys: Any, persistent: bool = False) -> DataLoader[Any]:
        return loading.make_loader(self.dataset, keys, workers=self.loader_workers or 0,
                                   prefetch=self.options.prefetch, device=self.device, persistent=persistent)

    def close(self) -> None:
        self._workers.stop()
        self._eval_loaders.clear()

    def _batches(self, loader: DataLoader[Any]) -> Iterator[Batch]:
        for windows in self._workers.batches(loader):
            tokens = windows.to(self.device, non_blocking=True).long()
            yield tokens[:, :-1], tokens[:, 1:]

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        return self.train_batches_from(batch_size, generator, 0)

    def train_batches_from(self, batch_size: int, generator: torch.Generator, start: int) -> Iterator[Batch]:
        keys = loading.EpochBatches(len(self.splits["train"]), batch_size, generator, self.options.rank,
                                    self.options.world_size, start)
        return self._batches(self._loader(("train", w) for w, _ in keys))

    def eval_windows(self, split: str, batch_size: int) -> np.ndarray:
        """The fixed windows of an evaluation pass over ``split``: evenly spread, seed-independent."""
        tokens = self.options.eval_tokens or DEFAULT_EVAL_TOKENS
        count = max(1, tokens // self.options.seq_len)
        if self.options.eval_batches is not None:
            count = min(count, self.options.eval_batches * batch_size)
        return loading.fixed_subset(len(self.splits[split]), count)

    def _fixed(self, split: str, batch_size: int) -> Iterator[Batch]:
        if (split, batch_size) not in self._eval_loaders:
            windows = self.eval_windows(split, batch_size)
            self.info[f"{split}_eval_windows"] = len(windows)
            keys = [(split, c) for c in loading.chunks(windows, batch_size)]
            self._eval_loaders[split, batch_size] = self._loader(keys, persistent=True)
        return self._batches(self._eval_loaders[split, batch_size])

    def val_batches(self, batch_size: int) -> Iterator[Batch]:
        return self._fixed("val", batch_size)

    def train_eval_batches(self, batch_size: int) -> Iterator[Batch]:
        return self._fixed("train", batch_size)

    def extra_metrics(self, val_loss: float) -> dict[str, float]:
        return {"perplexity": math.exp(val_loss) if val_loss < 700 else math.inf,
                "bits_per_token": val_loss / math.log(2)}


def tokens(device: torch.device, seed: int, options: TaskOptions) -> Task:
    """``tokens``: ``--data-path ROOT`` of nanoGPT or llm.c token shards (``seed`` only drives the window order)."""
    if not options.data_path:
        raise TaskError("task tokens needs --data-path ROOT: a directory of nanoGPT's train.bin/val.bin or llm.c's "
                        "*_train_*.bin/*_val_*.bin shards (python -m bench data tokenize makes them; docs/data.md)")
    if options.vocab_size > tokenshards.MAX_VOCAB:
        raise TaskError(f"--vocab-size {options.vocab_size} exceeds what uint16 shards can hold "
                        f"({tokenshards.MAX_VOCAB})")
    started = time.perf_counter()
    root = Path(options.data_path).expanduser()
    fmt, shards = tokenshards.find(root)
    largest = max(tokenshards.check_ids(s, options.vocab_size) for split in shards.values() for s in split)
    splits = {name: Windows(found, options.seq_len, options.train_tokens if name == "train" else None)
              for name, found in shards.items()}
    for name, index in splits.items():
        if not len(index) and name == "train" and options.train_tokens is not None:
            raise TaskError(f"--train-tokens {options.train_tokens} holds no training window of --seq-len + 1 = "
                            f"{options.seq_len + 1} tokens within a shard; give more")
        if not len(index):
            have = sum(s.tokens for s in index.shards)
            raise TaskError(f"the {name} shards of {root} hold {have:,} tokens, not one window of --seq-len + 1 = "
                            f"{options.seq_len + 1} tokens in any shard; use a smaller --seq-len or more data")
    workers = options.workers if options.workers is not None else loading.default_workers(DEFAULT_WORKERS)
    info: dict[str, Any] = {
        "root": str(root), "format": fmt, "vocab_size": options.vocab_size, "max_token_id": largest,
        "windows": "seq_len + 1 tokens at stride seq_len within each shard; epochs in a seeded order",
        "eval_tokens": options.eval_tokens or DEFAULT_EVAL_TOKENS, "eval_batches": options.eval_batches,
        "workers": workers, "prefetch": options.prefetch,
        **{f"{name}_tokens": sum(s.tokens for s in found) for name, found in shards.items()},
        **{f"{name}_windows": len(index) for name, index in splits.items()},
        **{f"{name}_shards": {"count": len(found), "files": [[s.path.name, s.tokens] for s in found[:SHOWN]]}
           for name, found in shards.items()},
        "tokenizer": _meta(root),
    }  # fmt: skip
    if options.train_tokens is not None:  # the data scale: the windows of the first train_tokens only
        info["train_tokens_used"] = min(options.train_tokens, info["train_tokens"])
    chance, counted = unigram_entropy(shards["train"], options.vocab_size,
                                      min(CHANCE_TOKENS, options.train_tokens or CHANCE_TOKENS))
    info |= {"chance_loss_tokens": counted, "check_s": round(time.perf_counter() - started, 3)}
    return TokenTask(splits, options, device, workers, info, chance)


def _meta(root: Path) -> dict[str, Any] | None:
    """What ``bench data tokenize`` recorded beside the shards (tokenizer, vocabulary), if it made them."""
    try:
        meta = json.loads((root / tokenshards.META).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None
