"""The size and documentation rules of docs/development.md: no class over 150 lines and no function
over 50 (docstrings aside), and public functions with more than three parameters document them."""

from __future__ import annotations

import ast
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
LIMITS = {ast.ClassDef: 150, ast.FunctionDef: 50, ast.AsyncFunctionDef: 50}
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _docstring_lines(node: ast.AST) -> set[int]:
    """The line numbers of every docstring inside ``node`` (its own and those of what it defines)."""
    lines: set[int] = set()
    for inner in ast.walk(node):
        if isinstance(inner, (ast.Module, ast.ClassDef, *FUNCTIONS)) and ast.get_docstring(inner) is not None:
            first = inner.body[0]
            lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def oversized(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        limit = LIMITS.get(type(node))
        if not limit:
            continue
        length = node.end_lineno - node.lineno + 1 - len(_docstring_lines(node))
        if length > limit:
            found.append(f"{path.relative_to(PROJECT)}:{node.lineno} {node.name} ({length} lines, limit {limit})")
    return found


def undocumented_parameters(path: Path) -> list[str]:
    """Public functions and methods with more than three parameters whose docstring does not name
    each of them in an ``Args:`` section."""
    found = []
    for scope in ast.walk(ast.parse(path.read_text())):
        if isinstance(scope, ast.ClassDef) and scope.name.startswith("_"):
            continue
        if not isinstance(scope, (ast.Module, ast.ClassDef)):
            continue
        for node in scope.body:
            if not isinstance(node, FUNCTIONS) or (node.name.startswith("_") and node.name != "__init__"):
                continue
            arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            names = [a.arg for a in arguments if a.arg not in ("self", "cls")]
            doc = ast.get_docstring(node) or ""
            args_section = doc.partition("Args:")[2]
            missing = [name for name in names if f"{name}:" not in args_section]
            if len(names) > 3 and missing:
                found.append(f"{path.relative_to(PROJECT)}:{node.lineno} {node.name}: {', '.join(missing)}")
    return found


def sources(*folders: str) -> list[Path]:
    found = sorted(p for folder in folders for p in (PROJECT / folder).rglob("*.py"))
    assert found
    return found


def test_no_class_over_150_lines_and_no_function_over_50():
    too_long = [entry for path in sources("lakehouse", "jobs", "dags", "bench", "tests") for entry in oversized(path)]
    assert not too_long, "\n".join(too_long)


def test_public_functions_with_more_than_three_parameters_document_each_in_args():
    undocumented = [entry for path in sources("lakehouse") for entry in undocumented_parameters(path)]
    assert not undocumented, "\n".join(undocumented)
