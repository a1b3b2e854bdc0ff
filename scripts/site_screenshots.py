"""Screenshots of a built results site for the documentation: its index and one study's page, in headless Chromium.

    python -m bench site --results-dir results -o /tmp/site
    python scripts/site_screenshots.py /tmp/site --study crosslayer --out docs/img

Needs playwright (``pip install 'resbench[browser]'``) and a chromium executable (Debian's ``chromium`` package, or
``--chromium PATH``): Playwright is pointed at it, it downloads no browser of its own.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("site", type=Path, help="a folder `bench site` wrote")
    p.add_argument("--study", default="crosslayer", help="the study page to take (default: crosslayer)")
    p.add_argument("--out", type=Path, default=Path("docs/img"), help="where the PNGs go (default: docs/img)")
    p.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"),
                   help="the browser executable (default: chromium on PATH)")
    ns = p.parse_args(argv)
    pages = {"site-index.png": ns.site / "index.html", "site-study.png": ns.site / "study" / f"{ns.study}.html"}
    missing = [str(path) for path in pages.values() if not path.is_file()]
    if missing or not ns.chromium:
        print(f"error: {'no ' + ', '.join(missing) if missing else 'no chromium executable: pass --chromium'}",
              file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    ns.out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=ns.chromium)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        for name, path in pages.items():
            page.goto(path.resolve().as_uri())
            page.wait_for_load_state("load")
            page.screenshot(path=str(ns.out / name))
            print(ns.out / name)
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
