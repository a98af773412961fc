"""Built indexes kept on local disk as Arrow IPC files, so every verifying actor after the first
loads them in a fraction of the build time.

Arrow holds data only: reading a planted file cannot run code (a pickle can, and the cache folder's
names are predictable, since the source's sha256 is in every manifest). A file is used only when it
is ours - a regular file with one name (no hard link), neither it nor its folder a symbolic link, owned by
this user, in a folder of this user's, neither writable by anyone else - so a file planted in a
shared folder (``/tmp``) cannot change verdicts either; only when its metadata names the key it was
built for (the source's sha256 and the layout version); and only when its rows hash to the content
digest recorded beside that key when it was built, so rows rewritten under a valid key are rebuilt
from the source. The digest sits in the file itself: it stops a file edited by anything that does
not recompute it, not this user's own processes, which can write the cache and recompute it.

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
from halluscope.storage.fs import OTHERS_WRITE, Location, UntrustedPath, private_folder_problem, read_private

_META_KEY = b"halluscope-index"


def _content_digest(table: pa.Table) -> str:
    """sha256 of the table as Arrow's IPC format lays it out uncompressed, schema metadata aside:
    the same for the table a build returns as for the one decoded from its file (Arrow serialises
    a sliced or chunked column canonically), so a load can check the rows are those saved."""
    h = hashlib.sha256(table.schema.remove_metadata().serialize())
    for batch in table.to_batches():
        h.update(batch.serialize())
    return h.hexdigest()


def _ignore(path: Path, why: str) -> None:
    print(f"halluscope: ignoring {path}: it {why}", file=sys.stderr)


def load_table(path: Path, key: str) -> tuple[pa.Table, dict] | None:
    """The table cached at ``path`` for ``key`` and the info saved with it; None if there is none,
    it is damaged, built for another key, not ours or not the rows that were built (the caller then
    builds it). Neither the file nor its folder is followed through a symbolic link."""
    folder = path.parent
    where = Location.from_url(f"file://{folder}")
    try:
        # the runs' parts and caches' rule (storage.fs): links, hard or symbolic, owners, modes
        data = read_private(where, path.name)
        why = private_folder_problem(os.lstat(folder))
        if why:
            _ignore(path, f"is in {folder}, which {why}")
            return None
        table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
        meta = json.loads((table.schema.metadata or {})[_META_KEY])
    except UntrustedPath as err:
        _ignore(path, err.reason if err.url == where.child(path.name).url else f"is in {err.url}, which {err.reason}")
        return None
    except (OSError, KeyError, ValueError, TypeError):  # ArrowInvalid is a ValueError
        return None
    if not isinstance(meta, dict) or meta.get("key") != key or "sha256" not in meta:
        return None  # another key's, or an earlier layout's (no digest): rebuilt over
    table = table.replace_schema_metadata(None)
    found = _content_digest(table)
    if found != meta["sha256"]:
        _ignore(path, f"holds rows other than those built for its key (sha256 {found[:16]}..., "
                      f"{str(meta['sha256'])[:16]}... recorded)")
        return None
    return table, meta.get("info") or {}


def save_table(path: Path, key: str, table: pa.Table, info: dict, compression: str | None = None,
               mode: int = 0o644) -> bool:
    """Write atomically, readable by others (``mode``) but writable only by this user; True when
    written. A folder that is not ours is left alone: the index is then rebuilt by each process
    instead of shared. ``compression`` ("zstd", "lz4"): Arrow's, undone on load."""
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o755)
        st = os.lstat(folder)
        if st.st_uid != os.getuid() or not stat.S_ISDIR(st.st_mode):  # another user's, or a link
            return False
        if st.st_mode & OTHERS_WRITE:  # e.g. made under umask 002 by an earlier version
            os.chmod(folder, stat.S_IMODE(st.st_mode) & ~OTHERS_WRITE)
        meta = json.dumps({"key": key, "info": info, "sha256": _content_digest(table)}).encode()
        tmp = folder / f".tmp-{os.getpid()}-{path.name}"
        with contextlib.suppress(FileNotFoundError):  # a crashed process's of the same pid
            os.unlink(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
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
