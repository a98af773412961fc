"""Where HALOGEN's files are published: its repository at the commit its released numbers were
computed at, each file pinned by the sha256 it has there (``data_sha256.json``, the file as
published, before it is gzipped into the cache). The PyPI name snapshot the code domain checks
against has no public copy: PyPI's live index changes daily, so it is taken only when a config
asks for it (``benchmarks.halogen.pypi_index: https://pypi.org/simple/``)."""

from __future__ import annotations

import json
from importlib import resources

from halluscope.errors import DataError
from halluscope.sources import PYPI_SIMPLE_INDEX, Published, publish

COMMIT = "0bd13ac4d95443d95321b5da53a1a3cffa5e7bd9"  # the released numbers' commit
RAW = f"https://raw.githubusercontent.com/AbhilashaRavichander/HALoGEN/{COMMIT}"
# data name -> sha256 of the file as published (uncompressed)
PINS: dict[str, str] = json.loads(resources.files(__package__).joinpath("data_sha256.json").read_text())
# our names of HALOGEN's folders -> the repository's (recorded outputs are its model_hallucinations/)
_FOLDERS = (("recorded/results/", "scorers/results/"), ("recorded/", "model_hallucinations/"))


def repository_url(plain: str) -> str:
    """The repository's URL of a data name under ``halogen/`` (without its ``.gz``)."""
    path = plain[len("halogen/"):]
    for ours, theirs in _FOLDERS:
        if path.startswith(ours):
            path = theirs + path[len(ours):]
            break
    return f"{RAW}/{path}"


def no_public_copy(plain: str) -> str:
    raise DataError(f"the pinned PyPI name snapshot {plain}.gz has no public copy (PyPI's live index changes "
                    "daily): put the file in data.dir, or set benchmarks.halogen.pypi_index: "
                    f"{PYPI_SIMPLE_INDEX} to take today's live index (its sha256 goes into the manifest)")


publish(Published("halogen/", repository_url, PINS))
publish(Published("pypi/", no_public_copy, PINS))
