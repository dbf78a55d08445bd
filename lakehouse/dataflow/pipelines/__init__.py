"""The shipped pipelines, by name."""

from lakehouse.dataflow.pipelines.base import Pipeline
from lakehouse.dataflow.pipelines.team_scores import TEAM_SCORES, TEAM_SCORES_SESSIONS
from lakehouse.dataflow.pipelines.toll_traffic import (
    TOLL_TRAFFIC,
    TOLL_TRAFFIC_5M,
    TOLL_TRAFFIC_CORRECTED_CLOCKS,
    TOLL_TRIPS,
)
from lakehouse.errors import LakehouseError

PIPELINES: dict[str, Pipeline] = {
    p.name: p
    for p in (
        TOLL_TRAFFIC,
        TOLL_TRAFFIC_5M,
        TOLL_TRIPS,
        TOLL_TRAFFIC_CORRECTED_CLOCKS,
        TEAM_SCORES,
        TEAM_SCORES_SESSIONS,
    )
}


def get_pipeline(name: str) -> Pipeline:
    try:
        return PIPELINES[name]
    except KeyError:
        raise LakehouseError(f"unknown pipeline {name!r}; shipped pipelines: {', '.join(sorted(PIPELINES))}") from None
