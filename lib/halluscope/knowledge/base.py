"""Knowledge loaded lazily, once per worker process, and shared by every task there."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from halluscope.config import VerifierOptions
from halluscope.knowledge.pypi import SNAPSHOT, PackageIndex
from halluscope.sources import DataResolver


class Knowledge:
    def __init__(self, resolver: DataResolver, pypi_snapshot: str = SNAPSHOT,
                 options: VerifierOptions | None = None) -> None:
        self.resolver = resolver
        self.pypi_snapshot = pypi_snapshot
        self.options = options or VerifierOptions()

    @cached_property
    def pypi(self) -> PackageIndex:
        return PackageIndex.cached(self.resolver.resolve_any(self.pypi_snapshot),
                                   Path(self.resolver.cache_dir).expanduser() / "indexes")
