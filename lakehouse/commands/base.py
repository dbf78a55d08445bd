"""What every command module shares: the shape of a command, the ``--pipeline`` option, the Spark
session and pipeline look-ups, and the outcomes that exit 1."""

from __future__ import annotations

import argparse
import getpass
import os
from collections.abc import Callable
from dataclasses import dataclass

from lakehouse.errors import LakehouseError
from lakehouse.settings import Settings

# The pipeline `lakehouse generate` writes by default (it generates the shipped examples' events only);
# other commands default to the project's default pipeline (see chosen_pipeline).
DEFAULT_PIPELINE = "toll_traffic"


@dataclass(frozen=True)
class Command:
    """A subcommand: its name and help line, the options it adds to its parser, and what it runs
    with the parsed arguments and the settings."""

    name: str
    help: str
    run: Callable[[argparse.Namespace, Settings], None]
    options: Callable[[argparse.ArgumentParser], None]

    def add_to(self, commands) -> None:
        """Adds this command to the subparsers ``commands``; ``main`` calls ``args.run``."""
        parser = commands.add_parser(self.name, help=self.help)
        self.options(parser)
        parser.set_defaults(run=self.run)


class AuditFailed(Exception):
    """Differences no cause explains, or a failed expectation suite: the audit exits 1."""


class Unhealthy(Exception):
    """The speed layer is stale or falling behind, or the Spark service is down: the command exits 1."""


def pipeline_option(command: argparse.ArgumentParser, every: bool = False, **options) -> None:
    """``--pipeline``. Left out, a command that acts on one pipeline runs the project's default
    (``chosen_pipeline``, filled in by ``lakehouse.cli.main``); one that reads or fills across
    pipelines (``every``) covers each pipeline of the project, and finds ``args.pipeline`` None."""
    left_out = "every pipeline of the project" if every else "the project's default_pipeline, or its only pipeline"
    left_out = options.get("default") or left_out  # a command's own default (generate's)
    command.add_argument("--pipeline", **({"default": None, "help": f"default: {left_out}"} | options))
    command.set_defaults(every_pipeline=every)


def chosen_pipeline(settings: Settings) -> str:
    """The pipeline a command that acts on one runs when ``--pipeline`` is left out
    (``Project.default_pipeline``); a project of several pipelines that declares no default is
    refused, naming them."""
    from lakehouse.project.active import active_project

    project = active_project(settings)
    if project.default_pipeline is None:
        raise LakehouseError(
            f"the project has {len(project.pipelines)} pipelines ({', '.join(sorted(project.pipelines))}): "
            "name one with --pipeline, or declare default_pipeline in lakehouse.yaml"
        )
    return project.default_pipeline


def asked_pipelines(args: argparse.Namespace, settings: Settings) -> list[str]:
    """The pipeline ``--pipeline`` names, or every pipeline of the project when it is left out."""
    from lakehouse.project.active import active_project

    return [args.pipeline] if args.pipeline else sorted(active_project(settings).pipelines)


# Spark and the pipelines (which import pyspark) are imported when a command runs, not when the
# parser is built: `--help` and the commands that need no Spark start quickly.
def spark_session(settings: Settings, app: str):
    from lakehouse.storage.spark import build_spark_session

    return build_spark_session(settings, app)


def pipeline_named(name: str):
    from lakehouse.dataflow.pipelines import get_pipeline

    return get_pipeline(name)


def os_user() -> str:
    """Who runs the command, for the records that name who asked. A container may run under a user id
    with no name (no passwd entry, no USER variable), where getpass raises."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"
