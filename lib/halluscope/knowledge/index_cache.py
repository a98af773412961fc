"""Built indexes kept on local disk as Arrow IPC files, so every verifying actor after the first
loads them in a fraction of the build time.

Arrow holds data only: reading a planted file cannot run code (a pickle can, and the cache folder's
names are predictable, since the source's sha256 is in every manifest). A file is used only when it
is ours - owned by this user, in a folder of this user's, neither writable by anyone else - so a
file planted in a shared folder (``/tmp``) cannot change verdicts either, and only when its
metadata names the key it was built for (the source's sha256 and the layout version).

``cached_table`` keys what is derived from a data file (the replay join's index of a recorded
file, a recorded pipeline's answers) by the file's content, what else it is derived from and a
digest of the code that derives it: a run that reads the file again, in any process, loads the
columns instead of parsing it, and a changed file or changed code is never served an old index."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import sys
from collections.abc import Callable
from functools import cache, lru_cache
from pathlib import Path

import pyarrow as pa

from halluscope.sources import sha256_file
from halluscope.storage.fs import private_file_problem

_META_KEY = b"halluscope-index"
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _ours(st: os.stat_result) -> bool:
    return st.st_uid == os.getuid() and not st.st_mode & _OTHERS_WRITE


def load_table(path: Path, key: str) -> tuple[pa.Table, dict] | None:
    """The table cached at ``path`` for ``key`` and the info saved with it; None if there is none,
    it is damaged, built for another key, or not ours (the caller then builds it)."""
    try:
        with open(path, "rb") as f:
            why = private_file_problem(os.fstat(f.fileno())) or (
                None if _ours(os.stat(path.parent)) else "is in a folder of another user's or writable by others")
            if why:  # the runs' parts and caches' rule (storage.fs), hard links included
                print(f"halluscope: ignoring {path}: it {why}", file=sys.stderr)
                return None
            table = pa.ipc.open_file(f).read_all()
        meta = json.loads((table.schema.metadata or {})[_META_KEY])
    except (OSError, KeyError, ValueError, TypeError):  # ArrowInvalid is a ValueError
        return None
    if not isinstance(meta, dict) or meta.get("key") != key:
        return None
    return table.replace_schema_metadata(None), meta.get("info") or {}


def save_table(path: Path, key: str, table: pa.Table, info: dict, compression: str | None = None,
               mode: int = 0o644) -> bool:
    """Write atomically, readable by others (``mode``) but writable only by this user; True when
    written. A folder that is not ours is left alone: the index is then rebuilt by each process
    instead of shared. ``compression`` ("zstd", "lz4"): Arrow's, undone on load."""
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o755)
        st = os.stat(folder)
        if st.st_uid != os.getuid():
            return False
        if st.st_mode & _OTHERS_WRITE:  # e.g. made under umask 002 by an earlier version
            os.chmod(folder, stat.S_IMODE(st.st_mode) & ~_OTHERS_WRITE)
        meta = json.dumps({"key": key, "info": info}).encode()
        tmp = folder / f".tmp-{os.getpid()}-{path.name}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as f:
            with pa.ipc.new_file(f, table.schema.with_metadata({_META_KEY: meta}),
                                 options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
                writer.write_table(table)
        os.chmod(tmp, mode)  # whatever the umask
        os.replace(tmp, path)
        return True
    except OSError as err:  # a read-only or full disk costs speed, not the run
        print(f"halluscope: cannot cache the index at {path}: {err}", file=sys.stderr)
        return False


_DIGESTS: dict[tuple[str, int, int, int], str] = {}


def file_digest(path: Path) -> str:
    """sha256 of a file, hashed once per process for as long as its size and mtime stay the same."""
    st = os.stat(path)
    stamp = (str(path), st.st_ino, st.st_mtime_ns, st.st_size)
    if stamp not in _DIGESTS:
        _DIGESTS[stamp] = sha256_file(path)
    return _DIGESTS[stamp]


@lru_cache(maxsize=1)
def _package_digest() -> str:
    """sha256 over the Python version and every file of the halluscope package, once per process."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(sys.version.encode())
    for p in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(f"\0{p.relative_to(root)}\0".encode())
        h.update(p.read_bytes())
    return h.hexdigest()


@cache
def code_digest(*files: str) -> str:
    """sha256 over every file of the halluscope package (its code and the data it ships), the
    Python version and ``files`` (e.g. a task's module from another package): an index derived by
    code is rebuilt whenever that code changes, with no version number to remember to bump."""
    h = hashlib.sha256(_package_digest().encode())
    root = Path(__file__).resolve().parents[1]
    for f in files:
        if not Path(f).resolve().is_relative_to(root):
            h.update(f"\0{f}\0".encode())
            h.update(Path(f).read_bytes())
    return h.hexdigest()


def cached_table(folder: Path, kind: str, source: Path, depends: list, build: Callable[[], pa.Table],
                 code: tuple[str, ...] = ()) -> pa.Table:
    """The table ``build`` derives from the file ``source``: loaded from ``folder`` when one was
    saved for the same content of the file, the same ``depends`` (JSON: whatever else it is
    derived from) and the same code (``code_digest(*code)``), else built and saved there. A build
    that raises (a broken file) saves nothing, and neither does one whose file changed meanwhile.
    Saving replaces the index of the same file and ``depends`` built from other content or code,
    which no run asks for again: the folder holds one per file, not one per edit."""
    digest = file_digest(source)
    slot = hashlib.sha256(json.dumps([kind, str(source.resolve()), depends], sort_keys=True).encode()).hexdigest()
    key = hashlib.sha256(json.dumps([slot, digest, code_digest(*code)]).encode()).hexdigest()
    path = folder / f"{kind}-{slot[:16]}-{key[:16]}.arrow"
    found = load_table(path, key)
    if found is not None:
        return found[0]
    table = build()
    # private: it may hold the texts of a user's file
    if file_digest(source) == digest and save_table(path, key, table, {"source": str(source)}, "zstd", 0o600):
        for old in folder.glob(f"{kind}-{slot[:16]}-*.arrow"):
            if old != path:
                with contextlib.suppress(OSError):
                    old.unlink()
    return table
