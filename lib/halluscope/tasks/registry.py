"""The task registry's former home, still imported by tests/integration and bench/; the registry
lives in ``halluscope.task_registry``, below config (see docs/architecture.md, "Layers")."""

from halluscope.task_registry import get_task, task_names

__all__ = ["get_task", "task_names"]
