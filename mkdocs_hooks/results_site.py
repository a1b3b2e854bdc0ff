"""mkdocs hook: the documentation site carries the results site of the committed results, under ``results/``.

``mkdocs build`` (and ``tox -e lint``'s strict build) runs ``bench site --results-dir results`` into a temporary
folder and adds every file it wrote to the documentation's files, so that pages link to it (the findings page links
``results/index.html``) and ``--strict`` fails on a link to a page the results site does not have. The files are
copied as they are: mkdocs renders only Markdown pages, and an HTML file is a template only where ``extra_templates``
names it. Declared in ``mkdocs.yml`` (``hooks:``); building needs the package and its ``site`` extra installed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

from bench.reports.site import build_site

RESULTS = Path(__file__).resolve().parent.parent / "results"  # beside this folder
PREFIX = "results"  # the folder of the documentation site the results site lands in
_built: list[tempfile.TemporaryDirectory[str]] = []  # kept until the build ends: the files are copied from here


def on_files(files: Files, config: Any) -> Files:
    """Build the results site and add its files, each under ``results/``; a clash with a page of docs/ is an error."""
    tmp = tempfile.TemporaryDirectory(prefix="resbench-site-")
    _built.append(tmp)
    site = build_site(RESULTS, tmp.name).root
    for path in sorted(p for p in site.rglob("*") if p.is_file()):
        uri = f"{PREFIX}/{path.relative_to(site).as_posix()}"
        if files.get_file_from_path(uri) is not None:
            raise ValueError(f"docs/{uri} clashes with the results site's {uri}: rename one of them")
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_post_build(config: Any) -> None:
    """Remove the temporary copies once mkdocs has written the site."""
    while _built:
        _built.pop().cleanup()
