"""bench.analysis.lesion: deleting residual units at test time (Veit et al. 2016), checked against hand computations."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pandas as pd
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from torch import nn

import variants
from bench.analysis import lesion
from bench.reports import analysis_figures
from bench.runs.tasks.base import Task
from variants.blocks import ResidualUnit
from variants.combinators import Add, Gate, NoShortcut, Scaled, TransformGate


class Stack(nn.Module):
    def __init__(self, *units: nn.Module, head: nn.Module | None = None) -> None:
        super().__init__()
        self.units = nn.Sequential(*units)
        self.head = head if head is not None else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.units(x))


class Fixed(Task):
    """A classification task of fixed tensors: its validation split is the batches given."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        super().__init__(name="fixed", kind="image", model_kwargs={}, device=torch.device("cpu"))
        self.x, self.y = x, y

    def val_batches(self, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for i in range(0, len(self.x), batch_size):
            yield self.x[i: i + batch_size], self.y[i: i + batch_size]


def linear_unit(d: int, combine: nn.Module, seed: int) -> ResidualUnit:
    torch.manual_seed(seed)
    return ResidualUnit(nn.Linear(d, d).double(), combine)


def test_lesioned_units_become_their_shortcut() -> None:
    torch.manual_seed(0)
    x = torch.randn(5, 4, dtype=torch.float64)
    add = linear_unit(4, Add(), 1)
    gate = Gate(TransformGate(nn.Linear(4, 4).double(), -1.0))
    highway = ResidualUnit(nn.Linear(4, 4).double(), gate)
    scaled = linear_unit(4, Scaled(alpha=1.5, beta=0.3), 2)
    plain = linear_unit(4, NoShortcut(), 3)
    with lesion.lesioned(add, ["combine"]):
        assert torch.equal(add(x), x)  # x + 0
    with lesion.lesioned(highway, ["combine"]):
        t = torch.sigmoid(gate.gate.proj(x))
        torch.testing.assert_close(highway(x), (1 - t) * x, rtol=0, atol=1e-15)
    with lesion.lesioned(scaled, ["combine"]):
        torch.testing.assert_close(scaled(x), 1.5 * x, rtol=0, atol=1e-15)
    with lesion.lesioned(plain, ["combine"]):
        assert torch.equal(plain(x), x)  # a plain layer becomes the identity (Veit's VGG lesion)
    # the hooks are gone afterwards: the units compute their formulas again
    torch.testing.assert_close(add(x), x + add.body(x), rtol=0, atol=0)
    torch.testing.assert_close(plain(x), plain.body(x), rtol=0, atol=0)


def test_a_lesioned_join_keeps_the_earlier_values_it_reads() -> None:
    """The speedrun's join, λ_res·x + λ_post·F + λ₀·x₀ (x₀ its declared source): deleted, its branch only goes."""
    from variants.speedrun import SkipToEmbedding

    join = SkipToEmbedding().double()
    with torch.no_grad():
        join.resid.fill_(0.5)
        join.x0.fill_(2.0)
    x, fx, x0 = torch.randn(3, 2, 4, dtype=torch.float64)
    with lesion.lesioned(join, [""]):
        torch.testing.assert_close(join(x, fx, x0), 0.5 * x + 2.0 * x0, rtol=0, atol=0)


def test_lesioning_a_unit_whose_branch_is_zero_changes_nothing() -> None:
    model = Stack(linear_unit(4, Add(), 0), linear_unit(4, Add(), 1), linear_unit(4, Add(), 2))
    with torch.no_grad():
        model.units[1].body.weight.zero_()
        model.units[1].body.bias.zero_()
    x = torch.randn(6, 4, dtype=torch.float64)
    intact = model(x)
    with lesion.lesioned(model, ["units.1.combine"]):
        assert torch.equal(model(x), intact)
    with lesion.lesioned(model, ["units.0.combine"]):
        assert not torch.allclose(model(x), intact)


def test_units_and_what_can_be_deleted() -> None:
    torch.manual_seed(0)
    widen = ResidualUnit(nn.Linear(4, 6).double(), NoShortcut())  # a plain layer that changes the width
    model = Stack(linear_unit(4, NoShortcut(), 0), widen, linear_unit(6, Add(), 1))
    assert lesion.units(model) == ["units.0.combine", "units.1.combine", "units.2.combine"]
    assert lesion.lesionable(model, torch.randn(3, 4, dtype=torch.float64)) == ["units.0.combine", "units.2.combine"]
    with pytest.raises(ValueError, match=re.escape("not residual units of this model: ['units.0']")), \
            lesion.lesioned(model, ["units.0"]):
        pass
    with lesion.lesioned(model, ["units.1.combine"]), pytest.raises(ValueError, match="cannot be deleted"):
        model(torch.randn(3, 4, dtype=torch.float64))


class PluginPlain(nn.Module):
    """A plugin's plain join, ``y = F(x)``: declared (``residual_role``, combinator ``axis`` "none"), not a subclass."""

    residual_role = "join"
    axis = "none"

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        return fx


def test_a_plugin_join_is_a_unit_by_what_it_declares() -> None:
    from _nets import plugin_net

    torch.manual_seed(0)
    model = plugin_net()
    assert lesion.units(model) == ["1.join", "2.join"]
    x = torch.randn(3, 4)
    with lesion.lesioned(model, ["1.join"]):  # the unit becomes its identity shortcut
        assert torch.equal(model(x), model[3](model[2](model[0](x))))
    plain = [ResidualUnit(nn.Linear(c, 6).double(), PluginPlain()) for c in (4, 6)]  # type: ignore[arg-type]
    widen = Stack(*plain)
    assert lesion.lesionable(widen, torch.randn(3, 4, dtype=torch.float64)) == ["units.1.combine"]


def hand_task(model: nn.Module, n: int = 40, seed: int = 0) -> Fixed:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (n,), generator=g)
    return Fixed(x, y)


def test_lesion_table_against_hand_evaluations() -> None:
    head = nn.Linear(4, 3).double()
    model = Stack(*(linear_unit(4, Add(), s) for s in range(4)), head=head)
    task = hand_task(model)

    def error_and_loss(deleted: list[int]) -> tuple[float, float]:
        h = task.x
        for i, unit in enumerate(model.units):
            h = h if i in deleted else h + unit.body(h)
        logits = head(h)
        err = float((logits.argmax(-1) != task.y).double().mean())
        return err, float(nn.functional.cross_entropy(logits, task.y))

    with torch.no_grad():
        table = lesion.lesion(model, task, drops=[1, 2, 3, 9], draws=4, seed=7, batch_size=16)
        assert list(table.columns) == list(lesion.COLUMNS)
        intact = table[table["mode"] == "intact"].iloc[0]
        assert (intact["error"], intact["loss"]) == pytest.approx(error_and_loss([]), abs=1e-12)
        single = table[table["mode"] == "single"]
        assert single["layer"].tolist() == [0, 1, 2, 3] and (single["k"] == 1).all()
        for _, row in single.iterrows():
            assert (row["error"], row["loss"]) == pytest.approx(error_and_loss([row["layer"]]), abs=1e-12)
        random = table[table["mode"] == "random"]
        assert sorted(set(random["k"])) == [2, 3]  # k = 1 is the singles; 9 > the 4 units: left out
        assert len(random) == 2 * 4
        names = lesion.units(model)
        for _, row in random.iterrows():
            chosen = [names.index(u) for u in row["unit"].split()]
            assert len(set(chosen)) == row["k"]
            assert (row["error"], row["loss"]) == pytest.approx(error_and_loss(chosen), abs=1e-12)
    again = lesion.lesion(model, task, drops=[1, 2, 3, 9], draws=4, seed=7, batch_size=16)
    pd.testing.assert_frame_equal(table, again)  # the draws come from the seed
    other = lesion.lesion(model, task, drops=[2], draws=4, seed=8, batch_size=16)
    assert other[other["mode"] == "random"]["unit"].tolist() != random[random["k"] == 2]["unit"].tolist()

    s = lesion.summary(table.assign(run_id="r1"))
    assert s["k"].tolist() == [0, 1, 2, 3] and (s["run_id"] == "r1").all()
    assert s.loc[s["k"] == 1, "error"].item() == pytest.approx(single["error"].mean(), abs=1e-15)
    assert s.loc[s["k"] == 2, "n"].item() == 4
    assert s["error_increase"].tolist() == pytest.approx((s["error"] - intact["error"]).tolist(), abs=1e-15)


def test_models_that_cannot_be_lesioned() -> None:
    mlp = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 3)).double()
    with pytest.raises(ValueError, match="has no residual units \\(no joins\\)"):
        lesion.lesion(mlp, hand_task(mlp))
    widen = Stack(ResidualUnit(nn.Linear(4, 3).double(), NoShortcut()))
    with pytest.raises(ValueError, match="none of the model's units can be deleted"):
        lesion.lesion(widen, hand_task(widen))
    model = Stack(linear_unit(4, Add(), 0), head=nn.Linear(4, 3).double())
    with pytest.raises(ValueError, match="--drop takes unit counts >= 1"):
        lesion.lesion(model, hand_task(model), drops=[0])


def test_a_shipped_resnet_lesions_every_unit_and_keeps_its_mode() -> None:
    torch.manual_seed(0)
    model = variants.create("resnet", depth=8, num_classes=10, in_chans=1).train()
    x = torch.randn(20, 1, 8, 8)
    task = Fixed(x, torch.randint(0, 10, (20,)))
    table = lesion.lesion(model, task, drops=[2], draws=2)
    assert model.training  # evaluated in eval mode, restored
    assert len(table[table["mode"] == "single"]) == 3  # depth 8: 3 stages x 1 unit, downsampling ones included
    plain = variants.create("plain", depth=8, num_classes=10, in_chans=1)
    able = lesion.lesionable(plain, x)
    assert len(lesion.units(plain)) == 3 and len(able) == 1  # the two units that change the shape cannot go


def test_figure_plots_the_tables_data() -> None:
    table = pd.DataFrame([
        dict(mode="intact", k=0, draw=0, unit="", layer=-1, error=0.1, loss=0.3),
        dict(mode="single", k=1, draw=0, unit="a", layer=0, error=0.2, loss=0.5),
        dict(mode="single", k=1, draw=0, unit="b", layer=1, error=0.4, loss=0.9),
        dict(mode="random", k=2, draw=0, unit="a b", layer=-1, error=0.6, loss=1.0),
        dict(mode="random", k=2, draw=1, unit="b a", layer=-1, error=0.8, loss=1.2),
    ])  # fmt: skip
    fig = analysis_figures.lesion_figure({"net": table})
    single, many = fig.axes[:2]
    line = single.get_lines()[0]
    assert list(line.get_xdata()) == [0, 1] and list(line.get_ydata()) == pytest.approx([0.2, 0.4])
    assert single.get_lines()[1].get_ydata()[0] == pytest.approx(0.1)  # the intact error, dashed
    curve = many.get_lines()[0]
    assert list(curve.get_xdata()) == [0, 1, 2] and list(curve.get_ydata()) == pytest.approx([0.1, 0.3, 0.7])


def test_figure_colours_by_variant_with_the_studys_palette() -> None:
    """Colour = variant (the study's palette, as in its other figures), depth = line style: before, each model
    took the next colorblind colour, so plain-8 and plain-20 had two colours and no colour matched the report's."""
    table = pd.DataFrame([dict(mode="intact", k=0, draw=0, unit="", layer=-1, error=0.1, loss=0.3),
                          dict(mode="single", k=1, draw=0, unit="a", layer=0, error=0.2, loss=0.5)])  # fmt: skip
    tables = {f"{v}-{d}": table.assign(variant=v, depth=d) for v, d in (("plain", 8), ("plain", 20), ("resnet", 8))}
    study = {"plain": (0.0, 0.0, 1.0), "resnet": (1.0, 0.0, 0.0)}
    fig = analysis_figures.lesion_figure(tables, "lesion study", colours=study)
    single = fig.axes[0]
    drawn = {ln.get_label(): ln for ln in single.get_lines() if not ln.get_label().startswith("_")}
    assert {k: ln.get_color() for k, ln in drawn.items()} == {"plain-8": study["plain"], "plain-20": study["plain"],
                                                             "resnet-8": study["resnet"]}
    assert drawn["plain-8"].get_linestyle() != drawn["plain-20"].get_linestyle()
    FigureCanvasAgg(fig).draw()  # one legend, below: clear of both panels and every title
    box = fig.legends[0].get_window_extent()
    covered = [*fig.axes, fig._suptitle, *(ax.title for ax in fig.axes)]
    assert not any(box.overlaps(a.get_window_extent()) for a in covered)
