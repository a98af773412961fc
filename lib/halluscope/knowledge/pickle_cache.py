"""Built indexes kept as pickles on local disk, so every verifying actor after the first loads
them in a fraction of the build time. The caller keys the file by the source's sha256."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")


def cached_pickle(cache: Path, build: Callable[[], T]) -> T:
    """The object pickled at ``cache``, else ``build()``'s, written atomically for the next caller.
    A damaged or outdated pickle is rebuilt."""
    if cache.is_file():
        try:
            with open(cache, "rb") as f:
                return pickle.load(f)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError):
            pass
    obj = build()
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(f".tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, cache)
    return obj
