"""Study-file text the tests share."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence


def digits_study(name: str, variants: Sequence[str], seeds: Sequence[int] = (0,), *, vary: Sequence[str] = (),
                 plugins: Sequence[str] = (), depth: int | None = None, steps: int = 1, batch_size: int = 8,
                 chance_band: float | None = 0) -> str:
    """A study of ``variants`` x ``seeds`` on digits, each run a step or two that measures nothing: what is under test
    is how sweeps, results folders and plugins handle the runs, not what they learn. ``chance_band`` 0 keeps a run
    that ends at chance ``ok``; None leaves the field at its default."""
    head = [f"name = {json.dumps(name)}"]
    head += [f"vary = {json.dumps(list(vary))}"] if vary else []
    head += [f"plugins = {json.dumps(list(plugins))}"] if plugins else []
    base = ['task = "digits"', f"steps = {steps}", f"batch_size = {batch_size}", "measure = []"]
    base += [f"chance_band = {chance_band}"] if chance_band is not None else []
    grid = [f"variant = {json.dumps(list(variants))}"] + ([f"depth = [{depth}]"] if depth is not None else [])
    return "\n".join([*head, "[base]", *base, "[grid]", *grid, f"seed = {json.dumps(list(seeds))}"]) + "\n"


def combinator_study(name: str = "tiny", seeds: Sequence[int] = (0,), *, batch_size: int = 16,
                     chance_band: float | None = 0) -> str:
    """Plain against ResNet at depth 8 for two steps on digits: a study that varies the combinator."""
    return digits_study(name, ("plain", "resnet"), seeds, vary=("combinator",), depth=8, steps=2,
                        batch_size=batch_size, chance_band=chance_band)


def beats_preln_claims(designs: Iterable[str]) -> str:
    """One ``[[claims]]`` table per design: it reaches a lower final validation loss than Pre-LN (by variant)."""
    return "".join(f'''
[[claims]]
id = "{d}-beats-preln"
paper = "P"
text = "t"
metric = "final_val_loss"
where = {{ variant = ["preln", "{d}"] }}
compare = "variant"
a = "preln"
b = "{d}"
expect = "less"
''' for d in designs)
