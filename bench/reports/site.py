"""``bench site``: a static results site that works offline, from ``file://`` as from any web server.

The site is plain HTML: an index of the studies with their claims' verdicts; a page per study with its runs as a
sortable, filterable table, the claims with their groups and intervals, and interactive figures; a page per run
with its config, environment, provenance, curves, probes and the command that reproduces it. The figures are
plotly's (its Python package writes figures as offline HTML; hovering reads a value, the legend hides a series):
plotly.js is written once into the site (``plotly.min.js``) and every page loads it from there, so nothing is
fetched from a network. The table's sorting and filtering is ``site.js``, a few lines of plain JavaScript.

The numbers follow the report's rules (:mod:`bench.analysis.stats`): a curve is the mean over the seeds of one
configuration with its 95% Student-t band; cost figures (throughput, memory) are per machine
(:func:`bench.runs.env.machine_fingerprint`), never pooled across machines. The seaborn PNGs and ``REPORT.md`` stay
the Markdown report's (``bench report``).
"""

from __future__ import annotations

import html
import json
import math
import shlex
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from bench.analysis.claims import Group, Result, describe
from bench.analysis.stats import (
    LOAD_BAND_KEY,
    counted_rows,
    domain,
    mean_ci,
    observations,
    t_ci,
    unbanded_machines,
    with_mixed_load_bands,
)
from bench.reports.analysis_summary import Summary, summary_of
from bench.reports.costfigs import PER_POINT, label_lines
from bench.reports.drawing import LOG_BAND_NOTE, band_edges
from bench.reports.markdown import VERDICT_WORDS, fmt_number, tally, test_text
from bench.reports.plotdata import Frames, frames_of, grad_norm_init_data, with_key
from bench.reports.report import _analysis_meta, _shown_path, _study_command, _study_path, study_claims
from bench.reports.reproduce import run_plugin_flags
from bench.reports.site_scaling import scaling_html
from bench.runs.config import config_from_dict
from bench.runs.names import slug
from bench.runs.reading import read_runs
from bench.runs.results import ResultsStore, check_writable

ASSETS = Path(__file__).resolve().parent / "site_assets"
BAR_MEAN = PER_POINT.replace("point", "bar")  # a cost bar's height: the mean of its measurements, as a PNG point's
NO_ERROR = "NaN"  # an error bar's length where a point rests on one value: plotly.js draws no bar there (_error_y)
NO_STUDY = "no-study"  # the page of the runs recorded outside any study
# The leaderboard table's columns: what names a run, then the main metrics (the full row is on the run's page).
NAME_COLUMNS = ("study", "family", "variant", "depth", "task", "seed", "device", "machine", "status")
FILTERED = ("study", "family", "variant", "depth", "task", "device", "machine", "status")
METRIC_COLUMNS = ("final_train_loss", "final_val_loss", "final_val_acc", "train_samples_per_s", "peak_mem_mb",
                  "wall_time_s")
_UNITS = {"peak_mem_mb": " (MiB)"}  # the schema's column name stays; the value is in MiB (2**20 bytes)
_HEAD_NOTES = {"wall_time_s": ' title="the whole run, its cost-measurement phases included where it measured its cost '
                              'figures itself (cost_source: the run) rather than reusing another seed\'s"'}
_LOG = ("loss", "train_loss", "val_loss", "perplexity", "bpc", "grad_norm", "weight_grad_norm")


def _plotly() -> Any:
    try:
        import plotly.io
        import plotly.offline
    except ImportError:
        raise ValueError("bench site draws its figures with plotly, which is not installed: "
                         "pip install 'resbench[site]'") from None
    return plotly.io, plotly.offline


@dataclass(frozen=True)
class Site:
    """What :func:`build_site` wrote: its folder, the number of pages and the bytes of all its files."""

    root: Path
    pages: int
    bytes: int


def _e(value: Any) -> str:
    return html.escape(_text(value))


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.6g}"
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, default=str)
    return str(value)


def _page(title: str, body: Sequence[str], depth: int, scripts: bool = True) -> str:
    """A whole HTML page; ``depth`` is how many folders below the site's root it lies (its links to the assets)."""
    up = "../" * depth
    head = [f'<link rel="stylesheet" href="{up}site.css">']
    if scripts:
        head += [f'<script src="{up}plotly.min.js"></script>', f'<script src="{up}site.js" defer></script>']
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f"<title>{html.escape(title)} — resbench</title>", *head, "</head>", "<body>",
        f'<nav><a href="{up}index.html">resbench results</a></nav>', "<main>", *body, "</main>", "</body>", "</html>",
    ])  # fmt: skip


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], cls: str = "kv") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _kv(mapping: Mapping[str, Any]) -> str:
    return _table(("field", "value"), ((html.escape(str(k)), _e(v)) for k, v in mapping.items()))


# -- figures ------------------------------------------------------------------------------------------------------


class _Figures:
    """Each figure becomes a ``<div>`` and the script that draws it (plotly.js comes from the site's own copy).

    Figures are plotly's JSON form (``{"data": [...], "layout": {...}}``), written by ``plotly.io.to_html`` without
    its validation: the traces here use a handful of documented attributes, and building and checking a
    ``plotly.graph_objects.Figure`` per figure took most of a site's build time (about 0.1 s a figure)."""

    def __init__(self) -> None:
        self.io, self.offline = _plotly()
        self.count = 0

    def html(self, fig: dict[str, Any], name: str) -> str:
        self.count += 1
        div = self.io.to_html(fig, include_plotlyjs=False, full_html=False, div_id=f"fig-{slug(name)}",
                              default_height="440px", config={"displaylogo": False}, validate=False)
        return f'<figure class="plot" data-figure="{html.escape(name)}">{div}</figure>'

    @staticmethod
    def series(stats: pd.DataFrame, x: str, label: str, colour: str, log: bool = False) -> list[dict[str, Any]]:
        """A design's mean line and its 95% CI band (a trace of its legend group, without a legend entry of its
        own): one legend entry, one hover label per design. On a ``log`` axis the band's edges are the PNG figures'
        (:func:`bench.reports.drawing.band_edges`: the lower side the upper side's factor below the mean), not an
        interval clipped at 0 that drops in strips to the axis' bottom."""
        s = stats.sort_values(x)
        xs, mean = _floats(s[x]), _floats(s["mean"])
        lo, hi = band_edges(s["mean"].to_numpy(dtype=float), s["lo"].to_numpy(dtype=float),
                            s["hi"].to_numpy(dtype=float), log)
        band = {"type": "scatter", "x": xs + xs[::-1], "y": _floats(hi) + _floats(lo)[::-1],
                "fill": "toself", "line": {"width": 0}, "fillcolor": colour, "opacity": 0.2, "hoverinfo": "skip",
                "legendgroup": label, "showlegend": False, "name": f"{label} 95% CI"}
        line = {"type": "scatter", "x": xs, "y": mean, "mode": "lines", "name": label, "legendgroup": label,
                "line": {"color": colour}, "customdata": s["count"].tolist(),
                "hovertemplate": f"{html.escape(label)}<br>{x} %{{x}}: %{{y:.4g}} (n=%{{customdata}})<extra></extra>"}
        return [band, line]

    @staticmethod
    def figure(traces: list[dict[str, Any]], title: str, xlabel: str, ylabel: str, log: bool = False,
               legend: str = "design", **layout: Any) -> dict[str, Any]:
        grid = {"gridcolor": "#e5e5e5", "zeroline": False}
        return {"data": traces, "layout": {
            "title": {"text": title}, "xaxis": {"title": {"text": xlabel}, **grid},
            "yaxis": {"title": {"text": ylabel}, **grid, **({"type": "log"} if log else {})},
            "legend": {"title": {"text": legend}}, "plot_bgcolor": "white", "margin": {"t": 60, "r": 20},
            **layout}}


def _floats(values: Iterable[Any]) -> list[float | None]:
    """JSON numbers: NaN and infinities become null (a gap in a line)."""
    return [float(v) if v is not None and math.isfinite(float(v)) else None for v in values]


def _scatter(x: Iterable[Any], y: Iterable[Any], name: str, mode: str = "lines", **extra: Any) -> dict[str, Any]:
    return {"type": "scatter", "x": list(x), "y": _floats(y), "name": name, "mode": mode, **extra}


_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
            "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173")


def _colour(keys: Iterable[str]) -> dict[str, str]:
    return {k: _COLOURS[i % len(_COLOURS)] for i, k in enumerate(sorted(set(keys)))}


def _curve_figures(figs: _Figures, frames: Frames, name: str) -> list[str]:
    """Per task and depth: training loss, and each evaluation metric, against step; one design per line."""
    curves = frames.curves
    if curves.empty:
        return []
    curves = with_key(curves)
    colours = _colour(curves["key"].astype(str))
    out = []
    for (task, depth), part in curves.groupby(["task", curves["depth"].fillna(-1)], sort=True):
        where = f"{task}" + (f", depth {int(depth)}" if depth != -1 else "")
        for split, metric in [("train", "loss"), *(("eval", m) for m in ("val_loss", "val_acc", "bpc"))]:
            rows = part[(part["split"] == split) & (part["metric"] == metric)]
            if rows["value"].notna().sum() == 0:
                continue
            stats = mean_ci(rows, ["key"], "step", "value", metric)
            log = metric in _LOG
            traces = [t for key, s in stats.groupby("key", sort=True)
                      for t in figs.series(s, "step", str(key), colours[str(key)], log)]
            label = "training loss" if split == "train" else metric.replace("_", " ")
            fig = figs.figure(traces, f"{label} — {where}: mean over seeds, band = 95% CI"
                              + (f" ({LOG_BAND_NOTE})" if log else ""),
                              "step (optimizer updates)", label, log=log)
            out.append(figs.html(fig, f"curves {name} {task} d{depth} {split} {metric}"))
    return out


def _machine_of(board: pd.DataFrame) -> pd.Series:
    if "machine" in board.columns and board["machine"].notna().any():
        return board["machine"].astype(object).fillna("unrecorded").astype(str)
    return board["device_name"].astype(object).fillna("unrecorded").astype(str)


def _cost_figures(figs: _Figures, frames: Frames, name: str) -> list[str]:
    """Throughput and peak memory per design and depth, one bar series per machine (cost is never pooled across
    machines); and the Pareto view, final validation metric against throughput, a marker per configuration."""
    # a configuration measured in several load bands: a bar and a point per band, named by it (machine at band)
    banded = with_mixed_load_bands(frames.leaderboard, frames.runs)
    board = with_key(banded).assign(_machine=_machine_of(banded),
                                    _pooled=_machine_of(banded.assign(machine=unbanded_machines(banded)))
                                    if LOAD_BAND_KEY in banded.columns else _machine_of(banded))
    legend = "machine, load band" if LOAD_BAND_KEY in banded.columns else "machine"  # what a bar series is
    out = []
    for task, part in board.groupby("task", sort=True):
        for metric, label in (("train_samples_per_s", "training samples/s"), ("peak_mem_mb", "peak memory (MiB)")):
            if part[metric].notna().sum() == 0:
                continue
            traces = []
            design = part["key"].astype(str) + part["depth"].map(lambda d: "" if pd.isna(d) else f" d{int(d)}")
            for machine, rows in part.assign(_design=design).groupby("_machine", sort=True):
                # one observation per measurement: seeds that share a cost_source hold copies of one figure
                stats = {d: t_ci(observations(counted_rows(g, metric), metric))
                         for d, g in rows.groupby("_design", sort=True)}
                traces.append({"type": "bar", "x": list(stats), "y": _floats(s["mean"] for s in stats.values()),
                               "name": str(machine), "customdata": [s["n"] for s in stats.values()],
                               "hovertemplate": "%{x}: %{y:.4g} (%{customdata} measurement(s))<extra></extra>",
                               "error_y": _error_y(stats.values(), metric)})
            fig = figs.figure(traces, f"{label} — {task}: a bar per configuration and {legend}, {BAR_MEAN}", "design",
                              label, legend=legend, barmode="group")
            out.append(figs.html(fig, f"cost {name} {task} {metric}"))
        out += _pareto_figure(figs, part, name, str(task))
    return out


def _pareto_figure(figs: _Figures, part: pd.DataFrame, name: str, task: str) -> list[str]:
    """The final validation metric against throughput, a point per configuration, depth and machine (and load band,
    where the configuration's throughput was measured in several): the seed mean over every band of the machine with
    its 95% t-CI (clipped to the metric's range), against the configuration's throughput counted once per
    measurement (the figure of the bars and of the PNG Pareto, not a mean over seeds that repeats a copied one)."""
    quality = "final_val_acc" if part["final_val_acc"].notna().any() else "final_val_loss"
    ok = part[(part["status"] == "ok") & part[quality].notna() & part["train_samples_per_s"].notna()]
    if not len(ok):
        return []
    points = []
    depth = ok["depth"].fillna(-1)
    for (machine, key), rows in ok.groupby(["_machine", "key"], sort=True):
        by = rows.groupby(depth.loc[rows.index], sort=True)
        speed = [t_ci(observations(g, "train_samples_per_s"))["mean"] for _, g in by]
        pooled = ok[(ok["_pooled"] == rows["_pooled"].iloc[0]) & (ok["key"] == key)]  # every band of its machine
        value = [t_ci(observations(pooled[depth.loc[pooled.index] == d], quality)) for d in by.groups]
        points.append((f"{key} @ {machine}", speed, value, [str(int(d)) if d != -1 else "" for d in by.groups]))
    # the depth beside each point, as the PNG labels it; a point nearly on an earlier one's has its label below
    flat = pd.DataFrame([(x, v["mean"]) for _, xs, vs, _ in points for x, v in zip(xs, vs, strict=True)], dtype=float)
    lower = iter(label_lines(flat[0], flat[1]) if len(flat) else [])
    traces = [_scatter(_floats(xs), [v["mean"] for v in vs], name, "markers+text", text=depths,
                       textposition=["bottom right" if next(lower) else "top right" for _ in depths],
                       error_y=_error_y(vs, quality),
                       hovertemplate="depth %{text}: %{x:.4g} samples/s, " + quality + " %{y:.4g}<extra></extra>")
              for name, xs, vs, depths in points]
    fig = figs.figure(traces, f"{quality} against throughput — {task} (seed means, bars: 95% CI; labels: depth; "
                      f"throughput: {PER_POINT})", "training samples/s", quality.replace("_", " "),
                      legend="design @ machine")
    return [figs.html(fig, f"pareto {name} {task}")]


def _error_y(stats: Iterable[Mapping[str, float]], metric: str) -> dict[str, Any]:
    """Plotly error bars of :func:`t_ci` figures: the 95% t-CI, clipped to the metric's valid range as the PNG
    figures' bands are (a throughput's never below 0); none where a point has one value, as the PNGs draw none over
    n = 1. There the length is :data:`NO_ERROR`: plotly.js reads a length as a JavaScript number, where null is 0 (a
    bar of no length, still with its caps) and the string ``"NaN"`` is no number, so it draws nothing."""
    low, high = domain(metric)
    stats = list(stats)
    up = [min(s["mean"] + s["ci"], high) - s["mean"] for s in stats]
    down = [s["mean"] - max(s["mean"] - s["ci"], low) for s in stats]
    return {"type": "data", "symmetric": False,
            "array": [NO_ERROR if math.isnan(s["ci"]) else v for s, v in zip(stats, _floats(up), strict=True)],
            "arrayminus": [NO_ERROR if math.isnan(s["ci"]) else v for s, v in zip(stats, _floats(down), strict=True)]}


def _grad_figures(figs: _Figures, frames: Frames, name: str) -> list[str]:
    """The gradient-norm profile at initialisation (Xiong et al. 2020, Fig. 3): per unit position, one line per
    design and depth (and unit kind)."""
    probes = frames.probes
    out = []
    for task in sorted(probes["task"].dropna().unique()):
        try:
            stats, metric, _ = grad_norm_init_data(probes, task)
        except ValueError:
            continue
        if stats.empty:
            continue
        stats = stats.assign(design=stats["key"].astype(str) + stats["style"].map(
            lambda st: f" ({st})" if st else "") + stats["kind"].map(lambda k: f" {k}" if k else ""))
        colours = _colour(stats["design"])
        traces = [t for design, s in stats.groupby("design", sort=True)
                  for t in figs.series(s, "index", str(design), colours[str(design)], True)]
        fig = figs.figure(traces, f"{metric} at initialisation per unit — {task} (band = 95% CI, {LOG_BAND_NOTE})",
                          "unit index (0 = nearest the input)", metric, log=True)
        out.append(figs.html(fig, f"grad {name} {task}"))
    return out


# -- pages --------------------------------------------------------------------------------------------------------


def _group_html(g: Group) -> str:
    """``label: mean ± 95% CI half-width (counted/runs, failed)``, as the report writes a group."""
    spread = f" ± {fmt_number(g.ci, '.2g')}" if g.n > 1 else ""
    failed = f", {g.n_failed} failed" if g.n_failed else ""
    ci = "95% CI; " if spread else ""
    return f"{html.escape(g.label)}: {fmt_number(g.mean, '.4g')}{spread} ({ci}{g.n}/{g.n_runs} runs{failed})"


def _claims_html(results: Sequence[Result]) -> str:
    rows = []
    for r in results:
        c = r.claim
        groups = "<br>".join(_group_html(g) for g in r.groups)
        known = math.isfinite(r.diff) and math.isfinite(r.spread)
        interval = f"{r.diff - r.spread:+.3g} … {r.diff + r.spread:+.3g}" if known else ""
        if r.test:  # which test made the interval, on how many runs
            interval += f"<br><small>{html.escape(test_text(r.test, r.pairs, *(g.n for g in r.groups)))}</small>"
        rows.append([f"<b>{html.escape(c.id)}</b><br>{html.escape(c.paper)}: {html.escape(c.text)}",
                     html.escape(describe(c)), html.escape(r.context), groups,
                     fmt_number(r.diff, "+.4g") if r.groups else "", interval,
                     f'<span class="verdict {r.verdict}">{VERDICT_WORDS[r.verdict]}</span>'
                     + (f"<br><small>{html.escape(r.note)}</small>" if r.note else "")])
    return _table(("claim", "test", "configuration", "groups (mean ± 95% CI)", "difference", "95% CI",
                   "verdict"), rows, "claims")


def _leaderboard_html(board: pd.DataFrame, depth: int) -> str:
    """Every run a row; a select per naming column filters, a click on a header sorts (``site.js``)."""
    columns = [c for c in NAME_COLUMNS if c in board.columns and board[c].notna().any()]
    metrics = [m for m in METRIC_COLUMNS if m in board.columns]
    head = "".join(f'<th data-col="{c}"{_HEAD_NOTES.get(c, "")}>{c}{_UNITS.get(c, "")}</th>'
                   for c in ["run", *columns, *metrics])
    filters = ["<th></th>"]
    for c in columns:
        if c in FILTERED:
            values = sorted({_text(v) for v in board[c]}, key=lambda v: (not v.replace(".", "").isdigit(),
                                                                         float(v) if v.replace(".", "").isdigit()
                                                                         else 0, v))
            options = "".join(f'<option value="{html.escape(v)}">{html.escape(v) or "(none)"}</option>'
                              for v in values)
            filters.append(f'<th><select class="filter" data-col="{c}" aria-label="filter {c}">'
                           f'<option value="*">all</option>{options}</select></th>')
        else:
            filters.append("<th></th>")
    filters += ["<th></th>"] * len(metrics)
    up = "../" * depth
    body = []
    for _, row in board.iterrows():
        run = str(row["run_id"])
        cells = [f'<td data-v="{html.escape(run)}"><a href="{up}run/{slug(run)}.html">{html.escape(run)}</a></td>']
        cells += [f'<td data-col="{c}" data-v="{_e(row[c])}">{_e(row[c])}</td>' for c in columns]
        cells += [f'<td class="num" data-v="{_e(row[m])}">{_e(row[m])}</td>' for m in metrics]
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (f'<p class="count"><span id="shown">{len(board)}</span> of {len(board)} runs shown</p>'
            f'<table class="board" id="leaderboard"><thead><tr class="sort">{head}</tr>'
            f'<tr class="filters">{"".join(filters)}</tr></thead><tbody>{"".join(body)}</tbody></table>')


def rerun_folder(root: Path) -> Path:
    """The scratch results folder a run page's "this run alone" command writes to, beside ``root``: a run made
    outside its study has another config hash, so in ``root`` it would add a row of no study to its leaderboard."""
    return root.with_name(f"{root.name}-rerun")


def _run_command(run: Mapping[str, Any], root: Path) -> str:
    """``python -m bench run ...``: the whole config the run recorded, as options (its seed included), into
    :func:`rerun_folder`, never into ``root``."""
    cfg = config_from_dict(run["config"])
    head = f"torchrun --nproc-per-node {cfg.world_size} -m bench run" if cfg.world_size > 1 else "python -m bench run"
    argv = cfg.to_argv(skip=("variant", "study", "preset", "world_size"))
    return f"{head} {shlex.join([*argv, *run_plugin_flags(run, root), '--results-dir', str(rerun_folder(root))])}"


# A config field and how the run's task data states the quantity it names (a task may not read the field: the digits
# are 8x8 images of one channel whatever --image-size says, and their split sizes are the dataset's).
_TASK_STATES: dict[str, tuple[str, Callable[[Mapping[str, Any]], Any]]] = {
    "train_size": ("train_size", lambda t: t.get("train_size")),
    "val_size": ("val_size", lambda t: t.get("val_size")),
    "num_classes": ("num_classes", lambda t: t.get("num_classes")),
    "image_size": ("image_shape", lambda t: (t.get("image_shape") or [None])[-1]),
    "channels": ("image_shape", lambda t: (t.get("image_shape") or [None])[0]),
    "augment": ("augment", lambda t: t["augment"] != "none" if "augment" in t else None),
}


def config_as_used(config: Mapping[str, Any], task: Mapping[str, Any] | None) -> dict[str, str]:
    """The run page's Config section: each field's value, except where the run's task data states the quantity the
    field names otherwise (``train_size 4096`` where the digits task used 1437): there the value says the task did
    not use it and what the task used, so the page never shows both unqualified."""
    task = task or {}
    out = {}
    for field, value in config.items():
        key, used = _TASK_STATES.get(field, ("", lambda t: None))
        stated = used(task)
        if stated is None or stated == value:
            out[field] = _text(value)
        else:
            name = config.get("task") or "this task"
            out[field] = f"{_text(value)} (not used by {name}: the run used {key} {_text(task[key])})"
    return out


def _run_page(run: Mapping[str, Any], row: Mapping[str, Any], figs: _Figures, root: Path) -> str:
    run_id = str(run["run_id"])
    config = run.get("config") or {}
    study = config.get("study")
    commands = []
    if study:
        commands.append(("the study it belongs to (this run is one of its runs; resume skips the recorded ones)",
                         _study_command(study, config.get("preset"), root, [run])))
    if config:
        what = ("this run alone, into a scratch folder of its own (" + rerun_folder(root).name + ", beside the results "
                "folder, whose leaderboard it leaves as it is): the same training, seed included, so its curves and "
                "final metrics, and its cost figures as measured on your machine at your load"
                + (" (outside its study: the study's name is part of the config hash, so it is recorded under "
                   "another hash)" if study else ""))
        commands.append((what, _run_command(run, root)))
    env = run.get("env") or {}
    provenance = {k: row.get(k) for k in ("git_sha", "created_at", "torch_version", "cost_source", "machine")
                  if k in row} | {"placement": run.get("placement"), "plugins": run.get("plugins"),
                                  "task data": run.get("task")}
    body = [f"<h1>run {html.escape(run_id)}</h1>",
            f'<p>config hash <code id="config-hash">{_e(row.get("config_hash"))}</code> · status '
            f'<b>{_e(row.get("status"))}</b>{" · study " + _link_study(study) if study else ""}</p>',
            "<h2>Reproduce</h2>",
            *(f"<p>{html.escape(w)}:</p><pre class='command'>{html.escape(c)}</pre>" for w, c in commands),
            "<h2>Curves</h2>", *_run_curves(run, figs),
            "<h2>Probes</h2>", *_run_probes(run, figs),
            "<h2>Leaderboard row</h2>", _kv({f"{k}{_UNITS.get(k, '')}": v for k, v in row.items() if _text(v) != ""}),
            "<h2>Config</h2>", _kv(config_as_used(config, run.get("task"))) if config else "<p>not recorded</p>",
            "<h2>Model arguments</h2>", _kv(run.get("model_kwargs") or {}),
            "<h2>Environment</h2>", _kv(env),
            "<h2>Provenance</h2>", _kv(provenance),
            "<h2>Measurements</h2>",
            f"<details><summary>raw</summary><pre>{html.escape(json.dumps(run.get('measurements'), indent=1))}"
            "</pre></details>"]
    return _page(run_id, body, 1)


def _link_study(study: Any) -> str:
    return f'<a href="../study/{slug(str(study))}.html">{html.escape(str(study))}</a>'


def _run_curves(run: Mapping[str, Any], figs: _Figures) -> list[str]:
    curves = run.get("curves") or {}
    traces = []
    train = curves.get("train") or []
    if train:
        traces.append(_scatter([p["step"] for p in train], [p.get("loss") for p in train], "training loss"))
    for metric in ("val_loss", "bpc", "train_loss"):
        points = [p for p in curves.get("eval") or [] if p.get(metric) is not None]
        if points:
            traces.append(_scatter([p["step"] for p in points], [p[metric] for p in points], metric,
                                   "lines+markers"))
    if not traces:
        return ["<p>no curve recorded</p>"]
    fig = figs.figure(traces, "loss against step", "step (optimizer updates)", "loss", log=True, legend="curve")
    out = [figs.html(fig, f"run curves {run['run_id']}")]
    acc = [p for p in curves.get("eval") or [] if p.get("val_acc") is not None]
    if acc:
        fig = figs.figure([_scatter([p["step"] for p in acc], [p["val_acc"] for p in acc], "val_acc",
                                    "lines+markers")],
                          "validation accuracy against step", "step (optimizer updates)", "val_acc", legend="curve")
        out.append(figs.html(fig, f"run accuracy {run['run_id']}"))
    return out


def _run_probes(run: Mapping[str, Any], figs: _Figures) -> list[str]:
    probes = run.get("probes") or []
    if not probes:
        return ["<p>no probes recorded</p>"]
    values: dict[tuple[str, int], dict[int, list[float]]] = {}
    for p in probes:  # plain loops: a pandas groupby per run page cost more than the rest of the page
        values.setdefault((str(p["metric"]), int(p["step"])), {}).setdefault(int(p["layer"]), []).append(p["value"])
    traces = []
    for (metric, step), per_layer in sorted(values.items()):
        layers = sorted(per_layer)
        means = [sum(v) / len(v) if all(x is not None for x in v) else None for v in (per_layer[k] for k in layers)]
        traces.append(_scatter(layers, means, f"{metric} @ step {step}", "lines+markers",
                               visible=True if step == 0 else "legendonly"))
    fig = figs.figure(traces, "per-layer probes (mean over the units of a layer; the legend shows the other steps)",
                      "layer", "value", log=True, legend="probe")
    names = sorted({str(p["metric"]) for p in probes})
    return [figs.html(fig, f"run probes {run['run_id']}"), f"<p>{len(probes)} probe values ({', '.join(names)})</p>"]


@dataclass
class _Study:
    name: str
    board: pd.DataFrame
    runs: list[dict[str, Any]]
    path: Path | None
    results: list[Result]
    analysis: Summary | None = None

    @property
    def verdicts(self) -> list[Result]:
        """Every claim of the study: about its leaderboard, then about its analysis."""
        return [*self.results, *(self.analysis.results if self.analysis else [])]


def _analysis_html(made: Summary, study: str, root: Path, site: Path) -> list[str]:
    """The analysis section: its summary table, its figures (the report's PNGs, copied beside the page) and the
    claims about it."""
    body = [f"<h2>Analysis: {html.escape(made.kind)}</h2>",
            f"<p>Rows of <code>{html.escape(made.source)}</code>, mean ± 95% CI half-width over seeds "
            "(n = models).</p>",
            _table(made.headers, ([_e(c) for c in row] for row in made.rows), "analysis")]
    for fig in made.figures:
        target = site / "study" / "img" / slug(study) / fig.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(fig, target)
        body.append(f'<p><img src="img/{slug(study)}/{html.escape(fig.name)}" alt="{html.escape(fig.stem)}" '
                    'class="analysis-figure"></p>')
    if made.results:
        body += [f"<h3>Claims about the {html.escape(made.kind)} analysis</h3>", _claims_html(made.results)]
    return body


def _study_page(study: _Study, frames: Frames | None, figs: _Figures, root: Path, site: Path) -> str:
    """A study's page; ``frames`` is None for a study that trains nothing (its analysis measures models at init)."""
    presets = sorted({(r.get("config") or {}).get("preset") for r in study.runs},
                     key=lambda p: (p is not None, p or ""))
    commands = [_study_command(study.name, p, root, study.runs) for p in presets] if study.name != NO_STUDY else []
    if frames is None:
        preset = _analysis_meta(root, study.name).get("preset")
        commands = [f"python -m bench reproduce {study.name}" + (f" --preset {preset}" if preset else "")]
    board = study.board
    trained = (f"{len(board)} runs, {int((board['status'] == 'ok').sum())} ok" if frames is not None else
               "no training runs: the study measures models at initialisation")
    body = [f"<h1>study {html.escape(study.name)}</h1>",
            f"<p>{trained}" + (f"; claims declared in <code>{html.escape(_shown_path(study.path, root))}</code>: "
                               f"{tally(study.verdicts)}" if study.path and study.verdicts else "") + "</p>"]
    if commands:
        body += ["<h2>Reproduce</h2>", *(f"<pre class='command'>{html.escape(c)}</pre>" for c in commands)]
    if frames is not None:
        body += ["<h2>Leaderboard</h2>", "<p>Click a header to sort; choose a value above a column to filter. Cost "
                 "columns are this run's machine's; the run's page has its environment.</p>",
                 _leaderboard_html(board, 1)]
    if study.results:
        body += ["<h2>Paper claims vs measured</h2>", _claims_html(study.results)]
    if frames is not None and study.name != NO_STUDY:  # a study with a multiplier claim: its scaling fit
        body += scaling_html(root, study.name, board, study.runs, figs.html)
    if study.analysis:
        body += _analysis_html(study.analysis, study.name, root, site)
    sections = (("Curves", _curve_figures), ("Cost and Pareto", _cost_figures),
                ("Gradient norms at initialisation", _grad_figures))
    for title, make in sections:
        made = make(figs, frames, study.name) if frames is not None else []
        if made:
            body += [f"<h2>{title}</h2>", *made]
    return _page(f"study {study.name}", body, 1)


def _index_page(studies: Sequence[_Study], root: Path) -> str:
    rows = []
    for s in studies:
        machines = sorted(set(_machine_of(s.board)))
        rows.append([f'<a href="study/{slug(s.name)}.html">{html.escape(s.name)}</a>', str(len(s.board)),
                     str(int((s.board["status"] == "ok").sum())), html.escape(", ".join(sorted(
                         map(str, s.board["task"].dropna().unique())))),
                     html.escape(", ".join(machines)),
                     tally(s.verdicts) if s.verdicts else "no claims"])
    body = ["<h1>resbench results</h1>",
            f"<p>From <code>{html.escape(str(root))}</code>: {sum(len(s.board) for s in studies)} runs in "
            f"{len(studies)} studies. Each study's page has its runs, its claims' verdicts and its figures.</p>",
            _table(("study", "runs", "ok", "tasks", "machines", "claims"), rows, "studies")]
    return _page("results", body, 0, scripts=False)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def build_site(results_dir: str | Path, out: str | Path) -> Site:
    """Write the site of ``results_dir`` into ``out`` (created; the files it writes replaced, others left)."""
    figs = _Figures()
    root, site = Path(results_dir), Path(out)
    if site.exists() and not site.is_dir():
        raise ValueError(f"{site} is a file; bench site writes a folder: pass another -o")
    check_writable(site, "site folder", "-o")
    store = ResultsStore(root)
    board = store.load_leaderboard()
    if board.empty:
        raise ValueError(f"no runs in {root}: nothing to show (run `python -m bench run ...` or "
                         "`python -m bench reproduce ...` first)")
    runs = {r["run_id"]: r for r in read_runs(root)}
    board = board.assign(study=board["study"].astype(object).where(board["study"].notna(), NO_STUDY))
    studies: list[_Study] = []
    pages = 0
    parts = {str(name): part.reset_index(drop=True) for name, part in board.groupby("study", sort=True)}
    analysed = {p.name for p in (root / "analysis").iterdir() if p.is_dir()} if (root / "analysis").is_dir() else set()
    for name in sorted(set(parts) | analysed):
        part = parts.get(name, board.iloc[:0])
        of = [runs[r] for r in part["run_id"] if r in runs]
        analysis = summary_of(root, name, of) if name != NO_STUDY else None
        if name not in parts and analysis is None:
            continue  # a folder of analysis tables that no study file declares
        frames = frames_of(part, of) if name in parts else None
        path, results = (study_claims(part, frames.probes, of, root, name) if frames is not None and name != NO_STUDY
                         else (_study_path(root, name), []))
        study = _Study(name, part, of, path, results, analysis)
        studies.append(study)
        _write(site / "study" / f"{slug(study.name)}.html", _study_page(study, frames, figs, root, site))
        pages += 1
    for row in board.to_dict("records"):
        run = runs.get(row["run_id"], {"run_id": row["run_id"]})
        _write(site / "run" / f"{slug(str(row['run_id']))}.html", _run_page(run, row, figs, root))
        pages += 1
    _write(site / "index.html", _index_page(studies, root))
    _write(site / "plotly.min.js", figs.offline.get_plotlyjs())
    for asset in ("site.js", "site.css"):  # the site is a build output: plain writes, no fsync per page
        shutil.copyfile(ASSETS / asset, site / asset)
    size = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
    return Site(site, pages + 1, size)
