"""The documentation stays true to the code: the variant catalogue is the registry's, the README is a front page,
every page the site's navigation names exists, and the study-file reference covers every key the loader takes."""

from __future__ import annotations

import re
from pathlib import Path

import variants

ROOT = Path(__file__).resolve().parent.parent


def test_the_variant_catalogue_is_current() -> None:
    written = (ROOT / "docs" / "variants.md").read_text(encoding="utf-8")
    assert written == variants.catalogue(), "regenerate it: python -m bench list --catalogue > docs/variants.md"


def test_the_readme_is_a_front_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    assert not re.search(r"\bissue \d+|\b[0-9a-f]{7,40}\b(?<!\d{7})", readme.replace("-e py310", "")), \
        "user-facing text names no issue numbers or commit hashes"


def test_every_page_in_the_navigation_exists() -> None:
    nav = re.findall(r":\s+(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)
    assert nav and all((ROOT / "docs" / page).is_file() for page in nav)


def test_the_study_file_reference_names_every_key_the_loader_takes() -> None:
    from bench.analysis.claims import _FIELDS, TABLES
    from bench.analysis.options import OPTIONS
    from bench.sweeps.study import KEYS

    page = (ROOT / "docs" / "study-files.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([a-z_]+)`", page))
    claim_fields = {f for fields in _FIELDS.values() for f in fields}
    options = {o for kind in OPTIONS.values() for o in kind}
    missing = sorted((set(KEYS) | claim_fields | set(TABLES) | set(OPTIONS) | options) - named)
    assert not missing, f"docs/study-files.md does not describe {missing}"


# Extras for working on resbench rather than using it: its tests' tooling, the parity libraries, the browser tests.
DEVELOPMENT_EXTRAS = {"test", "dev", "parity", "browser"}


def test_the_install_sections_name_every_extra_a_command_needs() -> None:
    """Every optional extra of pyproject.toml is in the README's install section (the development ones aside: those
    are in CONTRIBUTING.md) and in the getting-started page's table of extras."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
                 ["optional-dependencies"])
    readme = (ROOT / "README.md").read_text(encoding="utf-8").split("## Install", 1)[1].split("\n## ", 1)[0]
    named = {extra for group in re.findall(r'\.\[([a-z,]+)\]', readme) for extra in group.split(",")}
    assert extras - DEVELOPMENT_EXTRAS <= named, f"the README's install names no {sorted(extras - named)}"
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    listed = set(re.findall(r'pip install -e "\.\[([a-z]+)\]"', page))
    assert extras - {"test"} <= listed, f"docs/getting-started.md lists no {sorted(extras - {'test'} - listed)}"
