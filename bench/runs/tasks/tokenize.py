"""``python -m bench data tokenize``: text files into token shards the ``tokens`` task reads, streaming.

Inputs are text files (UTF-8), ``.jsonl`` files (one JSON object per line, its ``"text"`` a document: how FineWeb and
OpenWebText are commonly exported) or directories of them (every file below, sorted). A text file is one document;
a tokenizer with an end-of-text token (GPT-2's ``<|endoftext|>``) gets it before each document, as llm.c's FineWeb
script does. Files are read in blocks and each block is cut after a newline that a non-space character follows, where
GPT-2-style pre-tokenisation never joins two tokens, so no file is ever held whole and the ids are those of
tokenizing the file at once.

The last ``--val-fraction`` of the input (by bytes, to the block) becomes the validation split. Outputs are written
under temporary names and renamed only when everything succeeded: a bad input or tokenizer leaves nothing behind.

Tokenizers: ``bytes`` (UTF-8 bytes, vocabulary 256), ``gpt2`` (tiktoken's GPT-2 BPE, vocabulary 50257, used only
where its files are already on this machine: :func:`gpt2_files_missing`), or a ``tokenizer.json`` of Hugging Face
``tokenizers`` (trained with that library, or exported from ``transformers``). ``tiktoken`` and ``tokenizers`` are
optional extras: ``pip install 'resbench[data]'``.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.runs.progress import Progress
from bench.runs.tasks import tokenshards
from bench.runs.tasks.base import TaskError

# The two files of tiktoken's GPT-2 encoding, as tiktoken names them (its cache key is the SHA-1 of the URL).
GPT2_URLS = ("https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe",
             "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json")
ENDOFTEXT = "<|endoftext|>"
MAX_BLOCK = 1 << 20  # characters read at a time
MIN_BLOCK = 256
BATCH_CHARS = 8 << 20  # text encoded in one batched call (the tokenizers run batches on several threads)


@dataclass(frozen=True)
class Tokenizer:
    """A loaded tokenizer: ``encode`` turns a list of texts into lists of ids; ``eot`` precedes each document."""

    name: str
    vocab_size: int
    eot: int | None
    encode: Callable[[list[str]], list[list[int]]] = field(repr=False)
    record: dict[str, Any] = field(default_factory=dict)  # what the shards' metadata says of it


def tiktoken_cache() -> Path:
    """Where tiktoken keeps downloaded encodings: ``$TIKTOKEN_CACHE_DIR``, else ``$DATA_GYM_CACHE_DIR``, else
    ``<tmp>/data-gym-cache``."""
    chosen = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    return Path(chosen) if chosen else Path(tempfile.gettempdir()) / "data-gym-cache"


def gpt2_files_missing() -> list[Path]:
    """The files of tiktoken's GPT-2 encoding absent from its cache (none: it loads without the network)."""
    cache = tiktoken_cache()
    return [cache / hashlib.sha1(url.encode()).hexdigest() for url in GPT2_URLS
            if not (cache / hashlib.sha1(url.encode()).hexdigest()).is_file()]


def load_tokenizer(spec: str) -> Tokenizer:
    """``bytes``, ``gpt2`` or a path to a ``tokenizer.json``; TaskError says how to get what is missing."""
    if spec == "bytes":
        return Tokenizer("bytes", 256, None, lambda texts: [list(t.encode("utf-8")) for t in texts],
                         {"name": "bytes", "vocab_size": 256})
    if spec == "gpt2":
        return _gpt2()
    path = Path(spec).expanduser()
    if not path.is_file():
        raise TaskError(f"--tokenizer {spec!r} is neither bytes, gpt2 nor an existing tokenizer.json file")
    try:
        import tokenizers  # optional extra (resbench[data]): only a tokenizer.json needs it
    except ImportError:
        raise TaskError("a tokenizer.json needs Hugging Face tokenizers: pip install 'resbench[data]'") from None
    try:
        tok = tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises its own exception types for a file it cannot parse
        reason = " ".join(str(exc).split())[:200]
        raise TaskError(f"{path} is not a tokenizer.json Hugging Face tokenizers can read ({reason}); save one with "
                        "Tokenizer.save(path) (tokenizers) or tokenizer.save_pretrained(dir) (transformers)") from None
    eot = tok.token_to_id(ENDOFTEXT)

    def encode(texts: list[str]) -> list[list[int]]:
        return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]

    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    vocab = tok.get_vocab_size(with_added_tokens=True)
    return Tokenizer(path.name, vocab, eot, encode, {"name": str(path), "sha256": sha, "vocab_size": vocab})


def _gpt2() -> Tokenizer:
    try:
        import tiktoken  # optional extra (resbench[data]): only --tokenizer gpt2 needs it
    except ImportError:
        raise TaskError("--tokenizer gpt2 needs tiktoken: pip install 'resbench[data]'") from None
    missing = gpt2_files_missing()
    if missing:
        cache = tiktoken_cache()
        raise TaskError(
            f"tiktoken's GPT-2 encoding is not on this machine (it looks for {', '.join(p.name for p in missing)} in "
            f"{cache}) and resbench does not download it; on a machine with internet run TIKTOKEN_CACHE_DIR=DIR "
            "python -c \"import tiktoken; tiktoken.get_encoding('gpt2')\", copy DIR here and set "
            "TIKTOKEN_CACHE_DIR=DIR, or pass --tokenizer PATH/tokenizer.json (GPT-2's from Hugging Face)")
    enc = tiktoken.get_encoding("gpt2")
    threads = os.cpu_count() or 1

    def encode(texts: list[str]) -> list[list[int]]:
        return enc.encode_ordinary_batch(texts, num_threads=threads)

    return Tokenizer("gpt2", enc.n_vocab, enc.eot_token, encode, {"name": "gpt2 (tiktoken)", "vocab_size": enc.n_vocab})


def input_files(inputs: list[str]) -> list[Path]:
    """Every file named or below a named directory (sorted, hidden ones skipped); TaskError for one missing."""
    files: list[Path] = []
    for spec in inputs:
        path = Path(spec).expanduser()
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.is_file()
                            and not any(part.startswith(".") for part in p.relative_to(path).parts))
        elif path.is_file():
            files.append(path)
        else:
            raise TaskError(f"input {spec!r} is neither a file nor a directory")
    if not files:
        raise TaskError(f"no input files in {', '.join(inputs)}")
    return files


def cut(text: str) -> int:
    """Where ``text`` may be cut without changing its tokens: after its last newline that a non-space character
    follows; failing that, before its last whitespace that follows a non-space; 0 when there is no such place."""
    at = len(text) - 1
    while True:
        at = text.rfind("\n", 0, at)
        if at < 0:
            break
        if not text[at + 1].isspace():
            return at + 1
    for i in range(len(text) - 1, 0, -1):
        if text[i].isspace() and not text[i - 1].isspace():
            return i
    return 0


def documents(path: Path, block: int) -> Iterator[tuple[bool, str, int]]:
    """``(starts_document, text, offset)`` pieces of ``path``: a text file's blocks (cut by :func:`cut`), or each
    line's ``"text"`` of a ``.jsonl`` file, with the byte offset in the file where the piece starts; TaskError names
    a file that is not UTF-8, or a line that is not a JSON object with a text."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    done = 0  # bytes read
    at = 0  # bytes of the file before the next piece
    carry = ""
    first = True
    line_no = 0
    jsonl = path.suffix.lower() == ".jsonl"
    with open(path, "rb") as f:
        while True:
            raw = f.read(block)
            try:
                text = carry + decoder.decode(raw, final=not raw)
            except UnicodeDecodeError as exc:
                raise TaskError(f"{path} is not UTF-8 text (bad byte near offset {done + exc.start}); re-encode it, "
                                "e.g. iconv -t UTF-8, or leave it out") from None
            done += len(raw)
            if jsonl:
                lines = text.split("\n")
                carry = lines.pop() if raw else ""
                for line in lines + ([carry] if not raw else []):
                    line_no += 1
                    if line.strip():
                        yield True, _jsonl_text(path, line, line_no), at
                    at += len(line.encode("utf-8")) + 1
            else:
                end = len(text) if not raw else cut(text)
                piece, carry = text[:end], text[end:]
                if piece:
                    yield first, piece, at
                    first = False
                    at += len(piece.encode("utf-8"))
            if not raw:
                return


def _jsonl_text(path: Path, line: str, number: int) -> str:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TaskError(f"{path} line {number} is not JSON ({exc.msg}); a .jsonl input holds one JSON object per "
                        "line") from None
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
        raise TaskError(f"{path} line {number} has no \"text\" string; each line of a .jsonl input is one document, "
                        "{\"text\": \"...\"}")
    return str(record["text"])


def _refuse_existing(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise TaskError(f"--out {out} is an existing file; pass a directory")
    if out.is_dir():
        present = [p.name for p in out.iterdir() if p.name in ("train.bin", "val.bin", tokenshards.META)
                   or (p.suffix == ".bin" and ("_train_" in p.name or "_val_" in p.name))]
        if present:
            raise TaskError(f"--out {out} already holds token shards ({', '.join(sorted(present)[:3])}); choose an "
                            "empty directory or delete them")


def tokenize(inputs: list[str], out: str, tokenizer: str, *, val_fraction: float = 0.1, fmt: str = "nanogpt",
             shard_tokens: int = 100_000_000, name: str | None = None, progress: bool = True) -> dict[str, Any]:
    """Tokenize ``inputs`` into ``out`` as ``fmt`` shards; return what was written (also in ``out``'s
    ``resbench-tokens.json``). Bad input raises TaskError before anything is written, or with nothing left."""
    if not 0 < val_fraction < 1:
        raise TaskError(f"--val-fraction must be in (0, 1), got {val_fraction}")
    if fmt not in tokenshards.FORMATS:
        raise TaskError(f"--format must be one of {', '.join(tokenshards.FORMATS)}, got {fmt!r}")
    if shard_tokens < 1:
        raise TaskError(f"--shard-tokens must be >= 1, got {shard_tokens}")
    root = Path(out).expanduser()
    _refuse_existing(root)
    files = input_files(inputs)
    tok = load_tokenizer(tokenizer)
    if tok.vocab_size > tokenshards.MAX_VOCAB:
        raise TaskError(f"{tok.name} has {tok.vocab_size:,} tokens; uint16 shards hold at most "
                        f"{tokenshards.MAX_VOCAB:,}")
    total = sum(p.stat().st_size for p in files)
    val_at = total * (1 - val_fraction)
    block = int(min(MAX_BLOCK, max(MIN_BLOCK, total * val_fraction / 8)))
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    stem = name or root.resolve().name
    writers = {s: tokenshards.ShardWriter(root, s, fmt, stem, shard_tokens) for s in ("train", "val")}
    try:
        read = _stream(files, tok, writers, val_at, block, progress, total)
        for split, writer in writers.items():
            if not writer.total:
                raise TaskError(f"the {split} split came out empty ({read:,} bytes read); use a larger input or a "
                                "different --val-fraction")
        meta = {"tokenizer": {**tok.record, "eot": tok.eot}, "format": fmt, "val_fraction": val_fraction,
                "inputs": [str(p) for p in files[:100]], "input_files": len(files), "input_bytes": read,
                **{f"{s}_tokens": w.total for s, w in writers.items()}}
        written = {s: [p.name for p in w.commit()] for s, w in writers.items()}
    except BaseException:
        for writer in writers.values():
            writer.abort()
        if created and not any(root.iterdir()):
            root.rmdir()
        raise
    meta["files"] = written
    (root / tokenshards.META).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return meta


def _stream(files: list[Path], tok: Tokenizer, writers: dict[str, tokenshards.ShardWriter], val_at: float,
            block: int, progress: bool, total: int) -> int:
    """Read, encode in batches and write every piece of ``files``; the bytes read."""
    pending: list[tuple[str, bool, str]] = []
    size = 0
    read = 0  # bytes of the files before this one

    def flush() -> None:
        for (split, starts, _), ids in zip(pending, tok.encode([t for _, _, t in pending]), strict=True):
            if starts and tok.eot is not None:
                writers[split].write([tok.eot])
            writers[split].write(np.asarray(ids, dtype=np.int64))
        pending.clear()

    with Progress(total, "tokenize", enabled=progress, unit="B", scale_bytes=True) as bar:
        for path in files:
            for starts, text, at in documents(path, block):
                split = "val" if read + at >= val_at else "train"
                pending.append((split, starts, text))
                size += len(text)
                bar.update(min(read + at, total))
                if size >= BATCH_CHARS:
                    flush()
                    size = 0
            read += path.stat().st_size
        flush()
    return read
