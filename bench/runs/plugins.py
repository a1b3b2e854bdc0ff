"""Plugins: residual designs defined outside resbench, run by every command as the shipped ones are.

A plugin is Python code that registers variants through the public API (``variants.register``,
``variants.register_preset``) when it is loaded. A *spec* names one:

- ``path/to/file.py`` (any spec ending in ``.py`` or containing a path separator): the file is imported
  as a module of its own;
- ``some.module``: imported from ``sys.path`` (``PYTHONPATH``, or an installed package);
- ``some.module:function``: imported, then ``function()`` is called with no arguments (any callable
  attribute; a non-callable one is only looked up) — the form of an entry point's value.

The command line (``bench.cli.main``) loads, in this order: the entry points of group
``resbench.variants`` of every installed distribution (``[project.entry-points."resbench.variants"]`` in
its ``pyproject.toml``; each value is a spec as above: a module is imported, a ``module:function`` is
imported and called), then the specs of ``$RESBENCH_PLUGINS`` (separated by ``os.pathsep``), then each
``--plugin SPEC``. Loading one spec twice in a process (``--plugin`` and the environment, a test that
loads a file again) returns the plugin already loaded: specs are keyed by their resolved source file.

A plugin that cannot be imported, registers a name some variant already has, or registers nothing raises
``ValueError("plugin '<spec>' ...: <cause>")`` and leaves no variant of its own registered. Before a run,
a variant a plugin registered is checked with one forward (and loss) on a real batch of the run's task
(:func:`check_forward`), so a model that does not fit the task's shapes fails as bad input, before
anything is written. Every run JSON lists the loaded plugins (:meth:`Plugin.record`: spec, source file,
its sha256 at load time, the variants it registered), so a row says which code produced it.

:func:`load_plugins` is a plain function: a process that runs configs elsewhere (a subprocess executor)
reloads the recorded plugins with ``load_plugins([p["reload"] for p in run_json["plugins"]])``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
import traceback
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import variants
from bench.runs.config import PLUGIN_ENTRY_POINTS as ENTRY_POINT_GROUP
from bench.runs.config import PLUGINS_ENV_VAR as ENV_VAR

FORWARD_CHECK_BATCH = 2  # samples in the forward check: enough for BatchNorm statistics, cheap at any depth


@dataclass(frozen=True)
class Plugin:
    """One loaded plugin."""

    spec: str  # as the user gave it: a path, a module name, or module:function
    kind: str  # "file" or "module"
    origin: str  # where the spec came from: "--plugin", "RESBENCH_PLUGINS", "entry point ...", "python"
    module: str  # the module it was imported as (what its builders' ``__module__`` says)
    file: str  # its source file, resolved
    sha256: str  # of that file's bytes when it was loaded
    variants: tuple[str, ...]  # the names it registered
    axis_values: tuple[tuple[str, str], ...] = ()  # the (axis, name) values it registered: a norm, an init ...

    @property
    def reload(self) -> str:
        """A spec that loads this plugin again from any working directory (the file's absolute path)."""
        return self.file if self.kind == "file" else self.spec

    def record(self) -> dict[str, Any]:
        """What a run JSON stores of this plugin."""
        return {"spec": self.spec, "reload": self.reload, "kind": self.kind, "origin": self.origin,
                "module": self.module, "file": self.file, "sha256": self.sha256, "variants": list(self.variants),
                "axis_values": [list(v) for v in self.axis_values]}


@dataclass(frozen=True)
class _Loaded:
    plugin: Plugin
    owns_module: bool  # imported by us: removed from sys.modules on unload


_LOADED: dict[str, _Loaded] = {}  # key: resolved source file (+ ":function"), in load order


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_line(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _cause(exc: BaseException, file: str | None) -> str:
    """``Type: message`` and, where the traceback passes through the plugin's file, ``(file.py:line)``."""
    where = ""
    if file is not None and not isinstance(exc, SyntaxError):  # a SyntaxError's message names its line
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == file]
        if frames:
            where = f" ({Path(file).name}:{frames[-1].lineno})"
    return _one_line(f"{type(exc).__name__}: {exc}") + where


def _label(spec: str, origin: str) -> str:
    return f"plugin {spec!r}" + ("" if origin in ("--plugin", "python") else f" (from {origin})")


def plugin_of(variant: str) -> Plugin | None:
    """The loaded plugin that registered ``variant``, or None (a shipped variant, or an unknown name)."""
    for entry in _LOADED.values():
        if variant in entry.plugin.variants:
            return entry.plugin
    return None


def loaded() -> list[Plugin]:
    """Every plugin loaded in this process, in load order."""
    return [e.plugin for e in _LOADED.values()]


def _duplicate_message(label: str, exc: variants.DuplicateVariantError, own_module: str) -> str:
    other = plugin_of(exc.name)
    if other is not None:
        who = f"plugin {other.spec!r} ({other.file}) already registered"
        fix = "rename one of them"
    elif exc.owner == own_module:
        who, fix = "this plugin already registered", "register each name once"
    elif exc.owner.split(".")[0] == "variants":
        who, fix = f"resbench's own variant {exc.name!r} ({exc.owner}) already has", "pick another name"
    else:
        who, fix = f"module {exc.owner} already registered", "pick another name"
    return f"{label} registers variant {exc.name!r}, which {who}; {fix}"


def _find_duplicate(exc: BaseException) -> variants.DuplicateVariantError | None:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, variants.DuplicateVariantError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _rollback(before: set[str], axes_before: set[tuple[str, str]]) -> None:
    for name in sorted(set(variants.list_variants()) - before):
        if name in variants.list_variants():  # a root's presets went with it
            variants.unregister(name)
    for axis, name in sorted(set(variants.registered_axis_values()) - axes_before):
        variants.unregister_axis_value(axis, name)


def _resolve(spec: str) -> tuple[str, str, Path, str]:
    """``(kind, module name, source file, key)`` of a spec, without importing it."""
    if spec.endswith(".py") or os.sep in spec or (os.altsep and os.altsep in spec):
        path = Path(spec).expanduser().resolve()
        if not path.is_file():
            raise ValueError(f"plugin {spec!r}: no such file {path}")
        digest = hashlib.sha256(str(path).encode()).hexdigest()[:8]
        stem = re.sub(r"\W", "_", path.stem)
        return "file", f"resbench_plugin_{stem}_{digest}", path, str(path)
    name, _, attr = spec.partition(":")
    if not name or not all(part.isidentifier() for part in name.split(".")) or (
        attr and not all(part.isidentifier() for part in attr.split("."))
    ):
        raise ValueError(f"plugin {spec!r}: not a Python file (FILE.py), a module name or module:function")
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:  # a parent package that is missing or fails to import
        raise ValueError(f"plugin {spec!r}: cannot import it: {_cause(exc, None)}") from None
    if found is None:
        raise ValueError(f"plugin {spec!r}: no module named {name!r} (is its directory on PYTHONPATH, "
                         "or its package installed?); a file is given as PATH.py")
    if not found.origin or not Path(found.origin).is_file():
        raise ValueError(f"plugin {spec!r}: module {name!r} has no source file (a namespace package?)")
    path = Path(found.origin).resolve()
    return "module", name, path, f"{path}:{attr}" if attr else str(path)


def _load_one(spec: str, origin: str) -> Plugin:
    kind, module_name, path, key = _resolve(spec)
    if key in _LOADED:
        return _LOADED[key].plugin
    label = _label(spec, origin)
    sha = _sha256(path)
    before, axes_before = set(variants.list_variants()), set(variants.registered_axis_values())
    imported_before = module_name in sys.modules
    try:
        if kind == "file":
            mspec = importlib.util.spec_from_file_location(module_name, path)
            if mspec is None or mspec.loader is None:
                raise ValueError(f"{label}: {path} cannot be loaded as a Python module")
            module = importlib.util.module_from_spec(mspec)
            sys.modules[module_name] = module  # dataclasses and pickling look their module up here
            mspec.loader.exec_module(module)
        else:
            obj: Any = importlib.import_module(module_name)
            for part in filter(None, spec.partition(":")[2].split(".")):
                obj = getattr(obj, part)
            if obj is not sys.modules[module_name] and callable(obj):
                obj()
    except Exception as exc:
        _rollback(before, axes_before)
        if not imported_before:
            sys.modules.pop(module_name, None)
        dup = _find_duplicate(exc)
        if dup is not None:
            raise ValueError(_duplicate_message(label, dup, module_name)) from None
        if isinstance(exc, ValueError) and str(exc).startswith(label):
            raise
        raise ValueError(f"{label} failed to load: {_cause(exc, str(path))}") from None
    added = sorted(set(variants.list_variants()) - before)
    added_axes = sorted(set(variants.registered_axis_values()) - axes_before)
    if not added and not added_axes and imported_before:  # imported earlier (by the user's own code)
        added = [n for n in variants.list_variants() if variants.describe(n)["module"] == module_name]
        added_axes = variants.registered_axis_values(module=module_name)
    if not added and not added_axes:
        _rollback(before, axes_before)
        if not imported_before:
            sys.modules.pop(module_name, None)
        raise ValueError(f"{label} registered nothing: it must call variants.register(...) (a variant) or "
                         "variants.register_norm(...) / register_ffn / register_init / register_combinator (a value "
                         "of an axis) when loaded (or name a function that does: module:function)")
    plugin = Plugin(spec, kind, origin, module_name, str(path), sha, tuple(added), tuple(added_axes))
    _LOADED[key] = _Loaded(plugin, owns_module=not imported_before)
    return plugin


def load_plugins(specs: Iterable[str], origin: str = "python") -> list[Plugin]:
    """Load every spec (see the module docstring), in order; one already loaded is not loaded again.

    Raises ValueError naming the plugin and the cause; the plugins of ``specs`` loaded before the failing
    one stay loaded.
    """
    out: list[Plugin] = []
    for spec in specs:
        spec = spec.strip()
        if spec:
            plugin = _load_one(spec, origin)
            if plugin not in out:
                out.append(plugin)
    return out


def env_specs(environ: Mapping[str, str] | None = None) -> list[str]:
    """The specs of ``$RESBENCH_PLUGINS`` (``os.pathsep``-separated; empty entries ignored)."""
    raw = (os.environ if environ is None else environ).get(ENV_VAR, "")
    return [s for s in raw.split(os.pathsep) if s.strip()]


def load_entry_points() -> list[Plugin]:
    """Load the entry points of group ``resbench.variants`` of every installed distribution."""
    out = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        where = f"entry point {ep.name!r}" + (f" of {dist.metadata['Name']} {dist.version}" if dist else "")
        plugin = _load_one(f"{ep.module}:{ep.attr}" if ep.attr else ep.module, where)
        if plugin not in out:
            out.append(plugin)
    return out


def load_all(specs: Iterable[str] = ()) -> list[Plugin]:
    """What the command line loads: installed entry points, then ``$RESBENCH_PLUGINS``, then ``specs``."""
    out = load_entry_points()
    for plugin in [*load_plugins(env_specs(), ENV_VAR), *load_plugins(specs, "--plugin")]:
        if plugin not in out:
            out.append(plugin)
    return out


def unload(plugin: Plugin) -> None:
    """Unregister ``plugin``'s variants and axis values and forget it (a later load imports its file again)."""
    for key, entry in list(_LOADED.items()):
        if entry.plugin == plugin:
            for name in plugin.variants:
                if name in variants.list_variants():
                    variants.unregister(name)
            for axis, name in plugin.axis_values:
                if (axis, name) in variants.registered_axis_values():
                    variants.unregister_axis_value(axis, name)
            if entry.owns_module:
                sys.modules.pop(plugin.module, None)
            del _LOADED[key]


def unload_all() -> None:
    for plugin in reversed(loaded()):
        unload(plugin)


@contextlib.contextmanager
def blame(*names: str) -> Iterator[None]:
    """Turn an exception raised in a plugin's code (or building one of ``names``) into a ValueError naming it.

    ValueErrors pass unchanged: they are the builders' own messages about bad input (a depth rule).
    """
    try:
        yield
    except ValueError:
        raise
    except Exception as exc:
        files = {p.file: p for p in loaded()}
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in files]
        owners = [p for p in (plugin_of(n) for n in names) if p is not None]
        plugin = files[frames[-1].filename] if frames else owners[0] if len(owners) == 1 else None
        if plugin is None:
            raise
        raise ValueError(f"{_label(plugin.spec, plugin.origin)}: {_cause(exc, plugin.file)}") from None


def check_forward(variant: str, model: Any, task: Any) -> None:
    """One forward and loss of a plugin's ``variant`` on a real batch of ``task``; ValueError if it fails.

    Shipped variants are skipped (their tests cover every task kind). The model runs in eval mode under
    ``no_grad`` with the random state forked, so BatchNorm statistics, dropout masks and the run's random
    stream are exactly what they would be without the check.
    """
    plugin = plugin_of(variant)
    if plugin is None:
        return
    x, y = next(iter(task.train_eval_batches(FORWARD_CHECK_BATCH)))
    device = x.device
    was_training = model.training
    shape = tuple(x.shape)
    try:
        cuda = [device.index if device.index is not None else torch.cuda.current_device()] \
            if device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda), torch.no_grad():
            model.eval()
            task.loss(model(x), y)  # a wrong output shape (classes, vocabulary) fails here
    except Exception as exc:
        raise ValueError(
            f"{_label(plugin.spec, plugin.origin)}: variant {variant!r} fails a forward on a batch of task "
            f"{task.name!r} (input shape {shape}, {task.model_kwargs}): {_cause(exc, plugin.file)}"
        ) from None
    finally:
        model.train(was_training)
