"""The documentation a newcomer reads: short README, links that resolve, no references outside the
repository, and a CLI table that names every command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
DOCS = [PROJECT / "README.md", *sorted((PROJECT / "docs").glob("*.md")), PROJECT / "bench" / "README.md"]
LINK = re.compile(r"\]\(([^)#\s]+)?(?:#([^)\s]+))?\)")


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors for a file's headings: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", markdown, re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_the_readme_fits_in_200_lines():
    assert len((PROJECT / "README.md").read_text().splitlines()) <= 200


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(PROJECT)))
def test_every_relative_link_and_anchor_resolves(doc):
    for target, anchor in LINK.findall(doc.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        path = (doc.parent / target).resolve() if target else doc
        assert path.exists(), f"{doc.name} links to {target}, which does not exist"
        if anchor:
            assert anchor in anchors(path.read_text()), f"{doc.name} links to {target}#{anchor}: no such heading"


def test_nothing_points_outside_the_repository():
    tracked = [
        p
        for folder in ("lakehouse", "tests", "dags", "jobs", "bench", "docs", "scripts")
        for p in (PROJECT / folder).rglob("*")
        if p.suffix in {".py", ".md", ".sh"}
    ]
    # Every Markdown file a file names is one of the repository's own: the design doc is docs/design.md.
    documents = {p.name for p in [*tracked, PROJECT / "README.md"] if p.suffix == ".md"}
    for path in [*tracked, PROJECT / "README.md"]:
        if path == Path(__file__):
            continue
        text = path.read_text()
        for outside in ("../shared", "seeds/"):
            assert outside not in text, f"{path.relative_to(PROJECT)} refers to {outside}, outside the repository"
        named = {Path(name).name for name in re.findall(r"[\w./-]*\b[\w-]+\.md\b", text)}
        assert named <= documents, (
            f"{path.relative_to(PROJECT)} names {sorted(named - documents)}, not in the repository"
        )


def test_the_readme_command_table_names_every_cli_command():
    from lakehouse.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
    readme = (PROJECT / "README.md").read_text()
    missing = [name for name in commands if f"`lakehouse {name}" not in readme]
    assert not missing, f"README's command table lacks {missing}"
