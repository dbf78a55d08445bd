"""Typed reads of a YAML mapping that record a problem, with its line, instead of stopping at the
first: ``lakehouse check`` reports everything wrong with a project at once."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any, TypeVar

from lakehouse.errors import LakehouseError
from lakehouse.eventtime import parse_duration
from lakehouse.project.yaml_source import FieldPath, Problem, YamlSource
from lakehouse.vocabulary import choices

# Names become table and column names: letters, digits and underscores, not starting with a digit.
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TABLE_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
E = TypeVar("E", bound=StrEnum)


class Reader:
    """Reads values out of one file's data, each by its field path."""

    def __init__(self, source: YamlSource, problems: list[Problem]):
        self.source, self.problems = source, problems

    def report(self, where: FieldPath, message: str) -> None:
        self.problems.append(self.source.problem(where, message))

    def value(self, data: Any, where: FieldPath) -> Any:
        for part in where:
            if not isinstance(data, dict | list):
                return None
            data = data.get(part) if isinstance(data, dict) else (data[part] if part < len(data) else None)
        return data

    def mapping(self, value: Any, where: FieldPath, required: bool = False) -> dict:
        if value is None and not required:
            return {}
        if not isinstance(value, dict):
            self.report(where, "is required, a mapping of names to values" if value is None else "must be a mapping")
            return {}
        return value

    def text(self, value: Any, where: FieldPath, default: str | None = None) -> str | None:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, str | int):
            self.report(where, f"must be text, not {type(value).__name__}")
            return default
        return str(value)

    def name(self, value: Any, where: FieldPath, pattern: re.Pattern = NAME) -> str | None:
        text = self.text(value, where)
        if text is None:
            self.report(where, "is required")
        elif not pattern.match(text):
            self.report(where, f"{text!r} is not a name: use letters, digits and underscores ({pattern.pattern})")
            return None
        return text

    def names(self, value: Any, where: FieldPath) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            self.report(where, "must be a list of names")
            return ()
        return tuple(n for i, item in enumerate(value) if (n := self.name(item, (*where, i))) is not None)

    def duration(self, value: Any, where: FieldPath, default: str | None = None) -> str | None:
        text = self.text(value, where)
        if text is None:
            return default
        try:
            parse_duration(text)
        except LakehouseError as error:
            self.report(where, str(error))
            return default
        return text

    def choice(self, value: Any, where: FieldPath, vocabulary: type[E]) -> E | None:
        try:
            return vocabulary(value)
        except ValueError:
            self.report(where, f"unknown kind {value!r}; kinds: {', '.join(choices(vocabulary))}")
            return None

    def unknown_keys(self, data: dict, where: FieldPath, known: tuple[str, ...]) -> None:
        for key in data:
            if key not in known:
                self.report((*where, key), f"unknown setting; settings here: {', '.join(known)}")
