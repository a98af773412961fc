"""The task registry: benchmarks and their tasks, filled by the benchmark packages.

A benchmark package registers a ``Benchmark`` (contract/benchmark.py) under the ``halluscope.benchmarks``
entry-point group (pyproject.toml) and the registry loads them on first use. It sits beside
config, below every benchmark, so config checks task names and benchmark options without
importing a benchmark and the engine reaches a benchmark only through here."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from functools import lru_cache
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from halluscope.errors import ConfigError, clip

if TYPE_CHECKING:
    from halluscope.contract.benchmark import Benchmark
    from halluscope.contract.task import Task

GROUP = "halluscope.benchmarks"


@lru_cache(maxsize=1)
def _registry() -> tuple[dict[str, Benchmark], dict[str, Task], dict[str, str]]:
    found = sorted(entry_points(group=GROUP), key=lambda ep: ep.name)
    if not found:
        raise ConfigError(f"no benchmark registers tasks under the entry-point group {GROUP!r}: install "
                          "halluscope (pip install -e .) rather than only putting lib/ on the path")
    benchmarks: dict[str, Benchmark] = {}
    tasks: dict[str, Task] = {}
    owner: dict[str, str] = {}
    for ep in found:
        bench = ep.load()
        if benchmarks.setdefault(bench.name, bench) is not bench:
            raise ConfigError(f"benchmark '{bench.name}' is registered twice (again by entry point '{ep.name}')")
        for task in bench.tasks:
            if tasks.setdefault(task.name, task) is not task:
                raise ConfigError(f"task '{task.name}' is registered twice (again by entry point '{ep.name}')")
            owner[task.name] = bench.name
    return benchmarks, tasks, owner


def task_names() -> list[str]:
    return sorted(_registry()[1])


def benchmarks() -> dict[str, Benchmark]:
    return dict(_registry()[0])


def stand_ins() -> list[Callable[[str], str | None]]:
    """The benchmarks' scripted extractor answers, in registration order."""
    return [b.stand_in for b in _registry()[0].values() if b.stand_in is not None]


def recorded_steps() -> dict[str, Callable]:
    """``module:function`` -> the recorded-steps function a registered benchmark declares: the only
    code a run config may name (a ``backend: recorded`` model's ``params.steps``)."""
    return {f"{fn.__module__}:{fn.__qualname__}": fn
            for b in _registry()[0].values() if (fn := b.recorded_steps) is not None}


def benchmark_of(task: str) -> Benchmark:
    benches, _, owner = _registry()
    if task not in owner:
        get_task(task)  # raises, naming the closest tasks
    return benches[owner[task]]


MAX_TASK_NAME_CHARS = 100  # longer names get no "did you mean": difflib's time grows with the square


def unknown_task(name: str) -> str | None:
    """Why ``name`` is no task, naming the closest ones; None when it is one."""
    known = task_names()
    if name in known:
        return None
    if not isinstance(name, str) or len(name) > MAX_TASK_NAME_CHARS:
        return (f"unknown task '{clip(name, 60)}': a task name has at most {MAX_TASK_NAME_CHARS} characters; "
                f"known tasks: {', '.join(known)}")
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known tasks: {', '.join(known)}"
    return f"unknown task '{name}'{hint}"


def get_task(name: str) -> Task:
    task = _registry()[1].get(name)
    if task is None:
        raise ConfigError(f"invalid run config <task lookup>: tasks.0: {unknown_task(name)}")
    return task
