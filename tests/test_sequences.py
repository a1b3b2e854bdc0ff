"""Sequence tasks: text splits and windows, tinytext, copy/reverse/recall layouts, ignore_index, errors."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from bench.runs.tasks import TaskError, TaskOptions, get, tinytext
from bench.runs.tasks.sequences import EVAL_TOKENS, IGNORE_INDEX, SequenceTask, SyntheticTask, TextTask, _eval_starts

CPU = torch.device("cpu")


def write(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "corpus.txt"
    path.write_bytes(data)
    return str(path)


def text_task(tmp_path: Path, data: bytes, seq_len: int = 16) -> TextTask:
    task = get("text", options=TaskOptions(data_path=write(tmp_path, data), seq_len=seq_len))
    assert isinstance(task, TextTask)
    return task


# 1000 ASCII bytes: the training 90% cycles through 32..95, the validation 10% through 96..127.
ASCII_RAMP = bytes(32 + i % 64 for i in range(900)) + bytes(96 + i % 32 for i in range(100))


def test_text_split_and_metadata(tmp_path: Path) -> None:
    task = text_task(tmp_path, ASCII_RAMP)
    assert (len(task.train), len(task.val)) == (900, 100)  # first 90% train, last 10% validation
    assert bytes(task.val.tolist()) == ASCII_RAMP[900:]
    assert task.model_kwargs == {"vocab_size": 256, "max_len": 16}
    assert (task.kind, task.unit, task.units_per_sample) == ("sequence", "tokens", 16)
    assert task.info["bytes"] == 1000 and len(task.info["sha256"]) == 64


def test_text_train_windows_are_contiguous_train_bytes(tmp_path: Path) -> None:
    task = text_task(tmp_path, ASCII_RAMP)
    x, y = next(task.train_batches(64, torch.Generator().manual_seed(0)))
    assert x.shape == y.shape == (64, 16) and x.dtype == torch.long
    assert torch.equal(y[:, :-1], x[:, 1:])
    assert torch.equal((y - x) % 64, torch.ones(64, 16, dtype=torch.long))  # one contiguous run of the ramp
    assert int(x.min()) >= 32 and int(y.max()) < 96  # inputs and targets from the training split only


def test_text_val_windows_fixed_and_non_overlapping(tmp_path: Path) -> None:
    task = text_task(tmp_path, ASCII_RAMP)
    batches = list(task.val_batches(4))
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    assert x.shape == (6, 16)  # (100 - 1) // 16 windows
    val = torch.tensor(list(ASCII_RAMP[900:]))
    for k in range(6):
        assert torch.equal(x[k], val[16 * k : 16 * k + 16]) and torch.equal(y[k], val[16 * k + 1 : 16 * k + 17])
    again = torch.cat([b[0] for b in task.val_batches(5)])
    assert torch.equal(x, again)
    assert sum(len(b[0]) for b in task.train_eval_batches(7)) == (900 - 1) // 16


def test_eval_windows_are_capped() -> None:
    starts = _eval_starts(1_000_000, 16, CPU)
    assert len(starts) == EVAL_TOKENS // 16
    assert bool((starts.diff() >= 16).all()) and int(starts[-1]) + 17 <= 1_000_000 and int(starts[0]) == 0


def test_train_batches_deterministic_given_generator(tmp_path: Path) -> None:
    task = text_task(tmp_path, ASCII_RAMP)

    def draw(seed: int) -> list[torch.Tensor]:
        it = task.train_batches(8, torch.Generator().manual_seed(seed))
        return [next(it)[0] for _ in range(3)]

    assert all(torch.equal(a, b) for a, b in zip(draw(3), draw(3), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(draw(3), draw(4), strict=True))


def test_bpc_and_perplexity(tmp_path: Path) -> None:
    task = text_task(tmp_path, ASCII_RAMP)
    m = task.extra_metrics(1.5 * math.log(2))
    assert m["bpc"] == pytest.approx(1.5) and m["perplexity"] == pytest.approx(2**1.5)
    assert task.extra_metrics(1e4)["perplexity"] == math.inf


def test_text_errors(tmp_path: Path) -> None:
    default = get("text", options=TaskOptions())  # no path: the bundled corpus
    assert default.name == "text" and default.info["source"].startswith("bench/data/tinytext.py")
    with pytest.raises(TaskError, match="is not an existing file"):
        get("text", options=TaskOptions(data_path=str(tmp_path / "missing.txt")))
    with pytest.raises(TaskError, match="is not an existing file"):
        get("text", options=TaskOptions(data_path=str(tmp_path)))
    with pytest.raises(TaskError, match="is empty"):
        get("text", options=TaskOptions(data_path=write(tmp_path, b"")))
    with pytest.raises(TaskError, match=r"not valid UTF-8 \(bad byte at offset 3\).*iconv"):
        get("text", options=TaskOptions(data_path=write(tmp_path, b"abc\xff" * 100)))
    with pytest.raises(TaskError, match=r"cannot hold one window.*at least ~170 bytes or a smaller --seq-len"):
        get("text", options=TaskOptions(data_path=write(tmp_path, b"a" * 100), seq_len=16))
    with pytest.raises(TaskError, match="--seq-len must be >= 1"):
        get("text", options=TaskOptions(data_path=write(tmp_path, b"a" * 100), seq_len=0))


def test_text_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, b"hello")

    def deny(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", deny)
    with pytest.raises(TaskError, match=r"cannot read --data-path .*Permission denied"):
        get("text", options=TaskOptions(data_path=path))


def test_text_accepts_multibyte_utf8(tmp_path: Path) -> None:
    task = text_task(tmp_path, "héllo wörld — ✓ ".encode() * 40, seq_len=8)
    assert int(task.train.max()) > 127  # bytes, not characters: vocabulary 256


def test_ignore_index_in_loss_correct_count() -> None:
    task = SequenceTask(name="t", kind="sequence", model_kwargs={}, device=CPU)
    logits = torch.tensor([[[2.0, 0.0, -1.0], [0.0, 3.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 5.0]]])
    target = torch.tensor([[0, IGNORE_INDEX, 2, IGNORE_INDEX]])
    by_hand = -(torch.log_softmax(logits[0, 0], -1)[0] + torch.log_softmax(logits[0, 2], -1)[2]) / 2
    torch.testing.assert_close(task.loss(logits, target), by_hand)
    assert int(task.correct(logits, target)) == 1  # position 1 and 3 are "right" but unscored
    assert task.count(target) == 2


def opts(**kw: int) -> TaskOptions:
    return TaskOptions(**{"seq_len": 12, "train_size": 32, "val_size": 8, **kw})


@pytest.mark.parametrize(("name", "flip"), [("copy", False), ("reverse", True)])
@pytest.mark.parametrize("seq_len", [12, 9])
def test_copy_and_reverse_layout(name: str, flip: bool, seq_len: int) -> None:
    task = get(name, seed=1, options=opts(seq_len=seq_len))
    assert isinstance(task, SyntheticTask)
    x, y = task.train
    m = seq_len // 2
    assert x.shape == y.shape == (32, seq_len) and task.model_kwargs == {"vocab_size": 17, "max_len": seq_len}
    assert bool((x[:, m] == 16).all()) and int(x[:, :m].max()) < 16
    first = x[:, :m]
    assert torch.equal(y[:, m : 2 * m], first.flip(1) if flip else first)  # determined by the prefix: floor 0
    assert bool((y[:, :m] == IGNORE_INDEX).all()) and bool((y[:, 2 * m :] == IGNORE_INDEX).all())
    assert task.count(y) == 32 * m and task.info["loss_floor_nats"] == 0.0


def test_recall_targets_are_the_stored_values() -> None:
    task = get("recall", seed=2, options=opts(seq_len=32))
    x, y = task.train
    p = 8
    assert task.model_kwargs == {"vocab_size": 129, "max_len": 32}
    for row_x, row_y in zip(x, y, strict=True):
        keys, vals = row_x[: 2 * p : 2], row_x[1 : 2 * p : 2]
        assert len(set(keys.tolist())) == p and int(keys.max()) < 64 and int(vals.min()) >= 64
        scored = (row_y != IGNORE_INDEX).nonzero().flatten()
        assert len(scored) == 8
        for pos in scored.tolist():
            (j,) = (keys == row_x[pos]).nonzero().flatten().tolist()  # the query key was stored exactly once
            assert row_y[pos] == vals[j]


@pytest.mark.parametrize(("name", "min_len"), [("copy", 2), ("reverse", 2), ("recall", 4)])
def test_synthetic_minimum_length(name: str, min_len: int) -> None:
    task = get(name, options=opts(seq_len=min_len))
    assert task.count(task.train[1]) == 32  # one scored position per row
    with pytest.raises(TaskError, match=f"needs --seq-len >= {min_len}, got {min_len - 1}"):
        get(name, options=opts(seq_len=min_len - 1))


@pytest.mark.parametrize("key", ["train_size", "val_size"])
def test_synthetic_sizes_must_be_positive(key: str) -> None:
    with pytest.raises(TaskError, match=f"--{key.replace('_', '-')} must be >= 1"):
        get("copy", options=opts(**{key: 0}))


@pytest.mark.parametrize("name", ["copy", "reverse", "recall"])
def test_synthetic_determinism_and_splits(name: str) -> None:
    a, b, c = get(name, seed=5, options=opts()), get(name, seed=5, options=opts()), get(name, seed=6, options=opts())
    assert torch.equal(a.train[0], b.train[0]) and not torch.equal(a.train[0], c.train[0])
    assert not torch.equal(a.train[0][:8], a.val[0])
    bigger = get(name, seed=5, options=opts(train_size=64))
    assert torch.equal(bigger.val[0], a.val[0])  # the validation split does not depend on train_size
    it1 = a.train_batches(4, torch.Generator().manual_seed(0))
    it2 = b.train_batches(4, torch.Generator().manual_seed(0))
    for _ in range(3):
        (x1, y1), (x2, y2) = next(it1), next(it2)
        assert torch.equal(x1, x2) and torch.equal(y1, y2)


def test_synthetic_eval_is_capped_and_fixed() -> None:
    task = get("copy", options=opts(seq_len=64, val_size=1000))
    rows = sum(len(x) for x, _ in task.val_batches(100))
    assert rows == EVAL_TOKENS // 64 == task.info["eval_rows"]
    assert sum(len(x) for x, _ in task.train_eval_batches(10)) == 32  # fewer train rows than the cap
    first = next(iter(task.val_batches(3)))[0]
    assert torch.equal(first, task.val[0][:3])
    assert task.extra_metrics(0.25) == {"excess_loss": 0.25}


def test_tinytext_task() -> None:
    task = get("tinytext", options=TaskOptions(seq_len=64))
    assert isinstance(task, TextTask) and task.model_kwargs == {"vocab_size": 256, "max_len": 64}
    assert task.info["bytes"] >= tinytext.DEFAULT_BYTES
    assert 0.5 < task.info["entropy_floor_bpc"] < 1.0
    assert task.info["val_windows"] == EVAL_TOKENS // 64
    x, _ = next(task.train_batches(4, torch.Generator().manual_seed(0)))
    assert x.shape == (4, 64) and int(x.max()) < 128  # ASCII
    assert get("tinytext", seed=9, options=TaskOptions(seq_len=64)).info["sha256"] == task.info["sha256"]


def test_tinytext_word_classes_are_disjoint() -> None:
    forms = [w.lower() for cls in tinytext.word_classes().values() for line in cls for w in line]
    forms += list(tinytext.FUNCTION_WORDS)
    assert len(forms) == len(set(forms)), sorted({f for f in forms if forms.count(f) > 1})
    assert all(
        len(line) == 2
        for key in ("nouns", "intransitive_verbs", "transitive_verbs")
        for line in tinytext.word_classes()[key]
    )


def test_tinytext_generation_is_seeded_and_consistent() -> None:
    generate = tinytext.generate.__wrapped__  # bypass the cache: really generate twice
    a, b, c = generate(20_000, 1), generate(20_000, 1), generate(20_000, 2)
    assert a == b and a.text != c.text and len(a.text) >= 20_000 and a.text.endswith("\n")
    numbers = [line[0] for line in tinytext.word_classes()["numbers"]]
    value = {w.capitalize(): i for i, w in enumerate(numbers)} | {w: i for i, w in enumerate(numbers)}
    sums = re.findall(r"(\w+) (plus|minus) (\w+) is (\w+)\.", a.text)
    assert len(sums) > 20
    for x, op, y, z in sums:
        assert value[z] == (value[x] + value[y] if op == "plus" else value[x] - value[y])
    for start, end, run in re.findall(r"counted from (\w+) to (\w+): ([\w, ]+)\.", a.text):
        assert [value[w] for w in run.split(", ")] == list(range(value[start], value[end] + 1))


def test_information_accounting() -> None:
    src = tinytext.Source(0)
    table = tinytext.Table(["a", "b"], [1.0, 3.0])
    assert table.cost == pytest.approx([2.0, math.log2(4 / 3)])
    picks = [src.pick(table) for _ in range(4000)]
    assert picks.count("b") / 4000 == pytest.approx(0.75, abs=0.03)
    assert src.bits == pytest.approx(picks.count("a") * 2.0 + picks.count("b") * math.log2(4 / 3))
    src = tinytext.Source(0)
    hits = sum(src.chance(0.25) for _ in range(100))
    assert src.bits == pytest.approx(hits * 2.0 + (100 - hits) * math.log2(4 / 3))


def test_a_transformer_learns_copy_quickly() -> None:
    """Smoke test of task + model together: a few steps of Adam reduce the scored loss."""
    import variants

    torch.manual_seed(0)
    task = get("copy", options=opts(seq_len=8, train_size=256))
    model = variants.create("preln", depth=1, d_model=32, n_heads=2, d_ff=64, **task.model_kwargs)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    batches = task.train_batches(32, torch.Generator().manual_seed(0))
    losses = []
    for _ in range(60):
        x, y = next(batches)
        loss = task.loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5


def test_epoch_length_and_default_run_length() -> None:
    from bench.runs.tasks.sequences import DEFAULT_STEPS

    text = get("text", options=TaskOptions(seq_len=64))
    assert text.num_train == text.info["train_bytes"] // 64 and text.default_steps == DEFAULT_STEPS
    copy = get("copy", options=TaskOptions(seq_len=16, train_size=100, val_size=10))
    assert copy.num_train == 100 and copy.default_steps == DEFAULT_STEPS
