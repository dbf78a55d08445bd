"""Run a ``lakehouse`` command many times through the CLI and the interpreter's exit, cheaply, and
count how the runs ended.

    python -m tests.exit_loop LOOP.json RUNS

LOOP.json: ``{"name": ..., "argv": [...], "env": {...}}``, where ``{i}`` in an argument is the run's
number. Prints how the runs ended as JSON: ``{"exit 0": 199, "signal 6": 1}``. Each run's stdout
and stderr are appended to ``<name>.out`` and ``<name>.err`` beside LOOP.json.

Each run is a child forked from this process. It runs ``lakehouse.cli.main`` and leaves by
``SystemExit``, as the ``lakehouse`` script does, so the whole of ``Py_FinalizeEx`` runs: where a
thread still holding Python objects aborts the process (docs/operations.md, "Exit codes"). The
first run imports what the command needs, as a new process does, and reports it; this process
then imports the same before forking the others, which so cost the command and the exit (tens of
milliseconds) instead of the imports too (about half a second).

This process must not use delta-rs or Arrow's S3 client itself: delta-rs's runtime refuses to run
in a forked child, and the AWS SDK's threads do not follow a fork.
"""

from __future__ import annotations

import atexit
import collections
import gc
import importlib
import json
import os
import sys
from pathlib import Path


def run_loop(loop: dict, runs: int, folder: Path) -> dict[str, int]:
    """How the loop's runs ended: ``{"exit 2": 199, "signal 6": 1}``."""
    endings: collections.Counter[str] = collections.Counter()
    for run in range(runs):
        sys.stdout.flush()
        report_to = os.pipe() if run == 0 else None
        pid = os.fork()
        if pid == 0:
            run_child(loop, run, folder, report_to)
        imported = read_report(report_to) if report_to else []
        _, status = os.waitpid(pid, 0)
        endings[f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"] += 1
        if imported:
            import_all(imported)
    return dict(endings)


def run_child(loop: dict, run: int, folder: Path, report_to: tuple[int, int] | None) -> None:
    """In the forked child: the command, then the interpreter's exit (never returns)."""
    for stream, suffix in ((1, "out"), (2, "err")):
        fd = os.open(folder / f"{loop['name']}.{suffix}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(fd, stream)
        os.close(fd)
    if report_to:
        os.close(report_to[0])
        atexit.register(report_imports, report_to[1])
    os.environ.update(loop.get("env", {}))
    from lakehouse.cli import main

    raise SystemExit(main([arg.replace("{i}", str(run)) for arg in loop["argv"]]))


def report_imports(fd: int) -> None:
    """At the first run's exit (before the interpreter finalizes): the modules it imported."""
    with os.fdopen(fd, "w") as report:
        report.write("\n".join(name for name in sys.modules if name != "__main__"))


def read_report(pipe: tuple[int, int]) -> list[str]:
    os.close(pipe[1])
    with os.fdopen(pipe[0]) as report:
        return report.read().split()


def import_all(names: list[str]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # a name some package put in sys.modules by hand: its children do without it
            continue
    # The children share this heap until they write to it. Their exit's collections would touch
    # every object here, copying its page, unless these are left out of them.
    gc.freeze()


def main(argv: list[str]) -> None:
    spec, runs = Path(argv[0]), int(argv[1])
    print(json.dumps(run_loop(json.loads(spec.read_text()), runs, spec.parent)))


if __name__ == "__main__":
    main(sys.argv[1:])
