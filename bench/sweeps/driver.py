"""The sweep's driver: it hands a study's runs to an executor and writes each row as it comes back.

:func:`run_sweep` hands the runs to an executor (:mod:`bench.sweeps.executors`: ``local``, each run in a process of
its own, ``--jobs`` at a time; ``ray``), writes each row as it comes back (the driver is the one writer of the
results directory), and prints one line per run with the sweep's counts and an ETA. Resuming is the default and
survives anything: a run counts as done only once its row says ``ok``, so after a Ctrl-C, a ``SIGTERM`` or a
``SIGKILL`` of the driver the same command runs exactly the runs without one (their leftover partial files are
removed first).

Cost is measured once per model configuration (:func:`bench.runs.measure.cost_key`): the first run of each key
measures throughput, memory and FLOPs, the others reuse its figures (the row's ``cost_source`` names it) and
only train; the other runs of a key wait until the figures exist, while runs of other keys fill the slots.
``measure_every_run`` (``--measure-every-run``) measures in every run. An executor that places runs on several
machines (:attr:`bench.sweeps.executors.Executor.machine_of`) reuses figures only between runs of one machine.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import glob
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import variants
from bench.runs import chance, plugins
from bench.runs.config import RunConfig
from bench.runs.env import REPO_ROOT, changed_since, machine_id
from bench.runs.measure import complete, cost_key
from bench.runs.progress import LiveLine
from bench.runs.results import ResultsStore
from bench.runs.runner import Reuse, measurement_failures, record, unfinished_run
from bench.runs.stops import RunsPreempted, RunsRefused
from bench.sweeps.executors import Event, Executor, Job
from bench.sweeps.leases import Leases

# Called with each run JSON as the driver records it (e.g. to log it to an experiment tracker).
OnRecord = Callable[[Mapping[str, Any]], Any]


# Outcomes a rerun reproduces (a configuration and seed diverge, or stay at chance, every time): resume keeps them.
SETTLED = ("ok", "diverged", chance.STATUS)


def run_sweep(configs: Sequence[RunConfig], results_dir: str | Path, executor: Executor, *, resume: bool = True,
              measure_every_run: bool = False, progress: bool = True, command: str | None = None,
              on_record: OnRecord | None = None, requeue: bool = False, retry_failed: bool = False,
              made_with: Mapping[str, Any] | None = None) -> list[str]:
    """Run ``configs`` on ``executor``, writing one row per run as it ends; returns the run ids written.

    With ``resume`` the runs whose row says ``ok`` are skipped (and their figures reused), and so are those that
    diverged or ended at chance (:data:`SETTLED`: a configuration and seed give that outcome every time) unless
    ``retry_failed``; a run that ran out of memory, raised, was killed or never ran runs again — from its last
    saved training state, if it left one. A run refused as bad
    input (a dataset not on this machine) gets no row, the sweep goes on, and :class:`RunsRefused` at the end
    names them. A run stopped by a preemption signal saves its state and gets no row: ``requeue`` submits it again
    within this sweep (it continues), else :class:`RunsPreempted` at the end says how to continue it. ``command`` is
    the command line that resumes this sweep, printed after an interruption and under the summary of failed runs.
    ``on_record`` is called with each run JSON once it is written (the Python API logs it to experiment trackers
    there). ``made_with``: the sweep options that changed what it made (``--set``, ``--add-variant``), kept in each
    run JSON it records, so that a report's reproduce line can name them.
    """
    store = ResultsStore(results_dir)
    store.preflight()  # a broken results directory is bad input: refused before the first run
    store.rebuild()  # a run recorded in its JSON but missing from the leaderboard is recorded, never trained again
    driver = _Driver(list(configs), store, executor, measure_every_run, progress, command, on_record, requeue)
    driver.made_with = dict(made_with or {})
    driver.skip_recorded(resume, retry_failed)
    with _sigterm_as_interrupt():
        try:
            driver.run()
        finally:
            driver.leases.release_all()
    return driver.summarise()


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops a sweep as Ctrl-C does (workers stopped, how to resume printed); main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def edited_plugins(store: ResultsStore, cfg: RunConfig) -> list[str]:
    """The loaded plugins the recorded run ``cfg`` depends on (its variant, or a value of an axis it names in its
    model arguments) whose source differs from the one the recorded run loaded (sha256 in its run JSON)."""
    names = {str(v) for _, v in cfg.model_args}
    relevant = [p for p in plugins.loaded()
                if cfg.variant in p.variants or any(name in names for _, name in p.axis_values)]
    if not relevant:
        return []
    try:
        recorded = store.load_run(cfg.run_id).get("plugins") or []
    except (ValueError, OSError):
        return []  # a row without a readable JSON: the cost-figure reuse will measure again anyway

    def same_code(p: plugins.Plugin) -> bool:  # a recorded plugin that registered what p does, with p's source
        mine = {*p.variants, *(f"{a}:{n}" for a, n in p.axis_values)}
        return any(r.get("sha256") == p.sha256 and mine & {*r.get("variants", ()),
                                                          *(f"{a}:{n}" for a, n in r.get("axis_values", ()))}
                   for r in recorded)  # fmt: skip

    return [p.spec for p in relevant if not same_code(p)]


def settled_statuses(retry_failed: bool = False) -> tuple[str, ...]:
    """The row statuses a resumed sweep keeps: ok, and diverged or at chance unless ``retry_failed``
    (:data:`SETTLED`)."""
    return ("ok",) if retry_failed else SETTLED


def settled_runs(board: Any, resume: bool, retry_failed: bool = False) -> set[str]:
    """The run ids of leaderboard ``board`` a sweep does not run again: with ``resume``, those whose row has a
    status of :func:`settled_statuses`."""
    settled = settled_statuses(retry_failed)
    return set(board.loc[board["status"].isin(settled), "run_id"]) if resume and not board.empty else set()


def recorded_figures(store: ResultsStore, recorded: Sequence[RunConfig], measure_every_run: bool = False
                     ) -> dict[str, Reuse]:  # fmt: skip
    """The cost figures a sweep takes from the recorded runs ``recorded`` of ``store`` (those it skips), by cost key
    (:func:`bench.runs.measure.cost_key`): the first run of each key that measured (or reused) every phase its
    configuration asks for; no run of such a key measures again. Empty with ``measure_every_run``. The driver
    reuses them (:meth:`_Driver.skip_recorded`) and the dry run bills no measurement for them."""
    sources: dict[str, Reuse] = {}
    for cfg in recorded:
        key = cost_key(cfg)
        if measure_every_run or not cfg.measure or key in sources:
            continue
        try:
            run = store.load_run(cfg.run_id)
        except (ValueError, OSError):
            continue  # a row without its JSON: the next run of the configuration measures again
        measurements = run.get("measurements") or {}
        if complete(measurements, cfg.measure):
            env = run.get("env") or {}
            machine = machine_id(env) if env.get("hostname") else None
            sources[key] = Reuse(run.get("cost_source") or cfg.run_id, measurements, machine)
    return sources


def recorded_runs(store: ResultsStore, configs: Sequence[RunConfig], resume: bool = True,
                  retry_failed: bool = False) -> set[str]:
    """The run ids of ``configs`` a sweep into ``store`` would skip as already recorded (those
    :meth:`_Driver.skip_recorded` skips: settled rows whose plugins' code has not changed since); a dry run bills
    the others."""
    done = settled_runs(store.load_leaderboard(), resume, retry_failed)
    return {c.run_id for c in configs if c.run_id in done and not edited_plugins(store, c)}


class _Driver:
    """The state of one sweep: what is pending, in flight and done, and whose cost figures to reuse."""

    def __init__(self, configs: list[RunConfig], store: ResultsStore, executor: Executor, measure_every_run: bool,
                 progress: bool, command: str | None, on_record: OnRecord | None = None, requeue: bool = False
                 ) -> None:  # fmt: skip
        self.configs, self.store, self.executor, self.command = configs, store, executor, command
        self.on_record, self.requeue = on_record, requeue
        self.made_with: dict[str, Any] = {}  # the options that changed what the sweep made (--set, --add-variant)
        self.preempted: list[tuple[int, str, int]] = []  # index, run id, the step its state was saved at
        self.measure_every_run = measure_every_run
        self.quiet = not progress  # the summary, refused and failed runs are printed all the same
        self.bars = progress and executor.slots == 1 and sys.stderr.isatty()
        # A status line at the bottom of the terminal (done / running / failed / remaining, ETA, elapsed), redrawn
        # each second; not under a run's own progress bar (one job on a terminal), nor in a log file.
        self.live = LiveLine(sys.stdout, enabled=progress and not self.bars)
        self.plugin_specs = tuple((p.reload, p.origin) for p in plugins.loaded())
        self.n = len(configs)
        self.pending: list[tuple[int, RunConfig]] = []
        self.sources: dict[str, Reuse] = {}  # cost key -> the figures its runs reuse
        self.measuring: dict[str, int] = {}  # cost key -> index of the run measuring it now
        self.last: dict[int, dict[str, Any]] = {}  # index -> data of the run's latest setup/measured event
        self.started: dict[int, float] = {}
        self.written: list[str] = []
        self.ok = 0
        self.failed: list[tuple[int, str, str, str]] = []  # index, run id, status, error
        self.kept_failed = 0  # recorded runs that diverged or ended at chance, skipped (SETTLED)
        self.refused: list[tuple[int, str]] = []
        self.leases = Leases(store.root)
        self.elsewhere: list[tuple[int, str]] = []  # runs another sweep on the folder held when this one reached them
        self.settled: tuple[str, ...] = ()  # set by skip_recorded
        self.recorded: dict[str, str] = {}  # run id -> created_at of its row when this sweep began
        self.unmeasured: list[tuple[int, str, dict[str, str]]] = []  # runs whose cost phases failed: index, id, why
        self.t0 = time.perf_counter()

    # -- before the first run --------------------------------------------------------------------------------
    def skip_recorded(self, resume: bool, retry_failed: bool = False) -> None:
        """Skip the runs with an ok row made by the code loaded now (with ``resume``), and those that diverged or
        ended at chance unless ``retry_failed``; reuse their figures (the others' partial files are cleared when the
        run is claimed, :meth:`_claim`). A run whose
        plugin's source changed since is run again (its row replaced), saying so; a run of a shipped variant whose
        module changed in git since is kept, with a warning naming it."""
        board = self.store.load_leaderboard()
        done = settled_runs(board, resume, retry_failed)
        statuses = dict(zip(board["run_id"], board["status"], strict=True)) if not board.empty else {}
        # what a row another sweep writes meanwhile must say to count
        self.settled = settled_statuses(retry_failed) if resume else ()
        self.recorded = dict(zip(board["run_id"], board["created_at"], strict=True)) if not board.empty else {}
        shas = dict(zip(board["run_id"], board["git_sha"], strict=True)) if not board.empty else {}
        stale_code: dict[str, list[str]] = {}
        skipped: list[RunConfig] = []
        for i, cfg in enumerate(self.configs, 1):
            edited = edited_plugins(self.store, cfg) if cfg.run_id in done else []
            if cfg.run_id in done and not edited:
                status = statuses.get(cfg.run_id)
                if status != "ok":
                    self.kept_failed += 1
                if not self.quiet:
                    how = "" if status == "ok" else f" as {status} (--retry-failed runs it again)"
                    print(f"[{i}/{self.n}] {cfg.run_id}: already recorded{how}, skipped", flush=True)
                self.ok += status == "ok"
                skipped.append(cfg)
                changed = _variant_changed_since(cfg.variant, str(shas.get(cfg.run_id) or ""))
                if changed:
                    stale_code.setdefault(changed, []).append(cfg.run_id)
            else:
                if edited:
                    print(f"[{i}/{self.n}] {cfg.run_id}: recorded with another version of {', '.join(edited)}: run "
                          "again (its row will be replaced)", flush=True)
                self.pending.append((i, cfg))
        self.sources = recorded_figures(self.store, skipped, self.measure_every_run)
        for module, ids in stale_code.items():
            print(f"warning: {len(ids)} recorded run(s) were made before a change to {module} (git log says so): "
                  f"{', '.join(ids)}; their rows describe the code of then: rerun them with --no-resume to measure "
                  "the code of now", file=sys.stderr, flush=True)

    def _clean_partial_files(self, pending: set[str], with_row: set[str]) -> None:
        """Remove what a driver killed while writing left of runs still to run: temporary files, and a run JSON
        written just before it died whose row never was (so no reader pairs it with another run's row)."""
        if not self.store.runs_dir.is_dir():
            return
        for run_id in pending:
            for tmp in self.store.runs_dir.glob(f".{glob.escape(run_id)}.json.*.tmp"):
                tmp.unlink(missing_ok=True)
            if run_id not in with_row:
                (self.store.runs_dir / f"{run_id}.json").unlink(missing_ok=True)

    # -- the loop --------------------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while self.pending or self.executor.in_flight():
                self._fill_slots()
                if not self.executor.in_flight() and not self.pending:
                    break  # the runs left were another sweep's
                if not self.executor.in_flight():  # every pending run waits for figures nobody is measuring
                    raise RuntimeError(f"sweep stalled with {len(self.pending)} runs pending (a bug in resbench)")
                self.live.show(self._status())
                for event in self.executor.wait(timeout=1.0 if self.live.on else None):
                    self._on(event)
            self.live.close()
            self.executor.stop()  # nothing is in flight: this releases what the executor holds (a Ray connection)
        except KeyboardInterrupt:
            self.live.close()
            stopped = self.executor.stop()
            names = ", ".join(job.config.run_id for job in stopped)
            what = f"stopped {len(stopped)} running run(s) ({names}), nothing of them written" if stopped else \
                "no run was in flight"
            print(f"interrupted: {what}; {self.ok} of {self.n} runs have an ok row", file=sys.stderr, flush=True)
            if self.command:
                print(f"resume with: {self.command}  (runs with an ok row are skipped)", file=sys.stderr, flush=True)
            raise
        except BaseException:
            self.live.close()
            self.executor.stop()
            raise

    def _fill_slots(self) -> None:
        while len(self.executor.in_flight()) < self.executor.slots:
            job = self._next_job()
            if job is None:
                return  # the rest wait for cost figures being measured now
            self.started[job.index] = time.perf_counter()
            where = self.executor.submit(job)
            if self.executor.slots > 1:
                self._line(job.index, job.config.run_id, f"started ({where})")

    def _next_job(self) -> Job | None:
        """The first pending run that can start: its figures are known, or nobody is measuring them; and this driver
        holds its claim (a run another sweep on the folder holds or has recorded meanwhile is dropped, saying so)."""
        pos = 0
        while pos < len(self.pending):
            i, cfg = self.pending[pos]
            reuse = None
            key = cost_key(cfg) if cfg.measure and not self.measure_every_run else None
            if key is not None and key in self.sources:
                reuse = self.sources[key]
            elif key is not None and key in self.measuring:
                pos += 1
                continue
            del self.pending[pos]
            if not self._claim(i, cfg):
                continue
            if key is not None and reuse is None:
                self.measuring[key] = i
            return Job(i, cfg, reuse, progress=self.bars, plugins=self.plugin_specs, results_dir=str(self.store.root))
        return None

    def _claim(self, index: int, cfg: RunConfig) -> bool:
        """Take the run's claim (:mod:`bench.sweeps.leases`) and clear what a killed driver left of it; False, said,
        when another sweep holds the claim, or recorded the run after this sweep began."""
        if not self.leases.take(cfg.run_id):
            self.elsewhere.append((index, cfg.run_id))
            self._line(index, cfg.run_id, "being run by another sweep on this folder: left to it", always=True)
            return False
        rows = {r["run_id"]: r for r in self.store.rows()}
        row = rows.get(cfg.run_id)
        if row is not None and row["status"] in self.settled and row["created_at"] != self.recorded.get(cfg.run_id):
            self.leases.release(cfg.run_id)
            self.ok += row["status"] == "ok"
            self._line(index, cfg.run_id, f"recorded by another sweep meanwhile ({row['status']}), skipped",
                       always=True)
            return False
        self._clean_partial_files({cfg.run_id}, set(rows))
        return True

    def _on(self, event: Event) -> None:
        job, cfg = event.job, event.job.config
        key = cost_key(cfg)
        if event.kind in ("setup", "measured"):
            self.last[job.index] = event.data
            if event.kind == "measured" and self.measuring.get(key) == job.index:
                del self.measuring[key]
                if complete(event.data["measurements"], cfg.measure):
                    self.sources[key] = Reuse(cfg.run_id, event.data["measurements"], event.data.get("machine"))
            return
        if self.measuring.get(key) == job.index:
            del self.measuring[key]  # it ended before measuring: the next run of its configuration measures
        wall = time.perf_counter() - self.started.pop(job.index)
        last = self.last.pop(job.index, None)
        if event.kind in ("refused", "preempted"):
            self.leases.release(cfg.run_id)  # no row: the claim goes now (a requeued run takes it again)
        if event.kind == "refused":
            self.refused.append((job.index, cfg.run_id))
            self._line(job.index, cfg.run_id, f"not run: {event.data['error']}", always=True)
            return
        if event.kind == "preempted":
            if self.requeue:
                self.pending.append((job.index, cfg))  # it continues from its saved state when it starts again
                self._line(job.index, cfg.run_id, f"preempted at step {event.data['step']}, requeued", always=True)
            else:
                self.preempted.append((job.index, cfg.run_id, int(event.data["step"])))
                self._line(job.index, cfg.run_id, f"preempted: {event.data['error']}", always=True)
            return
        if event.kind == "finished":
            run_json = event.data["run_json"]
        else:
            run_json = unfinished_run(cfg, event.data["status"], event.data["error"], wall, last,
                                      event.data.get("placement"))
        if self.made_with:
            run_json = {**run_json, "made_with": self.made_with}
        stored = record(self.store, run_json)
        self.leases.release(cfg.run_id)  # its row is written: another sweep reaching it now skips it as recorded
        if self.on_record is not None:
            self.on_record(stored)
        self.written.append(cfg.run_id)
        row = run_json["row"]
        if row["status"] == "ok":
            self.ok += 1
        else:
            self.failed.append((job.index, cfg.run_id, row["status"], row["error"]))
        acc = row.get("final_val_acc")
        text = row["status"] + (f": {row['error']}" if row["status"] != "ok" and row["error"] else "")
        unmeasured = measurement_failures(stored)
        if unmeasured:
            self.unmeasured.append((job.index, cfg.run_id, unmeasured))
        self._line(job.index, cfg.run_id, text + (f", val acc {acc:.4f}" if isinstance(acc, float) else "")
                   + f", {row['wall_time_s']:.1f} s"
                   + "".join(f"; {phase} not measured: {why}" for phase, why in unmeasured.items()),
                   always=bool(unmeasured))

    # -- what a person watches -------------------------------------------------------------------------------
    def _line(self, index: int, run_id: str, text: str, always: bool = False) -> None:
        if self.quiet and not always:
            return
        self.live.print(f"[{index}/{self.n}] {run_id}: {text} | {self._counts()}")

    def _status(self) -> str:
        """The live line: the counts, the ETA and the time the sweep has run."""
        return f"sweep: {self._counts()}, elapsed {_clock(time.perf_counter() - self.t0)}"

    def _counts(self) -> str:
        running = len(self.executor.in_flight())
        ended_here = len(self.written) + len(self.refused)
        if ended_here and (self.pending or running):
            per_run = (time.perf_counter() - self.t0) / ended_here  # wall time per run with this many slots
            eta = _clock(per_run * (len(self.pending) + running))
        else:
            eta = "-" if not (self.pending or running) else "?"
        return (f"done {self.ok}, running {running}, failed {len(self.failed) + len(self.refused)}, "
                f"remaining {len(self.pending)}, ETA {eta}")

    def summarise(self) -> list[str]:
        """Print the sweep's tally and its failed runs with the command that reruns them; raise if any was refused."""
        kept = f", {self.kept_failed} recorded as diverged or at chance and kept" if self.kept_failed else ""
        print(f"sweep done in {_clock(time.perf_counter() - self.t0)}: {self.ok} of {self.n} runs ok, "
              f"{len(self.failed)} failed{kept}, {len(self.refused)} not run", flush=True)
        if self.unmeasured:
            print(f"{len(self.unmeasured)} run(s) lack a cost figure (its column is empty; the reason is in the run's "
                  "JSON):")
            for index, run_id, why in sorted(self.unmeasured):
                print(f"  [{index}/{self.n}] {run_id}: " + "; ".join(f"{p} not measured: {w}" for p, w in why.items()))
        if self.elsewhere:
            held = ", ".join(run_id for _, run_id in sorted(self.elsewhere))
            print(f"{len(self.elsewhere)} run(s) were being run by another sweep on {self.store.root} and were left "
                  f"to it: {held}" + (f"; when it ends, rerun this to run any it did not finish: {self.command}"
                                     if self.command else ""), flush=True)
        if self.failed:
            print("failed runs:")
            for index, run_id, status, error in sorted(self.failed):
                print(f"  [{index}/{self.n}] {run_id}: {status}{': ' + error if error else ''}")
            if self.command:
                settled = [run_id for _, run_id, status, _ in self.failed if status in SETTLED]
                again = f" --retry-failed ({len(settled)} diverged or ended at chance: kept without it)" if settled \
                    else ""
                print(f"rerun just these (runs with an ok row are skipped): {self.command}{again}", flush=True)
        if self.preempted:
            print(f"{len(self.preempted)} run(s) preempted, each with its training state saved: "
                  + ", ".join(f"{run_id} (step {step})" for _, run_id, step in sorted(self.preempted)), flush=True)
            if self.command:
                print(f"continue them with: {self.command}", flush=True)
        if self.refused:
            ids = [run_id for _, run_id in sorted(self.refused)]
            raise RunsRefused(f"{len(ids)} of {self.n} runs were not run (bad input, see above): {ids}; the other "
                              f"runs' rows are recorded in {self.store.root}")
        if self.preempted:
            raise RunsPreempted(f"{len(self.preempted)} of {self.n} runs were preempted (their state is saved); "
                                "rerun the same command to continue them")
        return self.written


@functools.cache
def _variant_changed_since(variant: str, sha: str) -> str | None:
    """The module of a shipped ``variant`` (its path in the repository) when git says it changed after commit
    ``sha``; None when it did not, or git cannot tell, or the variant is a plugin's or timm's."""
    try:
        module = variants.describe(variant)["module"]
    except ValueError:
        return None
    if not module.startswith("variants."):
        return None
    path = Path(variants.__file__).resolve().parent.parent / (module.replace(".", "/") + ".py")
    return path.relative_to(REPO_ROOT).as_posix() if path.is_file() and changed_since(sha, path) else None


def _clock(seconds: float) -> str:
    return str(datetime.timedelta(seconds=round(seconds)))
