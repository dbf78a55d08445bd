"""The active project's pipelines, dimensions and windowed joins, by name (lakehouse.project).

The project is ``LAKEHOUSE_PROJECT`` (or ``--project``), the shipped examples when unset. Its
declarations are read again when a file of it changes, so a long-lived process sees a new pipeline.
"""

from __future__ import annotations

import dataclasses
import functools

from lakehouse.dataflow.pipelines import declared
from lakehouse.dataflow.pipelines.base import Dimension, Pipeline, WindowJoin
from lakehouse.errors import LakehouseError
from lakehouse.project.active import active_project
from lakehouse.project.project import Project

__all__ = ["Dimension", "Pipeline", "WindowJoin"]


@dataclasses.dataclass(frozen=True)
class Catalogue:
    """A project's declarations built for Spark."""

    pipelines: dict[str, Pipeline]
    dimensions: dict[str, Dimension]
    window_joins: dict[str, WindowJoin]


@functools.lru_cache(maxsize=8)
def _built(project: Project) -> Catalogue:
    pipelines = {name: declared.pipeline(spec, project) for name, spec in project.pipelines.items()}
    return Catalogue(
        pipelines=pipelines,
        dimensions={name: declared.dimension(spec) for name, spec in project.dimensions.items()},
        window_joins={name: declared.window_join(spec, pipelines) for name, spec in project.window_joins.items()},
    )


def catalogue() -> Catalogue:
    return _built(active_project())


def all_pipelines() -> dict[str, Pipeline]:
    return catalogue().pipelines


def all_dimensions() -> dict[str, Dimension]:
    return catalogue().dimensions


def all_window_joins() -> dict[str, WindowJoin]:
    return catalogue().window_joins


def get_pipeline(name: str) -> Pipeline:
    pipelines = all_pipelines()
    try:
        return pipelines[name]
    except KeyError:
        raise LakehouseError(
            f"unknown pipeline {name!r}; the project's pipelines: {', '.join(sorted(pipelines))}"
        ) from None


def get_dimension(name: str) -> Dimension:
    dimensions = all_dimensions()
    try:
        return dimensions[name]
    except KeyError:
        raise LakehouseError(f"unknown dimension {name!r}; dimensions: {', '.join(sorted(dimensions))}") from None
