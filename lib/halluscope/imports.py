"""Importing a heavy library without the optional modules it would pull in for features we never use."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import cast


@contextmanager
def hidden(*names: str) -> Iterator[None]:
    """Inside the block, importing any of ``names`` not already loaded raises ImportError, which
    libraries that treat them as optional take as "not installed" (transformers imports
    scikit-learn for one generation feature, NLTK imports SciPy and scikit-learn for statistics:
    seconds of each worker's start). They stay importable after the block; a library that checked
    for them inside it keeps its answer."""
    absent = [n for n in names if n not in sys.modules]
    # typeshed types sys.modules as holding modules only; the import system documents None
    # entries (an import of such a name raises ImportError), which is what this relies on
    modules = cast("dict[str, ModuleType | None]", sys.modules)
    modules.update(dict.fromkeys(absent))
    try:
        yield
    finally:
        for n in absent:
            if sys.modules.get(n, ...) is None:
                del sys.modules[n]
