"""Which top-level import names exist: the Python standard library plus a PyPI name snapshot.

Names are compared after PEP 503 normalisation (runs of ``-``, ``_``, ``.`` become ``-``,
lower case), the same normalisation PyPI applies when it looks a project up by name; ``normalize``
is ``packaging``'s ``canonicalize_name``, which implements it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pyarrow as pa
from packaging.utils import canonicalize_name

from halluscope.errors import DataError
from halluscope.knowledge.import_names import IMPORT_TO_PROJECT
from halluscope.knowledge.index_cache import load_table, save_table
from halluscope.sources import open_text, sha256_file

SNAPSHOT = "pypi/project-names.txt.gz"
_CACHE_VERSION = 2  # bump when the normalisation or the cached layout changes
_VALID = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


normalize = canonicalize_name  # callers import it from here, beside the names it keys


class PackageIndex:
    def __init__(self, names: set[str], stdlib: frozenset[str], source: str, sha256: str,
                 skipped_lines: int = 0) -> None:
        self.names = names
        self.stdlib = stdlib
        self.source = source
        self.sha256 = sha256
        self.skipped_lines = skipped_lines

    @classmethod
    def cached(cls, path: Path, cache_dir: Path) -> PackageIndex:
        """``from_file`` once per snapshot: later loads (every verifier actor) read the normalised
        names from an Arrow file keyed by the snapshot's sha256 (see ``index_cache``)."""
        digest = sha256_file(path)
        key = f"pypi-index-v{_CACHE_VERSION}:{digest}"
        cache = cache_dir / f"pypi-index-v{_CACHE_VERSION}-{digest[:16]}.arrow"
        found = load_table(cache, key)
        if found is not None:
            table, info = found
            return cls(set(table.column("name").to_pylist()), frozenset(sys.stdlib_module_names), str(path),
                       digest, info.get("skipped_lines", 0))
        index = cls.from_file(path)
        save_table(cache, key, pa.table({"name": sorted(index.names)}), {"skipped_lines": index.skipped_lines})
        return index

    @classmethod
    def from_file(cls, path: Path) -> PackageIndex:
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
