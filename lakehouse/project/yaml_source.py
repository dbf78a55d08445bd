"""A YAML file read with the line of every value, so that an error can name where it is."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from lakehouse.errors import LakehouseError

FieldPath = tuple[str | int, ...]


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with a project: the file, the line (1-based; 0 when none applies) and the field."""

    file: Path
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else str(self.file)
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class ProjectError(LakehouseError):
    """A project that does not validate: every problem found, one per line."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("the project is invalid:\n" + "\n".join(f"  {p}" for p in problems))


@dataclasses.dataclass(frozen=True)
class YamlSource:
    """A parsed YAML document: plain Python values, and the line each field path starts on."""

    path: Path
    data: Any
    lines: dict[FieldPath, int]

    def line(self, where: FieldPath) -> int:
        """The line of ``where``, or of its nearest parent the file spells."""
        while where and where not in self.lines:
            where = where[:-1]
        return self.lines.get(where, 1)

    def problem(self, where: FieldPath, message: str) -> Problem:
        return Problem(self.path, self.line(where), ".".join(str(part) for part in where), message)


def _plain(node: yaml.Node, where: FieldPath, lines: dict[FieldPath, int]) -> Any:
    lines[where] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        mapping = {}
        for key_node, value_node in node.value:
            key = _scalar(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str):
                raise _syntax_error(key_node, "keys are names (text)")
            if key in mapping:
                raise _syntax_error(key_node, f"{key!r} appears twice")
            mapping[key] = _plain(value_node, (*where, key), lines)
        return mapping
    if isinstance(node, yaml.SequenceNode):
        return [_plain(item, (*where, index), lines) for index, item in enumerate(node.value)]
    return _scalar(node)


def _scalar(node: yaml.Node) -> Any:
    return yaml.constructor.SafeConstructor().construct_object(node, deep=True)


class _SyntaxProblem(Exception):
    def __init__(self, line: int, message: str):
        self.line, self.message = line, message


def _syntax_error(node: yaml.Node, message: str) -> _SyntaxProblem:
    return _SyntaxProblem(node.start_mark.line + 1, message)


def read_yaml(path: Path) -> YamlSource:
    """``path`` parsed, or a :class:`ProjectError` naming the line YAML could not read."""
    try:
        node = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
        lines: dict[FieldPath, int] = {}
        data = {} if node is None else _plain(node, (), lines)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        raise ProjectError(
            [Problem(path, mark.line + 1 if mark else 0, "", f"not valid YAML: {error.problem}")]
        ) from None
    except _SyntaxProblem as error:
        raise ProjectError([Problem(path, error.line, "", error.message)]) from None
    return YamlSource(path, data, lines)
