"""One configuration, one run: the preset that asked for a run is not part of its id; `bench upgrade` renames runs
recorded when it was (the repeats of one configuration dropped), and every old id keeps resolving, the committed
results' included."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench.cli import main
from bench.runs.config import RunConfig, config_from_dict
from bench.runs.identity import migrate
from bench.runs.results import ALIASES, COLUMNS, ResultsStore

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results"
COMMITTED_IDS = 744  # 627 committed before a run's id stopped holding its preset, the pathfinder study's 42, the
# scaling study's 75


def test_a_preset_is_not_part_of_a_run_id() -> None:
    cfg = RunConfig(variant="preln", depth=2, task="copy", study="s")
    quick, round2 = (RunConfig(variant="preln", depth=2, task="copy", study="s", preset=p) for p in ("quick", "r2"))
    assert quick.run_id == round2.run_id == cfg.run_id
    assert RunConfig(variant="preln", depth=2, task="copy", study="t").run_id != cfg.run_id  # the study still is
    old = RunConfig(variant="preln", depth=2, task="copy", init_stream="global")  # drawn as every run before crn
    assert old.run_id == "preln-d2-copy-e8905362-s0"  # ids without: kept
    assert RunConfig(variant="preln", depth=2, task="copy").run_id == "preln-d2-copy-23aee4f1-s0"


def _old_run(store: ResultsStore, old_id: str, preset: str, created: str, loss: float, source: str = "") -> None:
    """A run as resbench recorded it when its id held its preset: ``old_id`` is not its configuration's id now."""
    cfg = RunConfig(variant="preln", depth=2, task="copy", study="s", preset=preset)
    row = {"run_id": old_id, "config_hash": old_id.split("-")[-2], "variant": "preln", "depth": 2, "task": "copy",
           "seed": 0, "status": "ok", "final_val_loss": loss, "study": "s", "created_at": created,
           "cost_source": source}
    store.append({k: v for k, v in row.items() if k in COLUMNS},
                 {"run_id": old_id, "row": row, "config": cfg.to_dict(), "cost_source": source})


def test_upgrade_gives_runs_their_configuration_id_drops_repeats_and_keeps_old_ids_resolving(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ResultsStore(tmp_path)
    new = RunConfig(variant="preln", depth=2, task="copy", study="s").run_id
    _old_run(store, "preln-d2-copy-aaaaaaaa-s0", "quick", "2026-01-01T00:00:00", 1.5)
    _old_run(store, "preln-d2-copy-bbbbbbbb-s0", "round2", "2026-01-02T00:00:00", 1.6, "preln-d2-copy-aaaaaaaa-s0")
    table = tmp_path / "analysis" / "s" / "lesion-summary.csv"
    table.parent.mkdir(parents=True)
    table.write_text("k,error,run_id\n0,0.0194444,preln-d2-copy-bbbbbbbb-s0\n", encoding="utf-8")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "preln-d2-copy-aaaaaaaa-s0.pt").write_bytes(b"weights")
    assert main(["upgrade", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [f"{tmp_path}: gave 1 run(s) their configuration's id; 1 repeated a run recorded before them and "
                       f"were dropped; every old id resolves ({ALIASES})",
                       f"  preln-d2-copy-bbbbbbbb-s0: the same configuration and seed as {new}, dropped"]
    board = store.load_leaderboard()
    assert board["run_id"].tolist() == [new] and board["final_val_loss"].tolist() == [1.5]  # the first one kept
    assert board["config_hash"].tolist() == [new.split("-")[-2]]
    assert sorted(p.name for p in store.runs_dir.iterdir()) == [f"{new}.json"]
    assert json.loads((tmp_path / ALIASES).read_text()) == {"preln-d2-copy-aaaaaaaa-s0": new,
                                                            "preln-d2-copy-bbbbbbbb-s0": new}
    for old in ("preln-d2-copy-aaaaaaaa-s0", "preln-d2-copy-bbbbbbbb-s0", new):
        run = store.load_run(old)
        assert run["run_id"] == run["row"]["run_id"] == new and run["config"]["preset"] == "quick"
    assert table.read_text() == f"k,error,run_id\n0,0.0194444,{new}\n"  # other cells kept as their text
    assert (tmp_path / "checkpoints" / f"{new}.pt").read_bytes() == b"weights"
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and not p.name.startswith(".")}
    assert migrate(tmp_path) == []  # a second upgrade changes nothing
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and not p.name.startswith(".")} == before


def test_a_dry_run_names_the_moves_and_writes_nothing(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    _old_run(store, "preln-d2-copy-aaaaaaaa-s0", "quick", "2026-01-01T00:00:00", 1.5)
    text = store.leaderboard.read_bytes()
    moved = migrate(tmp_path, dry_run=True)
    assert [(m.old, m.kept) for m in moved] == [("preln-d2-copy-aaaaaaaa-s0", True)]
    assert store.leaderboard.read_bytes() == text and not (tmp_path / ALIASES).exists()


def test_every_committed_run_id_resolves() -> None:
    """The committed results hold each configuration once, and every id ever committed (the leaderboard's, the old
    ids of aliases.json, those quoted in the docs and analysis tables) loads its run."""
    store = ResultsStore(RESULTS)
    board = store.load_leaderboard()
    aliases = json.loads((RESULTS / ALIASES).read_text(encoding="utf-8"))
    assert board["run_id"].is_unique and not set(aliases) & set(board["run_id"])
    assert len(set(aliases) | (set(board["run_id"]) - set(aliases.values()))) == COMMITTED_IDS
    assert set(aliases.values()) <= set(board["run_id"])
    assert board.groupby(["config_hash", "seed"]).size().max() == 1  # one configuration and seed, one run
    pattern = re.compile(r"\b[a-z0-9_]+(?:-d\d+)?-[a-z0-9_]+-[0-9a-f]{8}-s\d+\b")
    texts = [REPO / "docs" / "findings.md", RESULTS / "README.md", *(RESULTS / "analysis").rglob("*.csv")]
    quoted = {m for path in texts for m in pattern.findall(path.read_text(encoding="utf-8"))}
    assert quoted
    for run_id in sorted(quoted | set(aliases)):
        assert (RESULTS / "runs" / f"{run_id}.json").is_file() or aliases[run_id] in set(board["run_id"]), run_id
    run_id = sorted(aliases)[0]
    assert store.load_run(run_id)["run_id"] == aliases[run_id]


def test_every_committed_runs_config_rebuilds_its_id() -> None:
    """The config each committed run recorded gives, through today's RunConfig (its fields grouped, new fields at their
    defaults), the run id it was recorded under: reading the config changes no identity."""
    for path in sorted((RESULTS / "runs").glob("*.json")):
        run = json.loads(path.read_text(encoding="utf-8"))
        assert config_from_dict(run["config"]).run_id == run["run_id"] == path.stem, path.name
