"""The shipped pipelines, by name."""

from lakehouse.errors import LakehouseError
from lakehouse.pipelines.base import Pipeline
from lakehouse.pipelines.toll_traffic import TOLL_TRAFFIC

PIPELINES: dict[str, Pipeline] = {p.name: p for p in (TOLL_TRAFFIC,)}


def get_pipeline(name: str) -> Pipeline:
    try:
        return PIPELINES[name]
    except KeyError:
        raise LakehouseError(f"unknown pipeline {name!r}; shipped pipelines: {', '.join(sorted(PIPELINES))}") from None
