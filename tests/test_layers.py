"""The harness's layers (docs/architecture.md): imports point only down, siblings do not import each other, and
the command line's parser loads no implementation. Each check imports in a fresh interpreter and reads
``sys.modules``, so an import hidden inside a function that runs at import time is caught as well."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Bottom to top; a package may import the ones before it, never the ones after (nor its siblings on one level).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("bench.runs",),
    ("bench.analysis",),
    ("bench.sweeps", "bench.reports"),
    ("bench.api",),  # the Python API; the command line is a thin layer over it
    ("bench.cli",),
)


def _modules(package: str) -> list[str]:
    """Every module of ``package`` (a package directory or a module file)."""
    path = ROOT / package.replace(".", "/")
    if path.with_suffix(".py").is_file():
        return [package]
    return sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts[:-1] if p.name == "__init__.py"
                 else p.relative_to(ROOT).with_suffix("").parts)
        for p in path.rglob("*.py")
    )


def _imported_after(modules: list[str]) -> set[str]:
    """The modules loaded in a fresh interpreter after importing ``modules``."""
    code = f"import importlib, json, sys\nfor m in {modules!r}:\n    importlib.import_module(m)\n" \
           "print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _layer_of(module: str) -> tuple[int, str] | None:
    for level, packages in enumerate(LAYERS):
        for package in packages:
            if module == package or module.startswith(package + "."):
                return level, package
    return None


@pytest.mark.slow  # a fresh interpreter importing everything, per layer: about 20 s each
@pytest.mark.parametrize("package", [p for layer in LAYERS for p in layer])
def test_a_layer_imports_only_the_layers_below_it(package: str) -> None:
    level, _ = _layer_of(package)  # type: ignore[misc]
    loaded = _imported_after(_modules(package))
    above = sorted(m for m in loaded if (found := _layer_of(m)) is not None and found[0] >= level
                   and found[1] != package)
    assert not above, f"importing {package} loads {above}, which {package} must not depend on"


@pytest.mark.slow  # a fresh interpreter: about 15 s
def test_the_registry_never_imports_the_harness() -> None:
    loaded = _imported_after(["variants"])
    assert not [m for m in loaded if m == "bench" or m.startswith("bench.")]


def test_the_command_line_answers_help_without_loading_torch() -> None:
    loaded = _imported_after(["bench", "bench.cli", "bench.cli.parser", "bench.__main__".replace(".__main__", "")])
    assert "torch" not in loaded and "pandas" not in loaded
    done = subprocess.run([sys.executable, "-m", "bench", "sweep", "--help"], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 0 and "--add-variant" in done.stdout and "--jobs" in done.stdout


def test_no_import_of_resbench_hides_inside_a_function() -> None:
    """An import inside a function is for an optional heavy extra (and says so), never to dodge a cycle."""
    hidden = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in ast.walk(fn):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [("." * node.level) + (node.module or "")] if isinstance(node, ast.ImportFrom) else []
                ours = [n for n in names if n.startswith((".", "bench", "variants"))]
                if ours:
                    hidden.append(f"{path.relative_to(ROOT)}:{node.lineno}: {', '.join(ours)}")
    assert not hidden, "\n".join(hidden)
