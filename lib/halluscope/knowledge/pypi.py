"""Which top-level import names exist: the Python standard library plus a PyPI name snapshot.

Names are compared after PEP 503 normalisation (runs of ``-``, ``_``, ``.`` become ``-``,
lower case), the same normalisation PyPI applies when it looks a project up by name.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from halluscope.errors import DataError
from halluscope.knowledge.import_names import IMPORT_TO_PROJECT
from halluscope.sources import open_text, sha256_file
from halluscope.knowledge.pickle_cache import cached_pickle

SNAPSHOT = "pypi/project-names.txt.gz"
_SEPARATORS = re.compile(r"[-_.]+")
_VALID = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


def normalize(name: str) -> str:
    return _SEPARATORS.sub("-", name).lower()


class PackageIndex:
    def __init__(self, names: set[str], stdlib: frozenset[str], source: str, sha256: str,
                 skipped_lines: int = 0) -> None:
        self.names = names
        self.stdlib = stdlib
        self.source = source
        self.sha256 = sha256
        self.skipped_lines = skipped_lines

    @classmethod
    def cached(cls, path: Path, cache_dir: Path) -> "PackageIndex":
        """``from_file`` once per snapshot: later loads (every verifier actor) read a pickle keyed
        by the snapshot's sha256, about ten times faster than parsing the name list."""
        digest = sha256_file(path)
        return cached_pickle(cache_dir / f"pypi-index-{digest[:16]}.pickle", lambda: cls.from_file(path))

    @classmethod
    def from_file(cls, path: Path) -> "PackageIndex":
        """One project name per line (gzip or plain); blank and invalid lines are counted, not used."""
        names: set[str] = set()
        skipped = 0
        try:
            with open_text(path) as f:
                for line in f:
                    name = line.strip()
                    if not name:
                        continue
                    if _VALID.match(name):
                        names.add(normalize(name))
                    else:
                        skipped += 1
        except (OSError, EOFError, UnicodeDecodeError) as err:
            raise DataError(f"cannot read the package index {path}: {err}") from None
        if not names:
            raise DataError(f"the package index {path} holds no project names")
        return cls(names, frozenset(sys.stdlib_module_names), str(path),
                   sha256_file(path), skipped)

    def lookup(self, import_name: str, aliases: bool = False) -> tuple[bool, str]:
        """(exists, evidence) for a top-level import name.

        Standard-library names are matched exactly, as ``import`` does (``Queue`` and
        ``cprofile`` do not exist in Python 3); PyPI names after PEP 503 normalisation."""
        if import_name in self.stdlib:
            return True, "stdlib"
        if normalize(import_name) in self.names:
            return True, "pypi"
        project = IMPORT_TO_PROJECT.get(import_name) if aliases else None
        if project and normalize(project) in self.names:
            return True, f"pypi (import name of {project})"
        return False, "not in stdlib or PyPI snapshot"

    @staticmethod
    def stdlib_description() -> str:
        return f"sys.stdlib_module_names of Python {sys.version_info.major}.{sys.version_info.minor}"
