"""The ``lakehouse`` command line: a project's pipelines (init, check, ingest), the layers (stream,
backfill, correct, replay), reading them (sql, status, audit, health) and the services."""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
import traceback
from typing import NoReturn

from lakehouse.commands import layers, log, maintenance, project, reading, services
from lakehouse.commands.base import AuditFailed, Unhealthy, chosen_pipeline
from lakehouse.errors import ExitCode, LakehouseError
from lakehouse.settings import Settings
from lakehouse.storage.spark import release_connect_session

# The order `lakehouse --help` has always listed the commands in, whichever module adds each; a command
# missing here fails build_parser.
ORDER = (
    "init",
    "check",
    "ingest",
    "stale",
    "generate",
    "stream",
    "backfill",
    "sql",
    "status",
    "audit",
    "correct",
    "replay",
    "plan-backfill",
    "repair",
    "maintain",
    "health",
    "demo",
    "serve",
    "users",
    "dim",
    "archive",
    "cluster",
    "kafka",
    "s3",
    "prometheus",
    "alertmanager",
    "hosts",
)


# Built once a process (8-10 ms, most of it argparse's gettext lookups), and once for every Airflow
# task the platform's executor forks (lakehouse.ops.local_executor): no option depends on the
# environment or the project, so one parser parses every command line.
@functools.cache
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakehouse", description=__doc__)
    parser.add_argument(
        "--project", help="the project folder whose pipelines to run (default: LAKEHOUSE_PROJECT, else the examples)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    groups = (project, log, layers, reading, maintenance, services)
    every = [command for group in groups for command in group.COMMANDS]
    for command in sorted(every, key=lambda command: ORDER.index(command.name)):
        command.add_to(commands)
    return parser


def _settings_for(args) -> Settings:
    if args.project:
        # Through the environment, so that every process a command starts (a job, the service) serves it too.
        os.environ["LAKEHOUSE_PROJECT"] = args.project
    settings = Settings.from_env()
    if getattr(args, "pipeline", "") is None and not args.every_pipeline:
        args.pipeline = chosen_pipeline(settings)
    overrides = {
        name: getattr(args, name)
        for name in ("max_files_per_trigger", "max_bytes_per_trigger", "watermark_delay", "allowed_lateness")
        if getattr(args, name, None) is not None
    }
    return settings.replace(**overrides) if overrides else settings


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.run(args, _settings_for(args))
        sys.stdout.flush()  # the rest of the output now: a reader that has gone shows here, not at exit
    except BrokenPipeError:
        return _reader_gone()
    except LakehouseError as error:
        print(f"lakehouse: error: {error}", file=sys.stderr)
        return ExitCode.REFUSED
    except (AuditFailed, Unhealthy):
        return ExitCode.CHECK_FAILED
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except Exception as error:
        from lakehouse.serving.read_only import refusal
        from lakehouse.storage.faults import explain

        # A job through the Spark service without its write token, say, or a full disk.
        refused = refusal(error) or explain(error)
        if refused is None:
            raise
        print(f"lakehouse: error: {refused}", file=sys.stderr)
        return ExitCode.REFUSED
    finally:
        release_connect_session()  # a command's session on the Spark service ends with it
    return ExitCode.DONE


def entry(argv: list[str] | None = None) -> NoReturn:
    """A process's whole life as a command (the ``lakehouse`` script, ``jobs/*.py``): ``main``'s
    exit code, or, when something unforeseen was raised, its traceback and ExitCode.CRASHED."""
    try:
        code = main(argv)
    except Exception:
        traceback.print_exc()
        code = ExitCode.CRASHED
    sys.exit(code)


def _reader_gone() -> int:
    """The reader stopped reading (``lakehouse status | head -3``): end quietly, as a Unix tool that
    SIGPIPE ends, with the shell's code for that. Standard output goes to /dev/null, so that Python's
    own flush at exit has nothing left to fail on (the Python docs' note on SIGPIPE)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 128 + signal.SIGPIPE


if __name__ == "__main__":
    entry()
