"""Which project the running process serves: ``LAKEHOUSE_PROJECT``, or the shipped examples."""

from __future__ import annotations

from pathlib import Path

from lakehouse.project.project import Project, load_project
from lakehouse.settings import PROJECT_ROOT, Settings


def project_dir(settings: Settings | None = None) -> Path:
    settings = settings or Settings.from_env()
    return Path(settings.project).expanduser().resolve() if settings.project else PROJECT_ROOT


def active_project(settings: Settings | None = None) -> Project:
    """The validated project; a ProjectError lists every problem of an invalid one."""
    return load_project(project_dir(settings))
