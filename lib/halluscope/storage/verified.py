"""The one way a run reads back the Parquet parts it, or an earlier run, wrote where others may
write too (the call cache, a served model's staged generations; a run's committed parts are
checked the same way, by ``storage.run``).

A part is named by the sha256 of its bytes, ``part-<sha256>.parquet``, and is used only when

- its bytes still hash to its name (a part altered after it was written is not used),
- it is a Parquet file with the expected columns,
- on a local filesystem: it is a regular file directly in its folder, neither of them a symbolic
  link (lstat, never followed), owned by this user and writable by no one else. On S3 and other
  object stores there are no owners or links; the digest is what is checked there (whoever can
  write the bucket is trusted, as they are for the run's results).

Anything else in the folder - a planted or altered part, a foreign file, a part that is not
Parquet - is skipped with one warning naming the file and the reason (once per file per process),
reported to the caller, and never fails the run. A folder that is a symbolic link (or not a
folder) is not read at all, and nothing is written into it.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
import threading
from collections.abc import Callable, Iterator

import pyarrow as pa

from halluscope.storage.fs import Location, UntrustedPath, list_private, read_private, write_private
from halluscope.storage.parquet import read_parquet

logger = logging.getLogger(__name__)

_PART = re.compile(r"part-([0-9a-f]{64})\.parquet")
_skipped: dict[str, str] = {}  # url -> reason, every file or folder skipped in this process
_skipped_lock = threading.Lock()


def is_part_name(name: str) -> bool:
    """Whether ``name`` is one ``digest_name`` gives (its content still to be checked: ``read_parts``)."""
    return _PART.fullmatch(name) is not None


def digest_name(data: bytes) -> str:
    """The name a part's bytes are stored under: their sha256."""
    return f"part-{hashlib.sha256(data).hexdigest()}.parquet"


def skipped_parts() -> dict[str, str]:
    """Every file or folder skipped in this process so far, with the reason."""
    with _skipped_lock:
        return dict(_skipped)


def skip(found: dict[str, str] | None, what: str, url: str, reason: str, consequence: str) -> None:
    """Record ``url`` as not used (in ``found``, if given, and for the process: ``skipped_parts``),
    warning once per file."""
    if found is not None:
        found[url] = reason
    with _skipped_lock:
        first = url not in _skipped
        _skipped[url] = reason
    if first:
        logger.warning("%s: skipping %s: it %s; %s", what, url, reason, consequence)


def trusted_bytes(folder: Location, name: str, digest: str) -> tuple[bytes | None, str]:
    """The bytes of ``name`` in ``folder`` if they can be used: read as ``read_private`` allows
    and hashing to ``digest`` (the sha256 its name carries); else None and why not."""
    try:
        data = read_private(folder, name)
    except UntrustedPath as err:
        return None, err.reason
    except OSError as err:
        return None, f"cannot be read ({err.strerror or err})"
    if hashlib.sha256(data).hexdigest() != digest:
        return None, "does not hash to the sha256 in its name (altered after it was written)"
    return data, ""


def _checked(folder: Location, name: str, schema: pa.Schema,
             foreign: Callable[[str], str]) -> tuple[pa.Table | None, str]:
    """A checked part's table, or None and why it is not used."""
    found = _PART.fullmatch(name)
    if found is None:
        return None, foreign(name)
    data, why = trusted_bytes(folder, name, found[1])
    if data is None:
        return None, why
    try:
        table = read_parquet(io.BytesIO(data))
    except (pa.ArrowException, OSError, ValueError) as err:
        return None, f"is not a readable Parquet file ({type(err).__name__})"
    if [(f.name, f.type) for f in table.schema] != [(f.name, f.type) for f in schema]:
        return None, "does not have the expected columns"
    return table, ""


def _not_ours(name: str) -> str:
    return "is not a part written here (parts are named part-<sha256 of their bytes>.parquet)"


def read_parts(folder: Location, schema: pa.Schema, what: str, consequence: str, skipped: dict[str, str],
               foreign: Callable[[str], str] = _not_ours) -> Iterator[pa.Table]:
    """Each usable part of ``folder``; what is skipped goes to ``skipped`` (url -> reason) with a
    warning naming ``what`` reads it and the ``consequence``. A folder that cannot be trusted
    raises ``UntrustedPath`` (nothing read, nothing to be written there)."""
    for name in list_private(folder):
        table, why = _checked(folder, name, schema, foreign)
        if table is None:
            skip(skipped, what, folder.child(name).url, why, consequence)
        else:
            yield table


def write_part(folder: Location, data: bytes) -> str:
    """Write a part as ``read_parts`` accepts it; its name."""
    name = digest_name(data)
    write_private(folder, name, data)
    return name
