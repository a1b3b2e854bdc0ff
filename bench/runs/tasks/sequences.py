"""Sequence tasks: byte-level language modelling and synthetic tasks with a known loss floor.

- ``text``: byte-level LM (vocabulary 256) on any local UTF-8 file. ``tinytext``: the same on the
  bundled generated corpus (``bench/data/tinytext.py``), whose entropy rate is known.
- ``copy`` (Graves et al. 2014, "Neural Turing Machines"), ``reverse`` (the order-reversal task of
  Sutskever et al. 2014, "Sequence to Sequence Learning with Neural Networks") and ``recall``
  (multi-query associative recall, Ba et al. 2016, "Using Fast Weights to Attend to the Recent Past";
  Arora et al. 2023, "Zoology: Measuring and Improving Recall in Efficient Language Models").
  Positions that cannot be predicted carry the target ``IGNORE_INDEX`` and are never scored.

Everything lives on the device; batches are windows or rows picked by indexing.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.runs.tasks import tinytext
from bench.runs.tasks.base import Batch, Task, TaskError, TaskOptions, prior_entropy

IGNORE_INDEX = -100  # target of an unscored position (torch's cross-entropy default)
EVAL_TOKENS = 8_192  # tokens per eval pass: ~0.2 s for the default 6x128 Transformer on 2 idle CPU cores
TRAIN_PARTS = 9  # of 10: a text's first 90% of bytes train, the last 10% validate


# Default run length of every sequence task (when neither --epochs nor --steps is given): a few minutes
# of the default 6-layer model on 2 CPU cores; 30 epochs of a 4 MB corpus would take days there.
DEFAULT_STEPS = 300


class SequenceTask(Task):
    """Per-token cross-entropy and accuracy that skip targets equal to :data:`IGNORE_INDEX`."""

    def loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=IGNORE_INDEX)

    def correct(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return ((logits.argmax(-1) == target) & (target != IGNORE_INDEX)).sum()

    def count(self, target: torch.Tensor) -> int:
        return int((target != IGNORE_INDEX).sum())


def _eval_starts(n_bytes: int, seq_len: int, device: torch.device, tokens: int | None = None) -> torch.Tensor:
    """Starts of fixed non-overlapping windows (seq_len inputs + 1 target), evenly spread, capped by ``tokens``
    (default EVAL_TOKENS)."""
    available = (n_bytes - 1) // seq_len
    k = min(available, max(1, (tokens or EVAL_TOKENS) // seq_len))
    return (torch.arange(k) * available // k * seq_len).to(device)


class TextTask(SequenceTask):
    """Byte-level LM over ``data``: random training windows, fixed evaluation windows.

    ``extra_metrics`` gives bits per character (``loss / ln 2``, one token per byte) and perplexity.
    """

    def __init__(self, name: str, data: bytes, seq_len: int, device: torch.device, info: dict,
                 eval_tokens: int | None = None, train_tokens: int | None = None) -> None:
        if seq_len < 1:
            raise TaskError(f"--seq-len must be >= 1, got {seq_len}")
        tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        split = len(tokens) * TRAIN_PARTS // 10
        if len(tokens) - split < seq_len + 1:
            raise TaskError(
                f"{info['source']} has {len(tokens)} bytes: its last-10% validation split cannot hold one window of "
                f"seq_len + 1 = {seq_len + 1} bytes; use a file of at least ~{10 * (seq_len + 1)} bytes or a smaller "
                "--seq-len"
            )
        if train_tokens is not None and train_tokens < seq_len + 1:
            raise TaskError(f"--train-tokens {train_tokens} cannot hold one training window of seq_len + 1 = "
                            f"{seq_len + 1} bytes; give at least {seq_len + 1}")
        used = split if train_tokens is None else min(split, train_tokens)  # the first bytes of the training split
        self.seq_len, self.eval_tokens = seq_len, eval_tokens
        self.train = tokens[:used].to(device)
        self.val = tokens[split:].to(device)
        self._offsets = torch.arange(seq_len + 1, device=device)
        info = {
            **info,
            "bytes": len(tokens),
            "sha256": hashlib.sha256(data).hexdigest(),
            "split": "first 90% of bytes train, last 10% validation",
            "train_bytes": used,
            **({} if train_tokens is None else {"train_split_bytes": split, "train_tokens": train_tokens}),
            "val_bytes": len(tokens) - split,
            "val_windows": len(_eval_starts(len(self.val), seq_len, device, eval_tokens)),
        }
        # One epoch = as many windows as tile the training split once (windows are drawn at random offsets).
        super().__init__(name=name, kind="sequence", model_kwargs={"vocab_size": 256, "max_len": seq_len},
                         device=device, unit="tokens", units_per_sample=seq_len, info=info,
                         num_train=used // seq_len, default_steps=DEFAULT_STEPS,
                         chance_loss=prior_entropy(tokens[:used]))  # the training bytes' unigram entropy

    def _windows(self, data: torch.Tensor, starts: torch.Tensor) -> Batch:
        w = data[starts[:, None] + self._offsets].long()
        return w[:, :-1], w[:, 1:]

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        high = len(self.train) - self.seq_len  # a window needs seq_len + 1 bytes
        while True:
            starts = torch.randint(high, (batch_size,), generator=generator, device=generator.device)
            yield self._windows(self.train, starts.to(self.device))

    def _fixed(self, data: torch.Tensor, batch_size: int) -> Iterator[Batch]:
        starts = _eval_starts(len(data), self.seq_len, self.device, self.eval_tokens)
        for i in range(0, len(starts), batch_size):
            yield self._windows(data, starts[i : i + batch_size])

    def val_batches(self, batch_size: int) -> Iterator[Batch]:
        return self._fixed(self.val, batch_size)

    def train_eval_batches(self, batch_size: int) -> Iterator[Batch]:
        return self._fixed(self.train, batch_size)

    def extra_metrics(self, val_loss: float) -> dict[str, float]:
        return {"bpc": val_loss / math.log(2), "perplexity": math.exp(val_loss) if val_loss < 700 else math.inf}


def text_file(device: torch.device, seed: int, options: TaskOptions) -> Task:
    """``text``: byte-level LM on the UTF-8 file ``options.data_path`` (``seed`` only drives the batch sampler).

    Without a path it trains on the bundled corpus (the ``tinytext`` task's text), so
    ``bench run --task text`` works on a fresh machine; the run's task info names the source.
    """
    if not options.data_path:
        task = bundled_text(device, seed, options)
        task.name = "text"
        return task
    path = Path(options.data_path).expanduser()
    if not path.is_file():
        raise TaskError(f"--data-path {options.data_path!r} is not an existing file; pass a UTF-8 text file")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TaskError(f"cannot read --data-path {options.data_path!r} ({e.strerror}); check the file") from None
    if not data:
        raise TaskError(f"--data-path {options.data_path!r} is empty; pass a non-empty UTF-8 text file")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TaskError(
            f"--data-path {options.data_path!r} is not valid UTF-8 (bad byte at offset {e.start}); "
            "re-encode it, e.g. `iconv -t UTF-8`"
        ) from None
    return TextTask("text", data, options.seq_len, device, {"source": str(path)}, options.eval_tokens,
                    options.train_tokens)


def bundled_text(device: torch.device, seed: int, options: TaskOptions) -> Task:
    """``tinytext``: the generated corpus of :mod:`bench.runs.tasks.tinytext` (fixed, whatever ``seed``), no
    download."""
    corpus = tinytext.generate()
    info = {
        "source": f"bench/data/tinytext.py (seed {tinytext.DEFAULT_SEED})",
        "entropy_floor_bpc": corpus.entropy_bpc,  # entropy rate of the generating process: no model beats it
    }
    return TextTask("tinytext", corpus.text.encode("ascii"), options.seq_len, device, info, options.eval_tokens,
                    options.train_tokens)


class SyntheticTask(SequenceTask):
    """Fixed generated rows ``(x, y)``; ``loss_floor`` is the best achievable mean loss on scored positions."""

    def __init__(self, name: str, train: Batch, val: Batch, vocab_size: int, loss_floor: float,
                 device: torch.device, info: dict) -> None:
        self.train = (train[0].to(device), train[1].to(device))
        self.val = (val[0].to(device), val[1].to(device))
        self.loss_floor = loss_floor
        seq_len = train[0].shape[1]
        self.eval_rows = max(1, EVAL_TOKENS // seq_len)
        info = {**info, "train_size": len(train[0]), "val_size": len(val[0]), "loss_floor_nats": loss_floor,
                "eval_rows": min(self.eval_rows, len(val[0])), "vocab_size": vocab_size,
                "scored_per_row": int((train[1][0] != IGNORE_INDEX).sum())}
        super().__init__(name=name, kind="sequence", model_kwargs={"vocab_size": vocab_size, "max_len": seq_len},
                         device=device, unit="tokens", units_per_sample=seq_len, info=info,
                         num_train=len(train[0]), default_steps=DEFAULT_STEPS,
                         chance_loss=prior_entropy(train[1], ignore=IGNORE_INDEX))  # of the scored targets

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        x, y = self.train
        while True:
            idx = torch.randint(len(x), (batch_size,), generator=generator, device=generator.device).to(self.device)
            yield x[idx], y[idx]

    def _fixed(self, data: Batch, batch_size: int) -> Iterator[Batch]:
        n = min(len(data[0]), self.eval_rows)
        for i in range(0, n, batch_size):
            j = min(i + batch_size, n)
            yield data[0][i:j], data[1][i:j]

    def val_batches(self, batch_size: int) -> Iterator[Batch]:
        return self._fixed(self.val, batch_size)

    def train_eval_batches(self, batch_size: int) -> Iterator[Batch]:
        return self._fixed(self.train, batch_size)

    def extra_metrics(self, val_loss: float) -> dict[str, float]:
        return {"excess_loss": val_loss - self.loss_floor}


def _shift(seq: torch.Tensor, scored: torch.Tensor) -> Batch:
    """Next-token pairs from rows of ``seq_len + 1`` tokens; targets outside the ``scored`` mask are ignored."""
    y = seq[:, 1:].clone()
    y[:, ~scored] = IGNORE_INDEX
    return seq[:, :-1].contiguous(), y


def _splits(
    options: TaskOptions, seed: int, min_len: int, make: Callable[[int, torch.Generator], Batch]
) -> tuple[Batch, Batch]:
    if options.seq_len < min_len:
        raise TaskError(f"this task needs --seq-len >= {min_len}, got {options.seq_len}")
    for key in ("train_size", "val_size"):
        if getattr(options, key) < 1:
            raise TaskError(f"--{key.replace('_', '-')} must be >= 1, got {getattr(options, key)}")
    # Train and validation rows come from separate streams, so changing one size never changes the other split.
    return (make(options.train_size, torch.Generator().manual_seed(2 * seed)),
            make(options.val_size, torch.Generator().manual_seed(2 * seed + 1)))


COPY_SYMBOLS = 16  # data alphabet of copy/reverse; token 16 is the separator (and the odd-length pad)


def _copy_like(name: str, device: torch.device, seed: int, options: TaskOptions, flip: bool) -> Task:
    t = options.seq_len
    m, sep = t // 2, COPY_SYMBOLS

    def make(n: int, g: torch.Generator) -> Batch:
        a = torch.randint(COPY_SYMBOLS, (n, m), generator=g)
        tail = torch.full((n, t - 2 * m), sep)  # 1 pad token when seq_len is odd
        seq = torch.cat([a, torch.full((n, 1), sep), a.flip(1) if flip else a, tail], dim=1)
        scored = torch.zeros(t, dtype=torch.bool)
        scored[m : 2 * m] = True  # the inputs after the separator predict the second half
        return _shift(seq, scored)

    train, val = _splits(options, seed, 2, make)
    order = "reversed" if flip else "in order"
    layout = f"{m} random symbols of {COPY_SYMBOLS}, separator {sep}, then the same symbols {order}"
    return SyntheticTask(name, train, val, COPY_SYMBOLS + 1, 0.0, device, {"layout": layout})


def copy_task(device: torch.device, seed: int, options: TaskOptions) -> Task:
    """``copy``: ``a_1..a_m SEP a_1..a_m`` (m = seq_len // 2); only the copy is scored. Loss floor 0 nats.

    The first half is uniform over 16 symbols and unscored (it cannot be predicted); after the
    separator every token is a deterministic function of the prefix, so a perfect model has loss 0.
    """
    return _copy_like("copy", device, seed, options, flip=False)


def reverse_task(device: torch.device, seed: int, options: TaskOptions) -> Task:
    """``reverse``: ``a_1..a_m SEP a_m..a_1``; only the reversed half is scored. Loss floor 0 nats (as ``copy``)."""
    return _copy_like("reverse", device, seed, options, flip=True)


RECALL_VALUES = 64  # value alphabet of recall; keys number max(64, pairs) so they are distinct within a row


def recall_task(device: torch.device, seed: int, options: TaskOptions) -> Task:
    """``recall``: ``k_1 v_1 .. k_p v_p`` then queries ``k_i v_i`` of distinct stored keys; the value after each
    query key is scored. ``p = seq_len // 4`` pairs, ``min(p, (seq_len + 1 - 2p) // 2)`` queries, pad to length.

    Keys are distinct within a row and every queried key was stored once, so its value is determined:
    loss floor 0 nats. Unscored: the stored pairs (values are uniform random) and the query keys.
    """
    t = options.seq_len
    p = t // 4
    q = min(p, (t + 1 - 2 * p) // 2)
    n_keys = max(64, p)
    pad = n_keys + RECALL_VALUES

    def make(n: int, g: torch.Generator) -> Batch:
        keys = torch.rand(n, n_keys, generator=g).argsort(dim=1)[:, :p]
        vals = torch.randint(n_keys, n_keys + RECALL_VALUES, (n, p), generator=g)
        asked = torch.rand(n, p, generator=g).argsort(dim=1)[:, :q]
        queries = torch.stack([keys.gather(1, asked), vals.gather(1, asked)], dim=2).reshape(n, 2 * q)
        tail = torch.full((n, t + 1 - 2 * p - 2 * q), pad)
        seq = torch.cat([torch.stack([keys, vals], dim=2).reshape(n, 2 * p), queries, tail], dim=1)
        scored = torch.zeros(t, dtype=torch.bool)
        scored[2 * p : 2 * p + 2 * q : 2] = True  # input = a query key, target = its value
        return _shift(seq, scored)

    train, val = _splits(options, seed, 4, make)
    layout = f"{p} key-value pairs (keys 0..{n_keys - 1}, values {n_keys}..{pad - 1}), {q} queries, pad {pad}"
    return SyntheticTask("recall", train, val, pad + 1, 0.0, device, {"layout": layout})
