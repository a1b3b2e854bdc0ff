"""The options of each analysis (``lesion``, ``gradcorr``, ``landscape``, ``cost``): their types and defaults, shared by
study files' ``[analysis]`` tables and the commands of the same names, and their validation.

This module imports nothing but the standard library: the command line's parser reads the defaults from here.
"""

from __future__ import annotations

from typing import Any

# Per kind: option -> (type of the value or of each list element, is it a list, default). Studies and commands
# share these defaults.
OPTIONS: dict[str, dict[str, tuple[type, bool, Any]]] = {
    "lesion": {"drop": (int, True, [1, 2, 4, 8, 16]), "draws": (int, False, 10), "batch_size": (int, False, 256),
               "seed": (int, False, 0)},
    "gradcorr": {"variants": (str, True, ["plain", "resnet", "preact"]), "depths": (int, True, [20, 56, 110]),
                 "seeds": (int, True, [0]), "task": (str, False, "digits"), "points": (int, False, 256),
                 "span": (float, False, 1.0), "max_lag": (int, False, 32)},
    "landscape": {"dims": (int, True, [1]), "points": (int, False, 21), "span": (float, False, 1.0),
                  "samples": (int, False, 512), "seed": (int, False, 0), "batch_size": (int, False, 256)},
    # bench.runs.cost.overhead_rounds: designs against their family's baseline at a reference shape, per timed round
    "cost": {"designs": (str, True, ["mhc"]), "shape": (str, False, "gpt2_small"), "repeats": (int, False, 3),
             "modes": (str, True, ["eager"])},
}
# The fields of a run that identify it in an analysis's tables (and that claims filter on).
RUN_FIELDS = ("run_id", "variant", "depth", "task", "seed", "study", "init")


def check_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` (with ``kind``) validated and completed with the defaults; ValueError naming the problem."""
    kind = options.get("kind")
    if kind not in OPTIONS:
        raise ValueError(f"unknown analysis kind {kind!r}; kinds: {', '.join(OPTIONS)}")
    spec = OPTIONS[kind]
    unknown = sorted(set(options) - {"kind", *spec})
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for analysis {kind!r}; options: {', '.join(spec)}")
    out: dict[str, Any] = {"kind": kind}
    for name, (typ, is_list, default) in spec.items():
        value = options.get(name, default)
        items = value if is_list else [value]
        ok = isinstance(items, list) and bool(items) and all(_is(v, typ) for v in items)
        if not ok:
            what = f"a non-empty list of {typ.__name__}" if is_list else f"a{'n' if typ is int else ''} {typ.__name__}"
            raise ValueError(f"analysis {kind!r}: {name} must be {what}, got {value!r}")
        if typ is not str and any(v <= 0 for v in items) and name != "seed" and name != "seeds":
            raise ValueError(f"analysis {kind!r}: {name} must be > 0, got {value!r}")
        out[name] = list(value) if is_list else value
    return out


def _is(value: Any, typ: type) -> bool:
    """``value`` is of ``typ`` (an int counts as a float; a bool is neither)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, typ) or (typ is float and isinstance(value, int))
