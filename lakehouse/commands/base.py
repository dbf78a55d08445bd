"""What every command module shares: the shape of a command, the ``--pipeline`` option, the Spark
session and pipeline look-ups, and the outcomes that exit 1."""

from __future__ import annotations

import argparse
import getpass
import os
from collections.abc import Callable
from dataclasses import dataclass

from lakehouse.settings import Settings

# The pipeline `lakehouse generate` writes by default; other commands default to the project's first
# pipeline (lakehouse.ops.orchestration.default_pipeline), which is this one in the shipped examples.
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


def pipeline_option(command: argparse.ArgumentParser, **options) -> None:
    """``--pipeline``; left out, the project's default pipeline (filled in by ``lakehouse.cli.main``)."""
    command.add_argument("--pipeline", **({"default": None} | options))


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
