"""Markdown (and CSV, LaTeX) of the tables and verdicts resbench prints: the report's building blocks, and what
``bench compare`` prints.

Every string that comes from a results folder, a study file or a plugin (variant names, claim ids and texts, papers,
table cells, environment values) goes into Markdown through :func:`md` or :func:`markdown_table`, which escape HTML:
a name holding ``<script>`` or ``"><img onerror=...>`` shows as text wherever the Markdown is rendered, never as a
tag. Shell commands go into a fenced block (:func:`fenced`) that their text cannot close.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from typing import Any

import pandas as pd

from bench.analysis.claims import Group, Result, describe, margin_warned
from bench.analysis.comparison import AMBIGUOUS_NOTE, ONCE_NOTE, UNMATCHED_NOTE
from bench.analysis.comparison import COLUMNS as COMPARISON_COLUMNS
from bench.analysis.multiplier_columns import COLUMNS as MULTIPLIER_COLUMNS
from bench.analysis.multiplier_columns import NOTE as MULTIPLIER_NOTE
from bench.analysis.sequential import Looks
from bench.analysis.stats import CONFIG_KEY, EQUAL, EXACT, PAIRED
from bench.analysis.timed import ONCE, once_words

FORMATS = ("markdown", "csv", "latex")
MISSING = "—"  # how every table shows a value that is not there
VERDICT_WORDS = {"agrees": "agrees", "disagrees": "DISAGREES", "inconclusive": "inconclusive"}
TALLY_WORDS = {"agrees": "agree", "disagrees": "disagree", "inconclusive": "inconclusive"}


def tally(results: Sequence[Result]) -> str:
    """The claims' verdicts counted (``2 agree, 0 disagree, 1 inconclusive``); agreements whose margin a warning says
    dwarfs the data (:func:`bench.analysis.claims.margin_warned`) are counted apart: ``2 agree (1 with a margin
    warning)``."""
    warned = sum(r.verdict == "agrees" and margin_warned(r) for r in results)
    return ", ".join(f"{sum(r.verdict == v for r in results)} {w}"
                     + (f" ({warned} with a margin warning)" if v == "agrees" and warned else "")
                     for v, w in TALLY_WORDS.items())


def md(text: Any) -> str:
    """``text`` safe as Markdown prose: ``&``, ``<`` and ``>`` as HTML entities (a tag in it is shown, not run)."""
    return html.escape(str(text), quote=False)


def fenced(lines: Sequence[str], info: str = "") -> list[str]:
    """``lines`` as a fenced code block whose fence is longer than any run of backticks in them, so no line can close
    it early (inside the block nothing is HTML: a renderer shows it as text)."""
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{info}", *(line.replace("\r", " ") for line in lines), fence]


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured markdown table (``|`` inside cells escaped, HTML escaped: :func:`md`)."""

    def cell(v: Any) -> str:
        return md(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def fmt_number(v: float, fmt: str) -> str:
    """``v`` formatted, or :data:`MISSING` for None / NaN / inf."""
    return MISSING if v is None or not math.isfinite(v) else format(v, fmt)


def _group_text(g: Group, count_above: float | None) -> str:
    spread = f" ± {fmt_number(g.ci, '.4g')}" if g.n > 1 else ""
    counts = [f"{g.n}/{g.n_runs} runs"]
    if g.n_failed:
        counts.append(f"{g.n_failed} failed")
    if g.n_above is not None:
        counts.append(f"{g.n_above} above {count_above:g}")
    # the ± is the interval's half-width (at the group's level), not the seeds' std as in the leaderboard
    ci = f"{level_text(g.level)} CI; " if spread else ""
    return f"{g.label}: {fmt_number(g.mean, '.4g')}{spread} ({ci}{', '.join(counts)})"


def _measured(r: Result) -> str:
    """The numbers behind one verdict, in words."""
    c = r.claim
    groups = [_group_text(g, c.count_above) for g in r.groups]
    if c.kind == "slope":
        lo, hi = c.expect_range or (math.nan, math.nan)
        if not math.isfinite(r.diff):
            return " · ".join(groups)
        ci = f"95% CI {fmt_number(r.diff - r.spread, '.3g')} … {fmt_number(r.diff + r.spread, '.3g')}"
        return f"{' · '.join(groups)}; log-log slope {fmt_number(r.diff, '.3g')} ({ci}; expected in [{lo:g}, {hi:g}])"
    known = math.isfinite(r.diff) and math.isfinite(r.spread)  # the interval the verdict read, where there is one
    interval = [f"{level_text(r.level)} CI {r.diff - r.spread:+.3g} … {r.diff + r.spread:+.3g}"] if known else []
    if c.kind == "compare" and r.test in (EQUAL, EXACT):  # no spread: the difference itself, no interval to show
        interval = [test_text(r.test, r.pairs)]
    elif c.kind == "compare" and r.test:
        interval = [f"{test_text(r.test, r.pairs, *(g.n for g in r.groups))}: {interval[0]}" if interval else
                    test_text(r.test, r.pairs, *(g.n for g in r.groups))]
        exact = f", exact sign-flip p {r.p_exact:.2g}" if math.isfinite(r.p_exact) else ""
        interval += [f"p {r.p:.2g}{exact}"] if math.isfinite(r.p) else []
    if c.kind == "value":
        tolerance = [f"tolerance ±{c.tolerance:g}"] if c.expect == "similar" else []
        detail = f" ({'; '.join(interval + tolerance)})" if interval or tolerance else ""
        return f"{' · '.join(groups)}; mean − {c.threshold:g} = {fmt_number(r.diff, '+.4g')}{detail}"
    plus = "±" if c.expect == "similar" else ""
    margins = [*interval, f"margin {plus}{fmt_number(r.threshold, '.4g')}"]
    return f"{' → '.join(groups)}; difference {fmt_number(r.diff, '+.4g')} ({'; '.join(margins)})"


def level_text(level: float) -> str:
    """``95%``, ``98.75%``: a confidence level as the tables print it."""
    return f"{100 * level:.4g}%"


def test_text(test: str, pairs: int, n_a: int = 0, n_b: int = 0) -> str:
    """Which test produced a difference's interval, on how many runs: ``paired t, 3 seeds`` or ``Welch, 3 + 3 runs``."""
    if test in (EQUAL, EXACT):
        return f"{test}: no spread, no test"
    if test == ONCE:
        return once_words(n_a, n_b)
    if test == PAIRED:
        return f"{test}, {pairs} seed{'s' if pairs != 1 else ''}"
    return f"{test}, {n_a} + {n_b} runs"


def claim_lines(results: Sequence[Result], looks: Looks | None = None) -> list[str]:
    """Markdown bullets: one per claim (source, words, the test), one sub-bullet per verdict; with the ``looks`` a
    study was run under (``--until-decided``), the look each compare verdict was read at."""
    out: list[str] = []
    seen: set[str] = set()
    for r in results:
        c = r.claim
        if c.id not in seen:
            seen.add(c.id)
            out.append(f"- **{md(c.id)}** — {md(c.paper)}: {md(c.text)}. Test: {md(describe(c))}.")
        note = f" — {md(r.note)}" if r.note else ""
        context = f"{md(r.context)}: " if r.context else ""
        measured = f"{md(_measured(r))}: " if r.groups else ""
        look = ""
        if looks is not None and c.kind == "compare" and r.test:
            k = looks.look(r.compared)
            look = f" at look {k} of {len(looks.seeds)}" if r.verdict != "inconclusive" else \
                f" after look {k} of {len(looks.seeds)}"
        out.append(f"  - {context}{measured}**{VERDICT_WORDS[r.verdict]}**{look}{note}.")
    return out


def _fmt(v: Any, spec: str = ".4g") -> str:
    return MISSING if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def _test_cell(test: Any, pairs: Any, n: Any, n_base: Any) -> str:
    if not isinstance(test, str) or not test:
        return MISSING
    return test_text(test, int(pairs) if test == PAIRED else 0, int(n), int(n_base))


# The lines a comparison's table.attrs may hold, in the order they follow it (under the markdown, else on stderr)
COMPARISON_NOTES = (UNMATCHED_NOTE, AMBIGUOUS_NOTE, ONCE_NOTE, MULTIPLIER_NOTE)


def render_comparison(table: pd.DataFrame, fmt: str = "markdown") -> str:
    """The table as GitHub markdown (per row: the difference from the baseline and its 95% CI first, the test that
    made them and on how many runs, then the p-values, then ``mean ± ci (n)``), CSV (every column as is) or LaTeX
    (the markdown's cells)."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    if fmt == "csv":
        return table.to_csv(index=False)
    keys = [*(c for c in table.columns if c not in (*COMPARISON_COLUMNS, *MULTIPLIER_COLUMNS, CONFIG_KEY)), "metric"]
    shown = table[keys].astype(object).where(table[keys].notna(), MISSING)
    shown = shown.assign(
        **{
            "diff [95% CI]": ["0" if t == EQUAL else _fmt(d, "+.4g") if t == EXACT or not math.isfinite(hi) else
                              f"{_fmt(d, '+.4g')} [{_fmt(lo, '+.3g')} … {_fmt(hi, '+.3g')}]" for d, lo, hi, t in
                              zip(table["diff"], table["diff_lo"], table["diff_hi"], table["test"], strict=True)],
            "test": [_test_cell(t, p, n, b) for t, p, n, b in
                     zip(table["test"], table["pairs"], table["n"], table["n_base"], strict=True)],
            "p": [_fmt(p, ".3g") + (f" (exact {p_exact:.2g})" if math.isfinite(p_exact) else "")
                  for p, p_exact in zip(table["p"], table["p_exact"], strict=True)],
            "p (Holm)": [_fmt(p, ".3g") for p in table["p_holm"]],
            "mean ± CI (n)": [f"{_fmt(m)} ± {_fmt(c, '.2g')} ({int(n)})" for m, c, n in
                              zip(table["mean"], table["ci"], table["n"], strict=True)],
        }
    )
    if "multiplier" in table.columns:  # a scaling ladder's rows (bench.analysis.multiplier_columns)
        shown = shown.assign(**{
            "compute multiplier [95% CI]": [interval_cell(*v) for v in
                                            zip(table["multiplier"], table["multiplier_lo"], table["multiplier_hi"],
                                                strict=True)],
            "steps-to-target ratio [95% CI]": [bound_cell(*v) for v in zip(
                table["steps_ratio"], table["steps_ratio_lo"], table["steps_ratio_hi"], table["steps_ratio_short"],
                strict=True)]})
    if fmt == "latex":
        return shown.to_latex(index=False)
    notes = [table.attrs[k] for k in COMPARISON_NOTES if table.attrs.get(k)]
    return markdown_table(list(shown.columns), shown.to_numpy().tolist()) + "".join(f"\n\n{md(n)}" for n in notes)


def bound_cell(value: float, lo: float, hi: float, short: float) -> str:
    """:func:`interval_cell`, read as an upper bound (``≤``) where ``short`` seeds never reached the target."""
    return ("≤ " if short and short > 0 else "") + interval_cell(value, lo, hi)


def interval_cell(value: float, lo: float, hi: float, digits: int = 3) -> str:
    """A positive quantity with its interval, ``value [lo, hi]``: the value alone where the interval is not known,
    :data:`MISSING` where the value is not, and an infinite one (a loss the baseline never reaches) ``never``."""
    def num(v: float) -> str:
        return "never" if v == math.inf else f"{v:.{digits}g}"

    if not math.isfinite(value) and value != math.inf:
        return MISSING
    if math.isnan(lo) or math.isnan(hi):
        return num(value)
    return f"{num(value)} [{num(lo)}, {num(hi)}]"


def render_profile(table: pd.DataFrame, top: int = 12) -> str:
    """A step profile (:func:`bench.runs.cost.profile_pair`) as Markdown: the ``top`` operators adding the most time,
    each with its share of the design's whole extra time, then the rest in one row."""
    a = table.attrs
    extra = a["design_ms"] - a["base_ms"]
    head = (f"Where {a['design']}'s training step goes at {a['shape']}, batch {a['batch']} in "
            f"{a.get('precision', 'fp32')} on {a['device']}: "
            f"{a['design_ms']:,.1f} ms against {a['baseline']}'s {a['base_ms']:,.1f} ms ({extra / a['base_ms']:+.1%}), "
            f"self time per operator and step, torch.profiler over {a['steps']} steps of each, alternating")
    rest = table.iloc[top:]
    shown = pd.concat([table.iloc[:top], pd.DataFrame([{
        "op": f"the other {len(rest)} operators", **rest[["base_ms", "design_ms", "extra_ms", "base_calls",
                                                             "design_calls"]].sum()}])], ignore_index=True)
    rows = [[r.op, f"{r.base_ms:,.1f}", f"{r.design_ms:,.1f}", f"{r.extra_ms:+,.1f}",
             f"{r.extra_ms / extra:.0%}" if extra > 0 else "-", f"{r.base_calls:,.0f}", f"{r.design_calls:,.0f}"]
            for r in shown.itertuples(index=False)]
    headers = ["operator", f"{a['baseline']} ms", f"{a['design']} ms", "extra ms", "share of the extra",
               f"{a['baseline']} calls", f"{a['design']} calls"]
    return head + ".\n\n" + markdown_table(headers, rows) + "\n"


def render_cost(table: pd.DataFrame, fmt: str = "markdown") -> str:
    """A cost table (:func:`bench.runs.cost.cost_table`) as Markdown, headed by a line saying at which shape, batch
    and device it was measured, or CSV."""
    if fmt not in ("markdown", "csv"):
        raise ValueError(f"format must be markdown or csv, got {fmt!r}")
    if fmt == "csv":
        return str(table.to_csv(index=False))
    a = table.attrs
    head = f"Cost at {a.get('shape')} ({a.get('what')}), relative to {table['design'].iloc[0]}"
    if "step_ms" in table:
        head += (f"; step time and memory at batch {a.get('batch')} in {a.get('precision', 'fp32')} on "
                 f"{a.get('device')}"
                 + (f" on {a['threads']} thread{'s' if a['threads'] != 1 else ''}" if a.get("threads") else "")
                 + f", per step the median of {a.get('repeats')} rounds in which each design in turn takes "
                 + (f"as many steps as fill {a['round_s']:g} s" if a.get("round_s") is not None else "its steps")
                 + f", memory: {a.get('memory')}")
        if a.get("rotations"):
            head += (f"; timed in {a['rotations']} rotations of the baseline beside the designs that fit in memory "
                     "with it, each ratio divided by the baseline's time in its own rotation (base_step_ms)")
        if a.get("optimizer_impl"):
            head += f"; optimiser kernels: {a['optimizer_impl']}"
        if a.get("compile_mode"):
            head += f"; compiled columns: torch.compile mode {a['compile_mode']}"
    rows = [[v if isinstance(v, str) else f"{v:,}" if isinstance(v, int) else fmt_number(float(v), ".4g")
             for v in row] for row in table.itertuples(index=False)]
    return head + ".\n\n" + markdown_table(list(table.columns), rows) + "\n"
