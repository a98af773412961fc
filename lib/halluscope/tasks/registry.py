"""The task registry: one place that maps task names to task objects."""

from __future__ import annotations

from functools import lru_cache

from halluscope.tasks.base import Task


@lru_cache(maxsize=1)
def _tasks() -> dict[str, Task]:
    from halluscope.tasks.halogen import TASKS as HALOGEN
    from halluscope.tasks.hallulens import TASKS as HALLULENS

    return {t.name: t for t in [*HALOGEN, *HALLULENS]}


def task_names() -> list[str]:
    return sorted(_tasks())


def get_task(name: str) -> Task:
    task = _tasks().get(name)
    if task is None:
        from halluscope.config import check_task_names

        check_task_names([name], "<task lookup>")  # raises, naming the closest tasks
    return task
