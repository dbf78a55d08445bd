"""The project file, ``lakehouse.yaml``: the project's name, its versioned dimensions and the
windowed joins of its pipelines (docs/pipelines.md)."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from lakehouse.project.declarations import BandSpec, DimensionSpec, PipelineSpec, WindowJoinSpec
from lakehouse.project.reader import TABLE_NAME, Reader
from lakehouse.project.yaml_source import FieldPath

PROJECT_SETTINGS = ("name", "description", "default_pipeline", "dimensions", "window_joins")
JOIN_SETTINGS = (
    "description",
    "events",
    "readings",
    "key",
    "reading_sum",
    "reading_count",
    "measure",
    "neighbours",
    "bands",
)


def read_dimensions(reader: Reader, data: dict) -> dict[str, DimensionSpec]:
    dimensions = {}
    for name, value in reader.mapping(data.get("dimensions"), ("dimensions",)).items():
        where = ("dimensions", name)
        declared = reader.mapping(value, where, required=True)
        reader.unknown_keys(declared, where, ("key", "attributes"))
        key = reader.name(declared.get("key"), (*where, "key"))
        attributes = reader.names(declared.get("attributes", []), (*where, "attributes"))
        if reader.name(name, where, TABLE_NAME) and key and attributes:
            dimensions[name] = DimensionSpec(name, key, attributes)
    return dimensions


def _bands(reader: Reader, value: Any, where: FieldPath) -> tuple[BandSpec, ...]:
    bands = []
    for index, band in enumerate(value if isinstance(value, list) else []):
        declared = reader.mapping(band, (*where, index), required=True)
        below = declared.get("below")
        try:
            bound = None if below is None else Decimal(str(below))
        except InvalidOperation:
            reader.report((*where, index, "below"), f"{below!r} is not a number")
            continue
        bands.append(BandSpec(str(declared.get("name")), bound))
    bounds = [band.below for band in bands]
    if None in bounds[:-1] or bounds[:-1] != sorted(bounds[:-1]) or (bands and bounds[-1] is not None):
        reader.report(where, "bands rise, each below a bound, and the last has none")
    return tuple(bands)


def read_window_join(reader: Reader, name: str, value: Any) -> WindowJoinSpec | None:
    where = ("window_joins", name)
    declared = reader.mapping(value, where, required=True)
    reader.unknown_keys(declared, where, JOIN_SETTINGS)
    names = {k: reader.name(declared.get(k), (*where, k)) for k in JOIN_SETTINGS[1:7]}
    neighbours = reader.mapping(declared.get("neighbours"), (*where, "neighbours"), required=True)
    near = tuple((str(k), reader.names(v, (*where, "neighbours", k))) for k, v in neighbours.items())
    bands = _bands(reader, declared.get("bands"), (*where, "bands"))
    if None in names.values() or not reader.name(name, where, TABLE_NAME):
        return None
    description = reader.text(declared.get("description"), (*where, "description"), "")
    return WindowJoinSpec(name=name, description=description, neighbours=near, bands=bands, **names)


def check_window_join(reader: Reader, join: WindowJoinSpec, pipelines: dict[str, PipelineSpec]) -> None:
    where = ("window_joins", join.name)
    sides = {side: pipelines.get(getattr(join, side)) for side in ("events", "readings")}
    for side, pipeline in sides.items():
        if pipeline is None:
            reader.report((*where, side), f"{getattr(join, side)!r} is not a pipeline of this project")
        elif pipeline.keys != (join.key,):
            reader.report((*where, "key"), f"both sides are keyed by {join.key} alone; {pipeline.name} is not")
    events, readings = sides["events"], sides["readings"]
    if events and readings and events.window != readings.window:
        reader.report(where, "both sides of a windowed join have the same windows")
    metrics = {m.name for m in readings.metrics} if readings else set()
    for setting in ("reading_sum", "reading_count"):
        if readings and getattr(join, setting) not in metrics:
            reader.report((*where, setting), f"{getattr(join, setting)!r} is not a metric of {readings.name}")


def read_default_pipeline(reader: Reader, data: dict, pipelines: dict[str, PipelineSpec]) -> str | None:
    """The pipeline ``lakehouse.yaml`` names as its ``default_pipeline``, if it names one of the project's."""
    if data.get("default_pipeline") is None:
        return None
    name = reader.name(data["default_pipeline"], ("default_pipeline",))
    if name is not None and name not in pipelines:
        reader.report(("default_pipeline",), f"{name!r} is not a pipeline of this project")
        return None
    return name
