"""GX Data Docs that read offline: the site's CDN links point at copies inside the site.

GX's page templates load Bootstrap, jQuery, bootstrap-table, Font Awesome and Vega from CDNs, so
a site opened without a network (an archived audit, an air-gapped host) renders bare. After each
build, :func:`localize` copies the same files (``docs_assets/``, taken from the npm packages named
in ``ASSETS``) into ``<site>/static/vendor/``, writes a Vega bundle from vl-convert (the library
that draws the audit report's charts), and rewrites every page's links to those copies.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

ASSET_DIR = Path(__file__).parent / "docs_assets"
VENDOR = Path("static") / "vendor"
VEGA_BUNDLE = "vega-bundle.js"
# The Vega-Lite major GX's templates load (vega-lite@5).
VEGA_LITE_VERSION = "v5.20"

# CDN address in GX 1.x's templates -> the copy in docs_assets/ (the npm package it comes from).
ASSETS = {
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": "bootstrap.min.css",  # bootstrap@4.3.1
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": "bootstrap.min.js",
    "https://code.jquery.com/jquery-3.7.1.min.js": "jquery.min.js",  # jquery@3.7.1
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": "popper.min.js",  # popper.js@1.12.9
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js": "bootstrap-table.min.js",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css": "bootstrap-table.min.css",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js": (
        "bootstrap-table-filter-control.min.js"
    ),
    # Two spellings of bootstrap-table@1.19.0's filter-control stylesheet: the minified file serves both.
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css": (
        "bootstrap-table-filter-control.min.css"
    ),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css": (
        "bootstrap-table-filter-control.min.css"
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js": (
        "bootstrap-datepicker.min.js"
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css": (
        "bootstrap-datepicker.min.css"
    ),
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css": (
        "bootstrap-prefers-dark.min.css"
    ),
    # @fortawesome/fontawesome-free@6.6.0; its stylesheet finds the fonts at ../webfonts/.
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css": "css/fontawesome-all.min.css",
    # Vega, Vega-Lite and vega-embed: one bundle defines all three globals (_SAME_BUNDLE drops the other two tags).
    "https://cdn.jsdelivr.net/npm/vega@5": VEGA_BUNDLE,
}
_SAME_BUNDLE = re.compile(r'<script src="https://cdn\.jsdelivr\.net/npm/(vega-lite@5|vega-embed@6)"></script>\n?')
# GX's logos come from its S3 bucket (with a tracking query); the wheel ships the long logo.
_LOGO = re.compile(r"https://great-expectations-web-assets\.s3\.us-east-2\.amazonaws\.com/[\w.-]+(\?[^\"')\s]*)?")
_LOCAL_LOGO = Path("static") / "images" / "logo-long.png"
_CDN = re.compile("|".join(re.escape(url) for url in sorted(ASSETS, key=len, reverse=True)))
# A file:// page cannot make the CORS request these attributes ask for, so the copies load without them.
_INTEGRITY = re.compile(r'\s+integrity="[^"]*"\s+crossorigin="anonymous"')


def copy_assets(site: Path) -> Path:
    """The vendored files and the Vega bundle in ``<site>/static/vendor``, written once per site."""
    vendor = site / VENDOR
    shutil.copytree(ASSET_DIR, vendor, dirs_exist_ok=True)
    bundle = vendor / VEGA_BUNDLE
    if not bundle.exists():
        import vl_convert

        bundle.write_text(vl_convert.javascript_bundle(vl_version=VEGA_LITE_VERSION))
    return vendor


def rewrite_page(page: str, to_site: str) -> str:
    """A page's CDN and S3 links replaced by paths into the site; ``to_site`` leads from the page to it.

    Args:
        page: the page's HTML as GX wrote it.
        to_site: the relative path from the page's folder to the site's root ("." for the index).
    """
    page = _SAME_BUNDLE.sub("", page)
    page = _CDN.sub(lambda m: f"{to_site}/{(VENDOR / ASSETS[m.group(0)]).as_posix()}", page)
    page = _LOGO.sub(f"{to_site}/{_LOCAL_LOGO.as_posix()}", page)
    return _INTEGRITY.sub("", page)


def localize(site: Path, written_since: float | None = None) -> int:
    """Make the pages of the Data Docs site at ``site`` read offline: every page, or those written at
    or after ``written_since`` (epoch seconds: a build's pages); returns how many it rewrote."""
    copy_assets(site)
    pages = 0
    for path in site.rglob("*.html"):
        if VENDOR.as_posix() in path.relative_to(site).as_posix():
            continue
        if written_since is not None and path.stat().st_mtime < written_since:
            continue
        to_site = Path(os.path.relpath(site, path.parent)).as_posix()
        text = path.read_text()
        rewritten = rewrite_page(text, to_site)
        if rewritten != text:
            path.write_text(rewritten)
            pages += 1
    return pages
