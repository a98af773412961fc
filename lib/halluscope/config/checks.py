"""Checks of a validated run config against the registered benchmarks and the machine: moved keys,
benchmark options, what tasks need, where knowledge and replay files may come from, data.dir."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ValidationError

from halluscope.config.schema import ReplayModel, RunConfig
from halluscope.contract.benchmark import KnowledgeFile
from halluscope.errors import ConfigError, clip
from halluscope.sources import system_path_problem, url_scheme
from halluscope.task_registry import benchmark_of, benchmarks, get_task, recorded_steps, unknown_task


def _moved() -> dict[tuple[str, ...], list[str]]:
    """Old dotted key (as a path) -> where the registered benchmarks that took it over set it now."""
    out: dict[tuple[str, ...], list[str]] = {}
    for bench in benchmarks().values():
        for old, new in bench.moved.items():
            out.setdefault(tuple(old.split(".")), []).append(new)
    return out


def _paths(data: dict, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every key of a config document, as a path, parents before their children."""
    for key, value in data.items():
        path = (*prefix, str(key))
        yield path
        if isinstance(value, dict):
            yield from _paths(value, path)


def check_moved_keys(data: dict, source: str) -> None:
    """A key a benchmark took over into its own section is refused in one line naming where it
    is set now (the deepest such key given: ``verifiers.titles`` rather than ``verifiers``)."""
    moved = _moved()
    given = [p for p in _paths(data) if p in moved]
    for path in given:
        if not any(len(q) > len(path) and q[:len(path)] == path for q in given):
            raise ConfigError(f"invalid run config {source}: {'.'.join(path)}: this option moved; set "
                              f"{' or '.join(sorted(moved[path]))} instead")


def moved_forward(data: dict) -> dict:
    """A copy of a config document with each key a benchmark took over moved to its new place
    (the deepest first; a place already set keeps its value). Keys that say nothing (null, {})
    are dropped: the new places default to them."""
    moved = _moved()
    data = copy.deepcopy(data)
    for path in sorted((p for p in _paths(data) if p in moved), key=len, reverse=True):
        *parents, last = path
        node = data
        for key in parents:
            node = node[key]
        value = node.pop(last)
        if value is None or value == {}:
            continue
        for new in moved[path]:
            *new_parents, new_last = new.split(".")
            target = data
            for key in new_parents:
                target = target.setdefault(key, {})
            if isinstance(value, dict) and isinstance(target.get(new_last), dict):
                target[new_last] = {**value, **target[new_last]}
            else:
                target.setdefault(new_last, value)
    return data


def validation_message(err: ValidationError, source: str, within: tuple[str, ...] = ()) -> str:
    """A pydantic error as one line per field, its place in the config dotted (under ``within``),
    a long value shown in part."""
    lines = [f"invalid run config {source}:"]
    for e in err.errors():
        loc = ".".join(clip(p, 60) for p in (*within, *e["loc"])) or "(top level)"
        lines.append(f"  {loc}: {clip(' '.join(e['msg'].split()), 400)}")  # one line each, a value shown in part
    return "\n".join(lines)


def check_benchmark_options(cfg: RunConfig, source: str) -> None:
    """Each ``benchmarks.<name>`` section names a registered benchmark and passes its schema."""
    known = benchmarks()
    listed = {benchmark_of(t).name for t in cfg.tasks}  # a listed benchmark's defaults must validate too
    for name in [*cfg.benchmarks, *sorted(listed - set(cfg.benchmarks))]:
        if name not in known:
            raise ConfigError(f"invalid run config {source}: benchmarks.{name}: unknown benchmark; "
                              f"known: {', '.join(sorted(known))}")
        try:
            options = cfg.options_for(name)  # parsed once for the config: the run reuses it
        except ValidationError as err:
            raise ConfigError(validation_message(err, source, ("benchmarks", name))) from None
        role_models = known[name].role_models
        if name in listed and role_models is not None:
            for role, model in role_models(options):
                if not any(m.id == model and m.role == role for m in cfg.models):
                    raise ConfigError(f"invalid run config {source}: benchmarks.{name} names {role} model "
                                      f"'{model}', but models has no model with id '{model}' and role: {role}")
    for i, m in enumerate(cfg.models):
        unknown = sorted(set(m.tasks or ()) - set(cfg.tasks))
        if unknown:
            raise ConfigError(f"invalid run config {source}: models.{i}.tasks: {unknown} not in the run's tasks")


def check_task_needs(cfg: RunConfig, source: str) -> None:
    """Every role model and knowledge source a configured task uses must be configured."""
    roles = {m.role for m in cfg.models}
    for name in cfg.tasks:
        task = get_task(name)
        for role in task.roles:
            if role not in roles:
                raise ConfigError(f"invalid run config {source}: task '{name}' needs a {role} model; "
                                  f"add one to models with role: {role}")
        if task.needs_testsets and not cfg.testsets.get(name):
            raise ConfigError(f"invalid run config {source}: task '{name}' needs testsets.{name}: the URIs of its "
                              "test sets, one per trial (made by `halluscope testset`)")
        per_model = cfg.testsets.get(name)
        if isinstance(per_model, dict):
            missing = [m.id for m in cfg.models if m.role == "test" and not per_model.get(m.id)]
            if missing:
                raise ConfigError(f"invalid run config {source}: testsets.{name} lists test sets per model but "
                                  f"none for {missing}")
        # a knowledge source named like a field of the benchmark's options is configured there
        bench = benchmark_of(name).name
        options = cfg.options_for(bench)
        for knowledge in task.knowledge:
            if knowledge in type(options).model_fields and getattr(options, knowledge) is None:
                raise ConfigError(f"invalid run config {source}: task '{name}' needs "
                                  f"benchmarks.{bench}.{knowledge} to be set")


def source_problem(ref: str, allow_http: bool) -> str | None:
    """Why a knowledge file may not be read from ``ref``: local paths (outside the system's
    folders) and s3:// are read; http(s):// only when the config allows it (data.allow_http)."""
    scheme = url_scheme(ref)
    if scheme in ("http", "https"):
        return None if allow_http else (f"{scheme}:// URLs are not fetched unless the config sets "
                                        "data.allow_http: true")
    if scheme in (None, "file"):
        path = re.sub(r"^file:(//)?", "", ref, flags=re.IGNORECASE)
        # a relative name is a data name, found under the data folders: checked where it is found
        return system_path_problem(path) if os.path.isabs(os.path.expanduser(path)) else None
    if scheme in ("s3", "s3a"):
        return None
    return f"{scheme}:// is not read: use a local path or s3://... (or http(s)://... with data.allow_http: true)"


def knowledge_files(options: BaseModel, prefix: str) -> Iterator[tuple[str, str, KnowledgeFile]]:
    """(field, value, marker) of every set field of an options model, nested ones included, that
    names a knowledge file (``contract.benchmark.KnowledgeFile``)."""
    for name, info in type(options).model_fields.items():
        value, field = getattr(options, name), f"{prefix}.{name}"
        marker = next((m for m in info.metadata if isinstance(m, KnowledgeFile)), None)
        if marker is not None and isinstance(value, str):
            yield field, value, marker
        inner = list(enumerate(value)) if isinstance(value, (list, tuple)) else [(None, value)]
        for i, part in inner:
            if isinstance(part, BaseModel):
                yield from knowledge_files(part, field if i is None else f"{field}.{i}")


def check_knowledge_sources(cfg: RunConfig, source: str) -> None:
    """Knowledge files come from local paths or S3, never a system folder (/etc/shadow), and from
    http(s) only where the config says so: the driver and every worker fetch them. Nor are the
    data folders system folders (a data name "shadow" in data.dir /etc)."""
    named = dict.fromkeys([*cfg.benchmarks, *(benchmark_of(t).name for t in cfg.tasks)])
    for bench in named:
        for field, ref, marker in knowledge_files(cfg.options_for(bench), f"benchmarks.{bench}"):
            problem = None if ref in marker.also else source_problem(ref, cfg.data.allow_http)
            if problem:
                raise ConfigError(f"invalid run config {source}: {field}: {clip(ref)}: {problem}")
    for field, folder in (("data.dir", cfg.data.dir), ("data.cache_dir", cfg.data.cache_dir)):
        problem = None if folder is None or not os.path.isabs(os.path.expanduser(folder)) else \
            system_path_problem(folder)
        if problem:
            raise ConfigError(f"invalid run config {source}: {field}: {clip(folder)} {problem}")


def check_recorded_steps(cfg: RunConfig, source: str) -> None:
    """A config is data: the only code it may name is a registered benchmark's recorded steps."""
    declared = recorded_steps()
    for i, m in enumerate(cfg.models):
        steps = getattr(m.params, "steps", None) if m.backend == "recorded" else None
        if steps is not None and steps not in declared:
            raise ConfigError(f"invalid run config {source}: models.{i} ('{m.id}'): params.steps {clip(steps)} is "
                              f"not declared by a registered benchmark (declared: {', '.join(sorted(declared))})")


def check_replay_paths(cfg: RunConfig, source: str) -> None:
    """A replay file is a local file: a URL in params.path was looked up as a relative path
    ("<config folder>/file:/etc/passwd not found")."""
    for i, m in enumerate(cfg.models):
        path = m.params.path if isinstance(m, ReplayModel) else None
        scheme = url_scheme(path) if path else None
        if scheme:
            raise ConfigError(f"invalid run config {source}: models.{i}.params.path: replay paths must be local "
                              f"files, not URLs ({scheme}:// in {clip(path)}); copy the file here and "
                              "give its path")


def check_task_names(names: list[str], source: str) -> None:
    for i, name in enumerate(names):
        problem = unknown_task(name)
        if problem:
            raise ConfigError(f"invalid run config {source}: tasks.{i}: {problem}")


def check_data_dir(cfg: RunConfig, source: str) -> None:
    """data.dir is a folder here (a missing one was passed over, and every data file came from the
    cache or a download instead). Checked where a config file is loaded to be run or planned, not
    where a stored run's config is read back (``halluscope report`` on another machine)."""
    folder = cfg.data.dir
    if folder is None:
        return
    path = Path(folder).expanduser()
    try:
        why = system_path_problem(path) or \
            (None if path.is_dir() else "is not a folder" if path.exists() else "does not exist")
    except OSError as err:
        why = f"cannot be used ({err.strerror or err})"
    if why:
        raise ConfigError(f"invalid run config {clip(source)}: data.dir: {clip(folder)} {why}")
