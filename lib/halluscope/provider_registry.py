"""Provider kinds by backend name: the ``halluscope.providers`` entry-point group, loaded once.

It sits beside config, below models: config validates the params of a provider installed beside
halluscope with the params model its kind declares, and ``models.registry`` builds providers
from the same kinds (``models.provider.ProviderKind``)."""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import entry_points
from typing import Any

from halluscope.errors import ConfigError

GROUP = "halluscope.providers"


@lru_cache(maxsize=1)
def registered() -> dict[str, Any]:
    """Every installed provider kind by its backend name."""
    found: dict[str, Any] = {}
    for ep in sorted(entry_points(group=GROUP), key=lambda ep: ep.name):
        if ep.name in found:
            raise ConfigError(f"backend '{ep.name}' is registered twice under the entry-point group {GROUP!r}")
        found[ep.name] = ep.load()
    return found


def kind_named(backend: str, model_id: str) -> Any:
    kind = registered().get(backend)
    if kind is None:
        raise ConfigError(f"model '{model_id}': no provider for backend '{backend}' is installed "
                          f"(registered: {', '.join(sorted(registered())) or 'none'}; entry-point group {GROUP!r})")
    return kind
