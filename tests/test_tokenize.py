"""`bench data tokenize`: bytes and a BPE tokenizer trained offline with Hugging Face tokenizers on the bundled corpus,
both shard formats, .jsonl documents, the same ids as tokenizing at once, training on the result, and every bad
input (one error line, nothing left behind); `bench data synth-*` write what the tasks read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.cli import main
from bench.runs.tasks import tinytext, tokenize, tokenshards
from bench.runs.tasks.base import TaskError

CORPUS_CHARS = 60_000  # a slice of the bundled corpus: enough text for a 300-token BPE, quick to encode


def read(path: Path) -> np.ndarray:
    offset = 1024 if path.name not in ("train.bin", "val.bin") else 0
    return np.fromfile(path, dtype="<u2", offset=offset).astype(np.int64)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    path.write_text(tinytext.generate().text[:CORPUS_CHARS], encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def bpe(corpus: Path) -> Path:
    """A byte-level BPE trained offline on the bundled corpus, with GPT-2's end-of-text token."""
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"], show_progress=False,
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train([str(corpus)], trainer)
    path = corpus.parent / "tokenizer.json"
    tok.save(str(path))
    return path


def test_bytes_into_nanogpt_files(corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["data", "tokenize", str(corpus), "--out", str(out), "--tokenizer", "bytes", "--quiet"]) == 0
    train, val = read(out / "train.bin"), read(out / "val.bin")
    data = np.frombuffer(corpus.read_bytes(), dtype=np.uint8)
    assert np.array_equal(np.concatenate([train, val]), data)  # no end-of-text for bytes: the file as it is
    assert 0.85 < len(train) / len(data) < 0.95  # the last tenth, to the block, validates
    meta = json.loads((out / tokenshards.META).read_text())
    assert meta["tokenizer"]["vocab_size"] == 256 and meta["train_tokens"] == len(train)
    assert "--vocab-size 256" in capsys.readouterr().out


def test_a_trained_bpe_gives_the_ids_of_tokenizing_at_once_in_llmc_shards(corpus: Path, bpe: Path,
                                                                           tmp_path: Path) -> None:
    import tokenizers

    out = tmp_path / "out"
    meta = tokenize.tokenize([str(corpus)], str(out), str(bpe), fmt="llmc", shard_tokens=5000, progress=False)
    shards = {s: sorted(out.glob(f"out_{s}_*.bin")) for s in ("train", "val")}
    assert len(shards["train"]) > 2 and meta["files"]["train"] == [p.name for p in shards["train"]]
    for path in shards["train"] + shards["val"]:
        shard = tokenshards.llmc_shard(path)  # headers agree with the sizes
        assert shard.tokens <= 5000
    ids = np.concatenate([read(p) for p in shards["train"] + shards["val"]])
    tok = tokenizers.Tokenizer.from_file(str(bpe))
    eot = tok.token_to_id("<|endoftext|>")
    assert ids[0] == eot and meta["tokenizer"]["eot"] == eot
    assert np.array_equal(ids[1:], tok.encode(corpus.read_text()).ids)  # blocks cut where no token spans them
    assert meta["tokenizer"]["vocab_size"] == 300 and len(meta["tokenizer"]["sha256"]) == 64


def test_jsonl_documents_each_begin_with_end_of_text(bpe: Path, tmp_path: Path) -> None:
    docs = ["the first document.", "a second one, longer than the first.", "third"]
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(docs)))
    tokenize.tokenize([str(tmp_path)], str(tmp_path / "out"), str(bpe), val_fraction=0.3, progress=False)
    ids = np.concatenate([read(tmp_path / "out" / "train.bin"), read(tmp_path / "out" / "val.bin")])
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(bpe))
    want = [i for d in docs for i in [0, *tok.encode(d).ids]]
    assert ids.tolist() == want


def test_tokenized_shards_train(bpe: Path, corpus: Path, tmp_path: Path) -> None:
    out, results = tmp_path / "shards", tmp_path / "results"
    assert main(["data", "tokenize", str(corpus), "--out", str(out), "--tokenizer", str(bpe), "--format", "llmc",
                 "--quiet"]) == 0
    assert main(["run", "--variant", "preln", "--depth", "1", "--task", "tokens", "--data-path", str(out),
                 "--vocab-size", "300", "--seq-len", "32", "--batch-size", "8", "--steps", "3", "--optimizer", "adam",
                 "--lr", "1e-3", "--eval-tokens", "256", "--measure", "--quiet", "--chance-band", "0",
                 "--results-dir", str(results)]) == 0
    run = json.loads(next((results / "runs").glob("*.json")).read_text())
    assert run["row"]["status"] == "ok" and run["task"]["tokenizer"]["tokenizer"]["vocab_size"] == 300


def test_cut_keeps_whitespace_runs_whole() -> None:
    assert tokenize.cut("one two\nthree\n\nfour") == len("one two\nthree\n\n")
    assert tokenize.cut("one two  three") == len("one two")
    assert tokenize.cut("nospaces") == 0


def test_gpt2_needs_its_files_on_this_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tiktoken")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))
    assert len(tokenize.gpt2_files_missing()) == 2
    with pytest.raises(TaskError, match=r"GPT-2 encoding is not on this machine .* TIKTOKEN_CACHE_DIR=DIR .*"
                                        r"--tokenizer PATH/tokenizer.json"):
        tokenize.load_tokenizer("gpt2")


def test_gpt2_where_its_files_are_here() -> None:
    tiktoken = pytest.importorskip("tiktoken")
    if tokenize.gpt2_files_missing():
        pytest.skip("tiktoken's GPT-2 files are not on this machine (docs/data.md says how to provide them)")
    tok = tokenize.load_tokenizer("gpt2")
    assert (tok.vocab_size, tok.eot) == (50257, 50256)
    assert tok.encode(["Hello world"]) == [tiktoken.get_encoding("gpt2").encode_ordinary("Hello world")]


def bad_input(tmp_path: Path, corpus: Path, damage: str) -> tuple[list[str], str]:
    out = tmp_path / "out"
    if damage == "tokenizer does not parse":
        bad = tmp_path / "tokenizer.json"
        bad.write_text('{"model": 3}')
        return [str(corpus), "--out", str(out), "--tokenizer", str(bad)], \
            f"{bad} is not a tokenizer.json Hugging Face tokenizers can read"
    if damage == "unknown tokenizer":
        return [str(corpus), "--out", str(out), "--tokenizer", "gpt5"], "--tokenizer 'gpt5' is neither bytes, gpt2 nor"
    if damage == "not utf-8":
        bad = tmp_path / "latin1.txt"
        bad.write_bytes(corpus.read_bytes()[:5000] + "caf\xe9\n".encode("latin-1"))
        return [str(corpus), str(bad), "--out", str(out), "--tokenizer", "bytes"], \
            f"{bad} is not UTF-8 text (bad byte near offset 5003)"
    if damage == "jsonl without text":
        bad = tmp_path / "docs.jsonl"
        bad.write_text('{"text": "fine"}\n{"body": "no text"}\n')
        return [str(bad), "--out", str(out), "--tokenizer", "bytes"], f"{bad} line 2 has no \"text\" string"
    if damage == "missing input":
        return [str(tmp_path / "nope.txt"), "--out", str(out), "--tokenizer", "bytes"], "is neither a file nor"
    if damage == "shards already there":
        out.mkdir()
        (out / "train.bin").write_bytes(b"")
        return [str(corpus), "--out", str(out), "--tokenizer", "bytes"], f"--out {out} already holds token shards"
    if damage == "val fraction":
        return [str(corpus), "--out", str(out), "--tokenizer", "bytes", "--val-fraction", "1"], \
            "--val-fraction must be in (0, 1)"
    raise AssertionError(damage)


@pytest.mark.parametrize("damage", ["tokenizer does not parse", "unknown tokenizer", "not utf-8", "jsonl without text",
                                    "missing input", "shards already there", "val fraction"])
def test_bad_input_is_one_error_line_and_leaves_nothing(damage: str, corpus: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tokenizers")
    args, names = bad_input(tmp_path, corpus, damage)
    before = sorted(p.name for p in (tmp_path / "out").iterdir()) if (tmp_path / "out").exists() else None
    code = main(["data", "tokenize", *args, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert names in err
    after = sorted(p.name for p in (tmp_path / "out").iterdir()) if (tmp_path / "out").exists() else None
    assert after == before  # nothing written, nothing half-written left


def test_synthetic_datasets_are_what_the_tasks_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.runs.tasks import TaskOptions, get

    tokens, images, shards = tmp_path / "tokens", tmp_path / "images", tmp_path / "shards"
    assert main(["data", "synth-tokens", str(tokens), "--train-tokens", "20000", "--val-tokens", "3000",
                 "--vocab-size", "500", "--quiet"]) == 0
    t = get("tokens", options=TaskOptions(data_path=str(tokens), vocab_size=500, seq_len=32, workers=0))
    assert (t.info["train_tokens"], t.info["val_tokens"], t.info["max_token_id"]) == (20000, 3000, 499)
    args = ["--classes", "3", "--train-per-class", "4", "--val-per-class", "2", "--size", "24", "--jobs", "1",
            "--quiet"]
    assert main(["data", "synth-imagefolder", str(images), *args]) == 0
    i = get("imagefolder", options=TaskOptions(data_path=str(images), image_size=16, workers=0))
    assert (i.num_train, i.info["val_size"], i.info["classes"]) == (12, 6, 3)
    assert main(["data", "synth-imagefolder", str(shards), *args, "--format", "webdataset", "--shard-samples",
                 "5"]) == 0
    assert sorted(p.name for p in shards.glob("*.tar")) == ["train-000000.tar", "train-000001.tar",
                                                            "train-000002.tar", "val-000000.tar", "val-000001.tar"]
    again = tmp_path / "again"
    assert main(["data", "synth-imagefolder", str(again), *args]) == 0  # the same seed writes the same bytes
    assert all(p.read_bytes() == (again / p.relative_to(images)).read_bytes() for p in images.rglob("*.*"))
    assert main(["data", "synth-tokens", str(tokens), "--quiet"]) == 2  # never over an existing dataset
    assert "is not an empty directory" in capsys.readouterr().err
