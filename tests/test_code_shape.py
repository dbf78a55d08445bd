"""The size rules of docs/development.md: no class over 150 lines, no function over 50."""

from __future__ import annotations

import ast
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
LIMITS = {ast.ClassDef: 150, ast.FunctionDef: 50, ast.AsyncFunctionDef: 50}


def oversized(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        limit = LIMITS.get(type(node))
        if limit and node.end_lineno - node.lineno + 1 > limit:
            found.append(
                f"{path.relative_to(PROJECT)}:{node.lineno} {node.name} "
                f"({node.end_lineno - node.lineno + 1} lines, limit {limit})"
            )
    return found


def test_no_class_over_150_lines_and_no_function_over_50():
    sources = [
        p for folder in ("lakehouse", "jobs", "dags", "bench", "tests") for p in (PROJECT / folder).rglob("*.py")
    ]
    assert sources
    too_long = [entry for path in sorted(sources) for entry in oversized(path)]
    assert not too_long, "\n".join(too_long)
