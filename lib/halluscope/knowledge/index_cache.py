"""Built indexes kept on local disk as Arrow IPC files, so every verifying actor after the first
loads them in a fraction of the build time.

Arrow holds data only: reading a planted file cannot run code (a pickle can, and the cache folder's
names are predictable, since the source's sha256 is in every manifest). A file is used only when it
is ours - owned by this user, in a folder of this user's, neither writable by anyone else - so a
file planted in a shared folder (``/tmp``) cannot change verdicts either, and only when its
metadata names the key it was built for (the source's sha256 and the layout version)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pyarrow as pa

_META_KEY = b"halluscope-index"
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _ours(st: os.stat_result) -> bool:
    return st.st_uid == os.getuid() and not st.st_mode & _OTHERS_WRITE


def load_table(path: Path, key: str) -> tuple[pa.Table, dict] | None:
    """The table cached at ``path`` for ``key`` and the info saved with it; None if there is none,
    it is damaged, built for another key, or not ours (the caller then builds it)."""
    try:
        with open(path, "rb") as f:
            if not (_ours(os.fstat(f.fileno())) and _ours(os.stat(path.parent))):
                print(f"halluscope: ignoring {path}: the file or its folder is another user's or "
                      "writable by others", file=sys.stderr)
                return None
            table = pa.ipc.open_file(f).read_all()
        meta = json.loads((table.schema.metadata or {})[_META_KEY])
    except (OSError, KeyError, ValueError, TypeError):  # ArrowInvalid is a ValueError
        return None
    if not isinstance(meta, dict) or meta.get("key") != key:
        return None
    return table.replace_schema_metadata(None), meta.get("info") or {}


def save_table(path: Path, key: str, table: pa.Table, info: dict) -> None:
    """Write atomically, readable by others but writable only by this user. A folder that is not
    ours is left alone: the index is then rebuilt by each process instead of shared."""
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o755)
        st = os.stat(folder)
        if st.st_uid != os.getuid():
            return
        if st.st_mode & _OTHERS_WRITE:  # e.g. made under umask 002 by an earlier version
            os.chmod(folder, stat.S_IMODE(st.st_mode) & ~_OTHERS_WRITE)
        meta = json.dumps({"key": key, "info": info}).encode()
        tmp = folder / f".tmp-{os.getpid()}-{path.name}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "wb") as f:
            with pa.ipc.new_file(f, table.schema.with_metadata({_META_KEY: meta})) as writer:
                writer.write_table(table)
        os.chmod(tmp, 0o644)  # whatever the umask
        os.replace(tmp, path)
    except OSError as err:  # a read-only or full disk costs speed, not the run
        print(f"halluscope: cannot cache the index at {path}: {err}", file=sys.stderr)
