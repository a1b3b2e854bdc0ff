"""The tokens task on real shard files: exact windows at known offsets, epochs, seeds, per-rank windows (in one
process and under 2 gloo processes), a 200 MB shard set trained on with a resident set far below its size, and every
bad shard (exit 2, one line naming the file and the fix, nothing written)."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from _datafiles import write_llmc, write_nanogpt

from bench.cli import main
from bench.runs.config import build
from bench.runs.tasks import TaskError, TaskOptions, get, tokenshards
from bench.runs.tasks.tokens import TokenTask

REPO = Path(__file__).resolve().parents[1]
T = 16
VOCAB = 4000


def llmc_set(root: Path) -> Path:
    """Two training shards (tokens 0..999 and 2000..2599) and one validation shard (3000..3399): every token is
    its own position's label, so a window says where it was read."""
    write_llmc(root / "toy_train_000000.bin", np.arange(0, 1000))
    write_llmc(root / "toy_train_000001.bin", np.arange(2000, 2600))
    write_llmc(root / "toy_val_000000.bin", np.arange(3000, 3400))
    return root


def task(root: Path, **kw: object) -> TokenTask:
    options = {"data_path": str(root), "seq_len": T, "vocab_size": VOCAB, "workers": 0, **kw}
    built = get("tokens", options=TaskOptions(**options))  # type: ignore[arg-type]
    assert isinstance(built, TokenTask)
    return built


def test_shards_are_found_checked_and_recorded(tmp_path: Path) -> None:
    t = task(llmc_set(tmp_path))
    assert t.info["format"] == "llmc" and t.info["max_token_id"] == 3399
    assert (t.info["train_tokens"], t.info["val_tokens"]) == (1600, 400)
    assert (t.num_train, t.info["val_windows"]) == ((999 // T) + (599 // T), 399 // T)  # 62 + 37, 24
    assert t.info["train_shards"]["files"] == [["toy_train_000000.bin", 1000], ["toy_train_000001.bin", 600]]
    assert t.model_kwargs == {"vocab_size": VOCAB, "max_len": T} and t.unit == "tokens" and t.units_per_sample == T


def test_validation_windows_are_the_exact_tokens_at_fixed_offsets(tmp_path: Path) -> None:
    t = task(llmc_set(tmp_path), eval_tokens=4 * T)
    batches = list(t.val_batches(3))
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    # 4 of the 24 windows, spread evenly: windows 0, 6, 12, 18, i.e. tokens from offsets 0, 96, 192, 288.
    want = torch.stack([3000 + 16 * w + torch.arange(T + 1) for w in (0, 6, 12, 18)])
    assert torch.equal(x, want[:, :-1]) and torch.equal(y, want[:, 1:]) and x.dtype == torch.long
    assert t.info["val_eval_windows"] == 4
    assert torch.equal(torch.cat([b[0] for b in t.val_batches(4)]), x)  # the same set at every evaluation
    capped = task(llmc_set(tmp_path), eval_tokens=4 * T, eval_batches=1)
    assert [len(b[0]) for b in capped.val_batches(3)] == [3]


def test_an_epoch_reads_every_window_once_inside_its_shard(tmp_path: Path) -> None:
    t = task(llmc_set(tmp_path))
    stream = t.train_batches(9, torch.Generator().manual_seed(0))
    starts = []
    for _ in range(99 // 9):  # one epoch of the 99 windows
        x, y = next(stream)
        assert torch.equal(y[:, :-1], x[:, 1:]) and torch.equal(x[:, 1:] - x[:, :-1], torch.ones(9, T - 1).long())
        starts += x[:, 0].tolist()
    first = {0 + T * k for k in range(62)} | {2000 + T * k for k in range(37)}
    assert sorted(starts) == sorted(first)  # aligned at stride seq_len, each window once, none across a shard end


def test_the_order_is_the_seeds(tmp_path: Path) -> None:
    t = task(llmc_set(tmp_path))

    def order(seed: int) -> list[int]:
        stream = t.train_batches(9, torch.Generator().manual_seed(seed))
        return [int(v) for _ in range(3) for v in next(stream)[0][:, 0]]

    assert order(1) == order(1) and order(1) != order(2)


def test_two_ranks_read_the_two_halves_of_the_one_process_batch(tmp_path: Path) -> None:
    root = llmc_set(tmp_path)

    def batch(rank: int, world: int) -> torch.Tensor:
        return next(task(root, rank=rank, world_size=world).train_batches(8, torch.Generator().manual_seed(0)))[0]

    whole, halves = batch(0, 1), [batch(r, 2) for r in (0, 1)]
    assert torch.equal(torch.cat(halves), whole) and len(halves[0]) == 4


def test_nanogpt_format(tmp_path: Path) -> None:
    t = task(write_nanogpt(tmp_path, np.arange(500), np.arange(1000, 1100)), eval_tokens=2 * T)
    assert t.info["format"] == "nanogpt" and (t.num_train, t.info["val_windows"]) == (499 // T, 99 // T)
    x, _ = next(t.val_batches(2))
    assert x[:, 0].tolist() == [1000, 1000 + 3 * T]  # windows 0 and 3 of 6


@pytest.mark.parametrize("fmt", ["llmc", "nanogpt"])
def test_bench_run_trains_on_shards(fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    if fmt == "llmc":
        llmc_set(data)
    else:
        write_nanogpt(data, np.arange(1000) % VOCAB, np.arange(400) % VOCAB)
    results, before = tmp_path / "results", set(multiprocessing.active_children())
    assert main(["run", "--variant", "preln", "--depth", "1", "--task", "tokens", "--data-path", str(data),
                 "--vocab-size", str(VOCAB), "--seq-len", str(T), "--batch-size", "8", "--steps", "3",
                 "--optimizer", "adam", "--lr", "1e-3", "--eval-tokens", "64", "--measure", "--quiet",
                 "--chance-band", "0",
                 "--results-dir", str(results)]) == 0
    # the loaders' worker processes (the evaluations' persistent ones too) ended with the run
    assert set(multiprocessing.active_children()) <= before
    run = json.loads(next((results / "runs").glob("*.json")).read_text())
    row = run["row"]
    assert row["status"] == "ok" and row["task"] == "tokens" and row["loader_workers"] == 1
    assert row["final_val_perplexity"] == pytest.approx(math.exp(row["final_val_loss"]))
    assert row["eval_time_s"] > 0 and run["task"]["format"] == fmt
    assert run["curves"]["eval"][-1]["bits_per_token"] == pytest.approx(row["final_val_loss"] / math.log(2))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow  # two gloo processes: about 15 s
def test_per_rank_windows_are_disjoint_under_two_gloo_processes(tmp_path: Path) -> None:
    data, results = llmc_set(tmp_path / "data"), tmp_path / "results"
    script = tmp_path / "ranks.py"
    script.write_text(textwrap.dedent(f"""
        import torch
        from bench.runs import distributed
        from bench.runs.config import RunConfig
        from bench.runs.runner import execute
        from bench.runs.train import StepRunner, batch_generator, setup

        cfg = RunConfig(variant="preln", depth=1, task="tokens", data_path={str(data)!r}, vocab_size={VOCAB},
                        seq_len={T}, batch_size=8, steps=3, measure=(), workers=1, chance_band=0, optimizer="adam",
                        lr=1e-3, eval_tokens=64, world_size=2)
        world = distributed.current()
        with distributed.session(world, torch.device("cpu")):
            s = setup(cfg)
            runner = StepRunner(cfg, s, s.model, batch_generator(s))
            torch.save([next(runner.batches)[0] for _ in range(3)], {str(tmp_path)!r} + f"/rank{{world.rank}}.pt")
            del runner  # its loader's worker ends here
            execute(cfg, {str(results)!r})  # in this process group: rank 0 writes the row
    """))
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
                           "127.0.0.1", "--master-port", str(free_port()), str(script)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    one = task(data).train_batches(8, torch.Generator().manual_seed(0))
    for step in range(3):
        mine = [set(ranks[r][step][:, 0].tolist()) for r in (0, 1)]
        assert len(mine[0]) == len(mine[1]) == 4 and not mine[0] & mine[1]  # each rank its own windows
        assert torch.equal(torch.cat([ranks[0][step], ranks[1][step]]), next(one)[0])  # together: the global batch
    rows = json.loads(next((results / "runs").glob("*.json")).read_text())["row"]
    assert rows["world_size"] == 2 and rows["status"] == "ok"


@pytest.mark.slow  # a 200 MB shard set written and trained on: about 20 s
def test_a_200_mb_shard_set_trains_under_an_address_space_limit_below_its_size(tmp_path: Path) -> None:
    """Three 100 MB training shards; the process may map 180 MB more than it has mapped when the run starts: enough
    for one shard at a time (a batch maps the shard it reads for that read only), not for the set. Reading the set
    whole fails under that limit, which the probe shows first (with 120 MB to spare: with two shards, 20 MB of memory
    the first run had freed sometimes let the whole set in on a busy machine)."""
    data = tmp_path / "big"
    data.mkdir()
    rng = np.random.default_rng(0)
    for name, count in (("big_train_000000.bin", 50_000_000), ("big_train_000001.bin", 50_000_000),
                        ("big_train_000002.bin", 50_000_000), ("big_val_000000.bin", 1_000_000)):
        header = np.zeros(256, dtype="<i4")
        header[:3] = (20240520, 1, count)
        with open(data / name, "wb") as f:
            f.write(header.tobytes())
            for start in range(0, count, 10_000_000):
                f.write(rng.integers(0, 1024, size=min(10_000_000, count - start), dtype="<u2").tobytes())
    size_mb = sum(p.stat().st_size for p in data.iterdir()) / 2**20
    assert size_mb > 280
    probe = textwrap.dedent(f"""
        import json, resource
        import numpy as np
        from bench.runs.config import RunConfig
        from bench.runs.measure import _proc_status_mb, max_rss_mb, reset_peak_rss, rss_mb
        from bench.runs.runner import execute

        def run(root, results):
            return execute(RunConfig(variant="preln", depth=1, task="tokens", data_path=root, vocab_size=4000,
                                     seq_len=64, batch_size=8, steps=4, measure=(), workers=0, chance_band=0,
                                     optimizer="adam", lr=1e-3, eval_tokens=4096), results)

        run({str(llmc_set(tmp_path / "small"))!r}, {str(tmp_path / "r1")!r})  # imports and allocations made once
        limit = int((_proc_status_mb("VmSize") + 180) * 2**20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
        try:
            whole = [np.fromfile(p, dtype="<u2") for p in sorted({str(data)!r} + "/" + n for n in
                     ("big_train_000000.bin", "big_train_000001.bin", "big_train_000002.bin"))]
            held = True
        except MemoryError:
            held = False
        whole = None
        baseline, reset = rss_mb(), reset_peak_rss()
        row = run({str(data)!r}, {str(tmp_path / "r2")!r})["row"]
        print(json.dumps({{"held": held, "status": row["status"], "error": row["error"], "baseline": baseline,
                          "peak": max_rss_mb(), "reset": reset}}))
    """)
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
                                   "MALLOC_ARENA_MAX": "1"})  # no 64 MB arena per new thread (glibc)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert not got["held"], "the limit must be too small for the whole set, or the test shows nothing"
    assert got["status"] == "ok", got["error"]
    grew = got["peak"] - got["baseline"]
    print(f"shards {size_mb:.0f} MiB; the run's resident set grew by {grew:.1f} MiB over {got['baseline']:.0f} MiB")
    if got["reset"]:  # the kernel's high-water mark could be reset (/proc/self/clear_refs)
        assert grew < size_mb / 2
    run = json.loads(next((tmp_path / "r2" / "runs").glob("*.json")).read_text())
    assert run["task"]["train_tokens"] == 150_000_000 and run["row"]["steps"] == 4


# -- bad input ---------------------------------------------------------------------------------------------------------


def bad_set(root: Path, damage: str) -> tuple[Path, str]:
    """A shard directory with one defect; the text its error must name."""
    if damage == "nothing there":
        root.mkdir()
        return root, "holds no token shards"
    if damage == "not a directory":
        root.write_text("x")
        return root, "is not a directory"
    if damage in ("wrong magic", "wrong version", "count disagrees", "short header"):
        llmc_set(root)
        victim = root / "toy_train_000001.bin"
        if damage == "wrong magic":
            write_llmc(victim, np.arange(600), magic=20240521)
            return root, f"{victim}: header magic 20240521 is not llm.c's 20240520"
        if damage == "wrong version":
            write_llmc(victim, np.arange(600), version=2)
            return root, f"{victim}: llm.c shard version 2; resbench reads version 1"
        if damage == "count disagrees":
            write_llmc(victim, np.arange(600), count=700)
            return root, f"{victim}: its header says 700 tokens (2,424 bytes) but the file has 2,224 bytes"
        victim.write_bytes(b"\x00" * 100)
        return root, f"{victim} has 100 bytes, fewer than llm.c's 1024-byte header"
    if damage == "id too large":
        llmc_set(root)
        write_llmc(root / "toy_val_000000.bin", np.r_[np.arange(10), 4000, np.arange(100)])
        return root, f"{root / 'toy_val_000000.bin'}: token id 4000 (first too large at token 10) is not below " \
                     "--vocab-size 4000; pass --vocab-size 4001 or more"
    if damage == "too few tokens":
        write_llmc(root / "toy_train_000000.bin", np.arange(100))
        write_llmc(root / "toy_val_000000.bin", np.arange(10))
        return root, f"the val shards of {root} hold 10 tokens, not one window of --seq-len + 1 = 65 tokens"
    if damage == "no val shard":
        write_llmc(root / "toy_train_000000.bin", np.arange(100))
        return root, "has no *_val_*.bin shard"
    if damage == "odd nanogpt":
        write_nanogpt(root, np.arange(100), np.arange(100))
        (root / "val.bin").write_bytes(b"\x00" * 7)
        return root, f"{root / 'val.bin'} has an odd number of bytes (7)"
    if damage == "nanogpt without val":
        write_nanogpt(root, np.arange(100), np.arange(100))
        (root / "val.bin").unlink()
        return root, f"{root / 'val.bin'} is missing"
    if damage == "llmc named nanogpt":
        write_llmc(root / "train.bin", np.arange(100))
        (root / "val.bin").write_bytes(b"\x00\x01")
        return root, f"{root / 'train.bin'} starts with llm.c's shard header"
    if damage == "batch above the windows":
        write_llmc(root / "toy_train_000000.bin", np.arange(64 * 3 + 1))  # 3 windows of 64 for a batch of 4
        write_llmc(root / "toy_val_000000.bin", np.arange(100))
        return root, "--batch-size 4 exceeds the 3 training samples of task 'tokens'"
    if damage == "both formats":
        llmc_set(root)
        write_nanogpt(root, np.arange(100), np.arange(100))
        return root, "holds both nanoGPT's train.bin and llm.c-style"
    raise AssertionError(damage)


DAMAGES = ("nothing there", "not a directory", "wrong magic", "wrong version", "count disagrees", "short header",
           "id too large", "too few tokens", "no val shard", "odd nanogpt", "nanogpt without val",
           "llmc named nanogpt", "both formats", "batch above the windows")


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_bad_shard_set_is_one_error_line_before_anything_runs(damage: str, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    root, names = bad_set(tmp_path / "data", damage)
    results = tmp_path / "results"
    code = main(["run", "--variant", "preln", "--depth", "1", "--task", "tokens", "--data-path", str(root),
                 "--vocab-size", str(VOCAB), "--seq-len", "64", "--batch-size", "4", "--steps", "2", "--measure",
                 "--quiet", "--results-dir", str(results)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert names in err
    assert not results.exists()


def test_a_vocabulary_beyond_uint16_and_a_missing_path_are_refused() -> None:
    with pytest.raises(TaskError, match="task tokens needs --data-path ROOT"):
        get("tokens", options=TaskOptions())
    with pytest.raises(TaskError, match="--vocab-size 70000 exceeds what uint16 shards can hold"):
        get("tokens", options=TaskOptions(data_path="x", vocab_size=70000))


def test_text_takes_eval_tokens(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(bytes(32 + i % 64 for i in range(10_000)))
    text = get("text", options=TaskOptions(data_path=str(path), seq_len=T, eval_tokens=3 * T))
    assert sum(len(x) for x, _ in text.val_batches(100)) == 3


@pytest.mark.parametrize(("ids", "shown"), [([3, -1, 7], "-1..7"), ([0, 65536], "0..65536")])
def test_a_shard_writer_refuses_ids_that_do_not_fit_uint16_and_leaves_nothing(ids: list[int], shown: str,
                                                                              tmp_path: Path) -> None:
    writer = tokenshards.ShardWriter(tmp_path, "train", "llmc")
    with pytest.raises(ValueError, match=rf"token ids must fit uint16 \(0\.\.65535\); got {shown}$"):
        writer.write(ids)
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_train_tokens_keeps_the_first_tokens_of_the_training_split_and_every_validation_window(tmp_path: Path
                                                                                               ) -> None:
    """The data scale a study varies: the training windows lie within the split's first N tokens (across shards, in
    order), the chance level is theirs, and validation is the same at every N."""
    full, capped = task(llmc_set(tmp_path)), task(tmp_path, train_tokens=1000 + 100)  # shard 0 and 100 of shard 1
    assert capped.num_train == 999 // T + 99 // T and capped.info["train_tokens_used"] == 1100
    seen = torch.cat([x for x, _ in capped.train_eval_batches(8)])
    assert int(seen.max()) < 2000 + 100 and int(seen[seen >= 2000].max()) == 2000 + 6 * T - 1  # 6 windows of shard 1
    assert capped.info["val_windows"] == full.info["val_windows"]
    assert torch.equal(torch.cat([x for x, _ in capped.val_batches(8)]), torch.cat([x for x, _ in full.val_batches(8)]))
    assert capped.info["chance_loss_tokens"] == 1100
    with pytest.raises(TaskError, match=r"^--train-tokens 10 holds no training window of --seq-len \+ 1 = 17 tokens"):
        task(tmp_path, train_tokens=10)
    # the byte-level text tasks: the first N bytes of the training split (the first 90% of the file)
    path = tmp_path / "t.txt"
    path.write_bytes(bytes(32 + i % 64 for i in range(10_000)))
    whole = get("text", options=TaskOptions(data_path=str(path), seq_len=T))
    text = get("text", options=TaskOptions(data_path=str(path), seq_len=T, train_tokens=500))
    assert (text.info["train_bytes"], text.info["train_split_bytes"], text.num_train) == (500, 9000, 500 // T)
    assert torch.equal(text.train, torch.tensor(list(path.read_bytes()[:500]), dtype=torch.uint8))  # windows' source
    assert text.info["val_windows"] == whole.info["val_windows"]
    with pytest.raises(TaskError, match=r"^--train-tokens 16 cannot hold one training window of seq_len \+ 1 = 17"):
        get("text", options=TaskOptions(data_path=str(path), seq_len=T, train_tokens=16))
    with pytest.raises(ValueError, match=r"--train-tokens must be an integer >= 2, got 1"):
        build({"variant": "preln", "task": "tinytext", "train_tokens": 1})
