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
