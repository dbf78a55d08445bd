"""The shipped pipelines, by name."""

from lakehouse.dataflow.pipelines.base import Dimension, Pipeline, WindowJoin
from lakehouse.dataflow.pipelines.team_scores import TEAM_SCORES, TEAM_SCORES_SESSIONS
from lakehouse.dataflow.pipelines.toll_traffic import (
    BRIDGES,
    TOLL_TRAFFIC,
    TOLL_TRAFFIC_5M,
    TOLL_TRAFFIC_BY_REGION,
    TOLL_TRAFFIC_BY_ZONE,
    TOLL_TRAFFIC_CORRECTED_CLOCKS,
    TOLL_TRIPS,
)
from lakehouse.dataflow.pipelines.weather import TOLL_WEATHER, ZONE_TEMPERATURES
from lakehouse.errors import LakehouseError

PIPELINES: dict[str, Pipeline] = {
    p.name: p
    for p in (
        TOLL_TRAFFIC,
        TOLL_TRAFFIC_5M,
        TOLL_TRIPS,
        TOLL_TRAFFIC_CORRECTED_CLOCKS,
        TOLL_TRAFFIC_BY_REGION,
        TOLL_TRAFFIC_BY_ZONE,
        ZONE_TEMPERATURES,
        TEAM_SCORES,
        TEAM_SCORES_SESSIONS,
    )
}


def get_pipeline(name: str) -> Pipeline:
    try:
        return PIPELINES[name]
    except KeyError:
        raise LakehouseError(f"unknown pipeline {name!r}; shipped pipelines: {', '.join(sorted(PIPELINES))}") from None


DIMENSIONS: dict[str, Dimension] = {d.name: d for d in (BRIDGES,)}


def get_dimension(name: str) -> Dimension:
    try:
        return DIMENSIONS[name]
    except KeyError:
        raise LakehouseError(f"unknown dimension {name!r}; dimensions: {', '.join(sorted(DIMENSIONS))}") from None


# Joins of two pipelines' windows, served as views over both sides' tables.
WINDOW_JOINS: dict[str, WindowJoin] = {j.name: j for j in (TOLL_WEATHER,)}
