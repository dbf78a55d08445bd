"""A project: a folder holding ``lakehouse.yaml``, ``pipelines/*.yaml`` and the pipelines'
expectation suites in ``expectations/``. ``LAKEHOUSE_PROJECT`` names it; unset, the shipped
examples at the checkout's root are the project. Every command, DAG and the Spark service reads
its pipelines from here, and refuses an invalid project with the same messages (``lakehouse check``).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from lakehouse.project import checks
from lakehouse.project.custom_code import CUSTOM_METRICS_FILE, declared_metric_functions
from lakehouse.project.declarations import DimensionSpec, PipelineSpec, WindowJoinSpec
from lakehouse.project.pipeline_files import merged_with_parent, read_pipeline
from lakehouse.project.project_file import (
    PROJECT_SETTINGS,
    check_window_join,
    read_default_pipeline,
    read_dimensions,
    read_window_join,
)
from lakehouse.project.reader import Reader
from lakehouse.project.yaml_source import Problem, ProjectError, YamlSource, read_yaml
from lakehouse.vocabulary import MetricKind

PROJECT_FILE = "lakehouse.yaml"
PIPELINES_DIR = "pipelines"
EXPECTATIONS_DIR = "expectations"
RAW_EVENTS_SUITE = "{suite}.raw_events.json"


# Compared by identity: one object per version of the files (_cached), a key for what is built from it.
@dataclasses.dataclass(frozen=True, eq=False)
class Project:
    root: Path
    name: str
    pipelines: dict[str, PipelineSpec]
    dimensions: dict[str, DimensionSpec]
    window_joins: dict[str, WindowJoinSpec]
    declared_default: str | None = None  # lakehouse.yaml's default_pipeline

    @property
    def default_pipeline(self) -> str | None:
        """The pipeline a command that acts on one pipeline runs when none is named: the one
        ``lakehouse.yaml`` declares as ``default_pipeline``, else the project's only one. None when
        the project has several and declares none: such a command then asks for ``--pipeline``."""
        if self.declared_default is not None:
            return self.declared_default
        return next(iter(self.pipelines)) if len(self.pipelines) == 1 else None

    @property
    def expectations_dir(self) -> Path:
        return self.root / EXPECTATIONS_DIR

    def suite_path(self, suite: str, layer: str) -> Path:
        return self.expectations_dir / f"{suite}.{layer}.json"


class _Loader:
    """Reads every file of a project, collecting the problems of all of them."""

    def __init__(self, root: Path):
        self.root, self.problems = root, []
        self.sources: dict[str, YamlSource] = {}
        self.specs: dict[str, PipelineSpec | None] = {}

    def read(self, path: Path) -> YamlSource | None:
        try:
            return read_yaml(path)
        except ProjectError as error:
            self.problems.extend(error.problems)
        except FileNotFoundError:
            self.problems.append(Problem(path, 0, "", "no such file"))
        return None

    def pipeline(self, name: str, chain: tuple[str, ...] = ()) -> PipelineSpec | None:
        """The named pipeline, its parents resolved first (a cycle is a problem, not a hang)."""
        if name in self.specs:
            return self.specs[name]
        source, self.specs[name] = self.sources[name], None
        data = source.data if isinstance(source.data, dict) else {}
        reader, topic, suite = Reader(source, self.problems), "", ""
        parent_name = data.get("extends")
        if parent_name is not None:
            if parent_name not in self.sources or parent_name in chain:
                why = "extends itself" if parent_name in chain else "is not a pipeline of this project"
                reader.report(("extends",), f"{parent_name!r} {why}")
                return None
            parent = self.pipeline(parent_name, (*chain, name))
            if parent is None:
                return None
            data = merged_with_parent(data, self.sources[parent_name].data)
            topic, suite = parent.topic, parent.suite
        if data.get("name", name) != name:
            reader.report(("name",), f"a pipeline is named by its file: {name!r}")
        suite = reader.name(data["suite"], ("suite",)) if "suite" in data else suite
        spec = read_pipeline(reader, {**data, "name": name}, topic, suite or "")
        self.specs[name] = spec
        return spec

    def check(self, spec: PipelineSpec, dimensions: dict[str, DimensionSpec]) -> PipelineSpec:
        reader = Reader(self.sources[spec.name], self.problems)
        for check in (checks.check_fields, checks.check_keys, checks.check_window):
            check(reader, spec)
        custom = declared_metric_functions(self.root / PIPELINES_DIR)
        checks.check_metrics(reader, spec, custom)
        checks.check_joins(reader, spec, dimensions)
        texts = []
        suite_path = self.root / EXPECTATIONS_DIR / RAW_EVENTS_SUITE.format(suite=spec.suite)
        if (suite := self.read(suite_path)) is not None:
            checks.check_suite(suite, spec, self.problems)
            texts.append(suite_path.read_text(encoding="utf-8"))
        custom_code = self.root / PIPELINES_DIR / CUSTOM_METRICS_FILE
        if any(m.kind == MetricKind.CUSTOM for m in spec.metrics) and custom_code.is_file():
            texts.append(custom_code.read_text(encoding="utf-8"))
        return dataclasses.replace(spec, source_texts="\0".join(texts))


def _load(root: Path) -> Project:
    loader = _Loader(root)
    project_file = loader.read(root / PROJECT_FILE)
    data = project_file.data if project_file and isinstance(project_file.data, dict) else {}
    reader = Reader(project_file or YamlSource(root / PROJECT_FILE, {}, {}), loader.problems)
    reader.unknown_keys(data, (), PROJECT_SETTINGS)
    dimensions = read_dimensions(reader, data)
    for path in sorted((root / PIPELINES_DIR).glob("*.yaml")):
        if (source := loader.read(path)) is not None:
            loader.sources[path.stem] = source
    if project_file and not loader.sources:
        loader.problems.append(Problem(root / PIPELINES_DIR, 0, "", "no pipeline: declare one in a <name>.yaml here"))
    pipelines = {}
    for name in loader.sources:
        if (spec := loader.pipeline(name)) is not None:
            pipelines[name] = loader.check(spec, dimensions)
    joins = {}
    for name, value in reader.mapping(data.get("window_joins"), ("window_joins",)).items():
        if (join := read_window_join(reader, name, value)) is not None:
            check_window_join(reader, join, pipelines)
            joins[name] = join
    default = read_default_pipeline(reader, data, pipelines)
    if loader.problems:
        raise ProjectError(loader.problems)
    name = reader.text(data.get("name"), ("name",), root.name)
    return Project(root, name, pipelines, dimensions, joins, default)


def _stamp(root: Path) -> tuple:
    """What a cached project depends on: its files' names and modification times, so that a pipeline
    added to the project is seen by a long-lived process (the DAG processor) at its next parse."""
    files = [
        root / PROJECT_FILE,
        root / PIPELINES_DIR / CUSTOM_METRICS_FILE,
        *(root / PIPELINES_DIR).glob("*.yaml"),
        *(root / EXPECTATIONS_DIR).glob("*.json"),
    ]
    return tuple(sorted((str(f), f.stat().st_mtime_ns) for f in files if f.exists()))


@functools.lru_cache(maxsize=8)
def _cached(root: Path, stamp: tuple) -> Project:
    return _load(root)


def load_project(root: Path | str) -> Project:
    """The project at ``root``, validated; a :class:`ProjectError` lists every problem otherwise."""
    root = Path(root).resolve()
    if not (root / PROJECT_FILE).is_file():
        raise ProjectError(
            [Problem(root, 0, "", f"not a project: it has no {PROJECT_FILE} (lakehouse init makes one)")]
        )
    return _cached(root, _stamp(root))
