"""SweepOptions: how a study's runs are executed, as one frozen dataclass — what ``bench sweep`` / ``bench
reproduce`` take on the command line, ``bench.sweep(...)`` as keyword arguments, and what the command that resumes
a sweep repeats.

Each field carries its help line (and its flag's form) in its metadata, as :class:`bench.runs.config.RunConfig`
does: the command line's options, their ``--help`` and :meth:`SweepOptions.to_argv` are all read from here, so a
new option is one field. A field whose metadata names an ``executor`` is an option of that executor only.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass, field
from typing import Any


def _o(default: Any, help: str, **meta: Any) -> Any:
    """A field whose metadata holds its help line (and flag hints: metavar, flag, repeat, executor)."""
    return field(default=default, metadata={"help": help, **meta})


@dataclass(frozen=True)
class SweepOptions:
    """How the runs of one sweep execute (not what they train: that is the study's)."""

    preset: str | None = _o(None, "a preset of the study, e.g. quick (default: the full grid)", metavar="P")
    resume: bool = _o(True, "skip runs whose run_id already has an ok row made by the same code, so that rerunning an "
                            "interrupted or killed sweep runs only the runs without one")
    retry_failed: bool = _o(False, "with resume: run again the runs recorded as diverged or failed_to_learn too (the "
                                   "outcome of a configuration and seed, the same every time: kept by default); runs "
                                   "that ran out of memory, raised or were killed always run again")
    executor: str = _o("local", "where the runs execute: local (this machine, each run in a process of its own) or "
                                "ray (tasks on a Ray cluster; pip install 'resbench[ray]')", metavar="NAME")
    jobs: int = _o(1, "runs at a time; local: the CPU cores are split between them, and on CUDA each gets its own "
                      "GPU(s)", metavar="N")
    gpus_per_run: int = _o(1, "local executor on CUDA: GPUs given to each run through CUDA_VISIBLE_DEVICES (0 lets "
                              "every run see every GPU); ray executor: GPUs each run's task asks for", metavar="G")
    address: str | None = _o(None, "the Ray cluster to connect to (host:port of `ray start --head`, ray://..., or "
                                   "auto); default: a local Ray started on this machine", metavar="ADDR",
                             executor="ray")
    cpus_per_run: int = _o(1, "CPUs each run's task asks for (its torch threads)", metavar="C", executor="ray")
    retries: int = _o(0, "reruns of a task whose worker or node died (default: 0, a killed row)", metavar="K",
                      executor="ray")
    requeue: bool = _o(False, "submit a run stopped by a preemption signal (SIGTERM, SIGUSR1) again within this sweep: "
                              "it continues from the state it saved (without it, rerunning the sweep does)")
    measure_every_run: bool = _o(False, "measure throughput, memory and FLOPs in every run, not once per model "
                                        "configuration (the first seed's figures reused in the other seeds' rows; "
                                        "column cost_source)")
    add_variants: tuple[str, ...] = _o((), "also run this registered variant (e.g. a plugin's), appended to the "
                                           "study's grid of variants; the study's confound guard applies to it "
                                           "(repeatable)", metavar="NAME", flag="--add-variant", repeat=True)
    tracker: tuple[str, ...] = _o((), "also log each recorded run there (tensorboard or mlflow; repeatable)",
                                  metavar="NAME", repeat=True)
    tracker_uri: tuple[str, ...] = _o((), "the tracker's log directory or tracking URI (NAME=URI when two trackers "
                                          "are named; repeatable)", metavar="URI|NAME=URI", repeat=True)
    quiet: bool = _o(False, "no progress: no bars, no line per run (the summary and failed runs are printed)")
    set: tuple[str, ...] = _o((), "set a run-config field of every run of the study, KEY=VALUE (repeatable), e.g. "
                                   "data_path=/data/imagenet: where this machine keeps the study's dataset; a "
                                   "list replaces that grid axis: seed=[3,4] runs other seeds of the same study "
                                   "(another machine's, to merge)",
                              metavar="KEY=VALUE", repeat=True)
    until_decided: bool = _o(False, "after the grid, add seeds in rounds to the configurations whose claims are still "
                                    "open, until every claim is decided or --max-seeds is reached; the looks are "
                                    "fixed in advance and each reads its interval at 1 - 0.05/looks (Bonferroni)")
    max_seeds: int = _o(10, "with --until-decided: the seeds a configuration gets at most (the last look)",
                        metavar="N")
    dry_run: bool = _o(False, "run nothing: check the study, count each model configuration's FLOPs (meta device) "
                              "and time one of its steps on this device, and print the bill (wall time here at "
                              "--jobs, FLOPs, peak memory on CUDA, time on the accelerators of the peak-FLOP/s table)")

    def __post_init__(self) -> None:
        for name in ("add_variants", "tracker", "tracker_uri", "set"):
            value = getattr(self, name)
            object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value))
        if self.jobs < 1:
            raise ValueError(f"--jobs must be >= 1, got {self.jobs}")
        if self.gpus_per_run < 0:
            raise ValueError(f"--gpus-per-run must be >= 0, got {self.gpus_per_run}")
        if self.max_seeds < 2:
            raise ValueError(f"--max-seeds must be >= 2, got {self.max_seeds}")
        if self.max_seeds != 10 and not self.until_decided:
            raise ValueError("--max-seeds is the cap of --until-decided: give --until-decided too")
        if self.cpus_per_run < 1 or self.retries < 0:
            raise ValueError(f"--cpus-per-run must be >= 1 and --retries >= 0, got {self.cpus_per_run} and "
                             f"{self.retries}")
        for owner in sorted({str(f.metadata["executor"]) for f in dataclasses.fields(self)
                             if f.metadata.get("executor") not in (None, self.executor)
                             and getattr(self, f.name) != f.default}):
            own = [flag(f) for f in dataclasses.fields(self) if f.metadata.get("executor") == owner]
            listed = f"{', '.join(own[:-1])} and {own[-1]} are options" if len(own) > 1 else f"{own[0]} is an option"
            raise ValueError(f"{listed} of --executor {owner}")

    def fields(self) -> dict[str, Any]:
        """The run-config fields of ``--set KEY=VALUE`` (a value read as a Python literal, else as a word)."""
        out: dict[str, Any] = {}
        for item in self.set:
            key, sep, raw = item.partition("=")
            if not sep or not key.isidentifier():
                raise ValueError(f"--set takes KEY=VALUE, got {item!r}")
            if key in ("study", "preset"):  # the sweep sets them to the study's name and preset: never silently lost
                raise ValueError(f"--set {key}=... cannot be set: a sweep records its study's name and the preset it "
                                 f"ran as each run's {key}" + (" (choose a preset with --preset)" if key == "preset"
                                                               else ""))
            try:
                out[key] = ast.literal_eval(raw)
            except (ValueError, SyntaxError):
                out[key] = raw
        return out

    def to_argv(self) -> list[str]:
        """The options that make these (every field not at its default), as the command line takes them."""
        argv: list[str] = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value == f.default:
                continue
            if isinstance(value, bool):
                argv.append(flag(f) if value else f"--no-{flag(f)[2:]}")
            elif f.metadata.get("repeat"):
                argv += [a for v in value for a in (flag(f), str(v))]
            else:
                argv += [flag(f), str(value)]
        return argv


def flag(f: dataclasses.Field[Any]) -> str:
    """The command-line flag of a :class:`SweepOptions` field."""
    return str(f.metadata.get("flag") or "--" + f.name.replace("_", "-"))


FIELDS = {f.name for f in dataclasses.fields(SweepOptions)}
