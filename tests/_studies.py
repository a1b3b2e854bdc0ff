"""Study-file text the tests share."""

from __future__ import annotations

from collections.abc import Iterable


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
