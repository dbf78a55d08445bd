"""The long-running services the platform starts: the Spark service, a Spark cluster, a Kafka broker,
an S3 server, Prometheus and Alertmanager; and the hosts of the deployment across hosts, on this machine. Each
prints its status as JSON and exits 1 when it is down."""

from __future__ import annotations

import argparse
import importlib
import json
from types import SimpleNamespace
from typing import TYPE_CHECKING

from lakehouse.commands.base import Command, Unhealthy
from lakehouse.errors import LakehouseError
from lakehouse.settings import Settings

# A cut is a fault drill, not an outage: bounded, and undone by the same command.
MOST_CUT_SECONDS = 3600

if TYPE_CHECKING:
    from lakehouse.services.process import Service


def _run_service(service: Service, label: str, action: str, settings: Settings) -> None:
    """start, status or stop of a long-running service: its status as JSON, exit 1 when it is down."""
    if action == "stop":
        print(f"{label} stopped" if service.stop(settings) else f"no {label} was running")
        return
    report = service.status(settings) if action == "status" else service.start(settings)
    print(json.dumps(report, indent=1))
    if not report["up"]:
        raise Unhealthy()


def cmd_serve(args, settings: Settings) -> None:
    from lakehouse.services import spark_service as service

    _run_service(service, "Spark service", "stop" if args.stop else "status" if args.status else "start", settings)


def _serve_options(serve) -> None:
    serve_action = serve.add_mutually_exclusive_group()
    serve_action.add_argument("--status", action="store_true", help="exit 1 unless both endpoints answer")
    serve_action.add_argument("--stop", action="store_true", help="stop the service and its JVM")


def cmd_cluster(args, settings: Settings) -> None:
    from lakehouse.services import cluster
    from lakehouse.vocabulary import ClusterRole

    if args.role and args.action != "start":
        from lakehouse.errors import LakehouseError

        raise LakehouseError(f"--role is for start: `lakehouse cluster {args.action}` finds what this home runs")
    role = ClusterRole(args.role or ClusterRole.ALL)
    service = SimpleNamespace(start=lambda s: cluster.start(s, role), status=cluster.status, stop=cluster.stop)
    _run_service(service, "Spark cluster", args.action, settings)


def _cluster_options(parser) -> None:
    from lakehouse.vocabulary import ClusterRole, choices

    parser.add_argument("action", choices=["start", "status", "stop"], help="status exits 1 unless it is up")
    parser.add_argument(
        "--role",
        choices=choices(ClusterRole),
        help="start: all (a master and two workers, the default), master (the master alone, on "
        "LAKEHOUSE_BIND_ADDRESS:LAKEHOUSE_CLUSTER_PORT) or worker (one, registered with LAKEHOUSE_SPARK_MASTER)",
    )


def cmd_users(args, settings: Settings) -> None:
    from lakehouse.serving import users

    path = users.users_file(settings)
    if args.action != "list" and not args.name:
        raise LakehouseError(f"`lakehouse users {args.action}` needs the user's name")
    if args.action == "add":
        secret = users.add_user(path, args.name, args.role)
        # The one time the secret is shown: stdout only, for the person who asked.
        print(f"user {args.name} ({args.role}) added; their password and Spark Connect token (shown once):")
        print(secret)
    elif args.action == "remove":
        users.remove_user(path, args.name)
        print(f"user {args.name} removed")
    else:
        print(json.dumps(users.list_users(path), indent=1))


def _users_options(parser) -> None:
    from lakehouse.vocabulary import Role, choices

    parser.add_argument("action", choices=["add", "list", "remove"])
    parser.add_argument("name", nargs="?", help="add, remove: the user's name")
    parser.add_argument("--role", choices=choices(Role), default=Role.ANALYST, help="add: the user's role")


def _service(name: str, help: str, module: str, label: str, status_help: str) -> Command:
    """A service driven by an action argument, as in ``lakehouse kafka status``.

    Args:
        name: the command's name.
        help: its help line.
        module: the module with the service's ``start``, ``status`` and ``stop`` (lakehouse.services).
        label: what the command calls the service in what it prints.
        status_help: the help of the action argument: when ``status`` exits 1.
    """

    def options(parser) -> None:
        parser.add_argument("action", choices=["start", "status", "stop"], help=status_help)

    def run(args, settings: Settings) -> None:
        # Imported by name when the command runs, as every command imports what it runs.
        _run_service(importlib.import_module(module), label, args.action, settings)

    return Command(name, help, run, options)


def cmd_hosts(args, settings: Settings) -> None:
    from lakehouse.services import deployment, hosts

    described = deployment.load(settings.deployment)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.action == "run":
        hosts.run(described, args.host, command)
    if args.action == "cut":
        options = _cut_options().parse_args(command)
        print(json.dumps(hosts.cut(described, args.host, options.seconds, options.apart_from)))
        return
    if args.host or command:
        raise LakehouseError(f"`lakehouse hosts {args.action}` takes no host and no command; `run` and `cut` do")
    if args.action == "down":
        removed = hosts.down(described)
        print(f"hosts down: removed {json.dumps(removed)}" if any(removed.values()) else "no hosts were up")
        return
    report = hosts.up(described) if args.action == "up" else hosts.status(described)
    print(json.dumps(report, indent=1))
    if not report["up"]:
        raise Unhealthy()


def _hosts_options(parser) -> None:
    parser.add_argument(
        "action",
        choices=["up", "status", "down", "run", "cut"],
        help="status exits 1 unless every host is up; cut takes a host off the network for --seconds, then back",
    )
    parser.add_argument("host", nargs="?", help="run: the host to run the command on; cut: the host to cut off")
    options = "run: the command, after --; cut: [--from OTHER] [--seconds N]"
    parser.add_argument("command", nargs=argparse.REMAINDER, help=options)


def _cut_options() -> argparse.ArgumentParser:
    """What follows `hosts cut HOST` (the command's own parser leaves everything after the host to `run`)."""
    parser = argparse.ArgumentParser(prog="lakehouse hosts cut HOST")
    parser.add_argument("--seconds", type=_positive_seconds, default=60, help="how long the host is off (60)")
    parser.add_argument(
        "--from", dest="apart_from", metavar="OTHER", help="cut only the path between HOST and OTHER (both drop it)"
    )
    return parser


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0
    if not 0 < seconds <= MOST_CUT_SECONDS:
        raise argparse.ArgumentTypeError(f"a number of seconds above 0 and at most {MOST_CUT_SECONDS}")
    return seconds


COMMANDS = (
    Command(
        "serve",
        "start the Spark service: Spark Connect and a JDBC/ODBC endpoint, read-only, on one catalog",
        cmd_serve,
        _serve_options,
    ),
    Command(
        "users",
        "the people who may use the Spark service's endpoints: add (prints a new password once), list, remove",
        cmd_users,
        _users_options,
    ),
    Command(
        "cluster",
        "a Spark standalone cluster: a master and two workers here, or the master or a worker of one across hosts",
        cmd_cluster,
        _cluster_options,
    ),
    _service(
        "kafka",
        "a Kafka broker on loopback for the retained log (KRaft, one node)",
        module="lakehouse.services.kafka",
        label="Kafka broker",
        status_help="status exits 1 unless it answers",
    ),
    _service(
        "s3",
        "an S3-compatible object store on loopback (S3Proxy over a local folder)",
        module="lakehouse.services.s3",
        label="S3 server",
        status_help="status exits 1 unless it answers",
    ),
    _service(
        "prometheus",
        "a Prometheus on loopback: scrapes the streams' metrics, evaluates monitoring/alerts.yml",
        module="lakehouse.services.prometheus",
        label="Prometheus",
        status_help="status exits 1 unless it is ready",
    ),
    _service(
        "alertmanager",
        "an Alertmanager on loopback: what Prometheus's alert rules fire, to LAKEHOUSE_ALERT_WEBHOOK_URL",
        module="lakehouse.services.alertmanager",
        label="Alertmanager",
        status_help="status exits 1 unless it is ready",
    ),
    Command(
        "hosts",
        "the hosts of docker/deployment.yaml on this machine, a network namespace each (root only)",
        cmd_hosts,
        _hosts_options,
    ),
)
