"""Find benchmark data: a configured directory, then the local cache, then the public source.

Data files are named by a path relative to a data root (``halogen/prompts/prompts_code.csv.gz``).
The same names are used in ``../shared/data`` beside a development checkout, in the cache and in
the download table below, so a run is reproducible wherever its files came from: the manifest
records each file's sha256.

Downloads come from pinned sources only, which the benchmarks publish (``publish``: a data name's
public URL, and the sha256 each file must have, as published, before it is gzipped into the
cache; HALOGEN's are ``halogen/published.py``); a mirror (``$HALLUSCOPE_SOURCE_BASE_URL``) must
serve the same files.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import os
import re
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from halluscope.errors import DataError, clip

# recorded responses and judge outputs can be longer than the csv module's 128 KiB field default
csv.field_size_limit(sys.maxsize)

PYPI_SIMPLE_INDEX = "https://pypi.org/simple/"


@dataclass(frozen=True)
class Published:
    """Where the data names under ``prefix`` are published: ``url`` of a name (without its
    ``.gz``), and the sha256 each name's file must have there (``pins``)."""

    prefix: str
    url: Callable[[str], str]
    pins: Mapping[str, str]


_PUBLISHED: dict[str, Published] = {}


def publish(source: Published) -> None:
    """Called by a benchmark package when it is imported: its files become downloadable."""
    _PUBLISHED[source.prefix] = source


def published(rel_path: str) -> Published | None:
    return next((p for prefix, p in _PUBLISHED.items() if rel_path.startswith(prefix)), None)

# Environment variables a user (or a test) may set.
ENV_DATA_DIR = "HALLUSCOPE_DATA_DIR"
ENV_SOURCE_BASE = "HALLUSCOPE_SOURCE_BASE_URL"  # replaces the public hosts, e.g. a mirror

# Folders of the system, never a data or knowledge file's: credentials (/etc/shadow, a pod's
# service-account token under /run/secrets), devices that block or never end (/dev/stdin,
# /dev/zero), the kernel's views (/proc/self/environ)
SYSTEM_FOLDERS = ("/etc", "/proc", "/sys", "/dev", "/boot", "/run", "/var/run")
# JSON nested deeper than this is refused before the parser recurses into it
MAX_JSON_DEPTH = 64
_URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(//)?")


def url_scheme(ref: str) -> str | None:
    """The scheme of a URL (``s3``, ``file``, ``http``), lower case; None for a plain path."""
    m = _URL_SCHEME.match(ref)
    return m.group(1).lower() if m and (m.group(2) or m.group(1).lower() == "file") else None


def system_path_problem(path: str | Path) -> str | None:
    """Why a local path may not be read as data: it is in (or links into) a system folder."""
    text = str(path)
    try:
        candidates = {os.path.abspath(os.path.expanduser(text)), os.path.realpath(os.path.expanduser(text))}
    except (OSError, ValueError):
        return "is not a usable path"
    for c in sorted(candidates):
        for folder in SYSTEM_FOLDERS:
            if c == folder or c.startswith(folder + "/"):
                return f"is in the system folder {folder}: data and knowledge files are never read from there"
    return None


def _repo_shared_data() -> Path | None:
    """A development checkout keeps the project's data beside it in ../shared/data."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent.parent / "shared" / "data"
        if (parent / "pyproject.toml").exists() and candidate.is_dir():
            return candidate
    return None


def public_url(rel_path: str) -> str:
    """The public URL a data file is downloaded from (uncompressed; gzipped into the cache)."""
    base = os.environ.get(ENV_SOURCE_BASE)
    plain = rel_path[:-3] if rel_path.endswith(".gz") else rel_path
    if base:
        return f"{base.rstrip('/')}/{plain}"
    source = published(rel_path)
    if source is None:
        raise DataError(f"no public source is known for data file {rel_path}")
    return source.url(plain)


def _fetch(url: str, what: str, accept: str | None = None) -> bytes:
    headers = {"User-Agent": "halluscope", **({"Accept": accept} if accept else {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=120) as resp:
            return resp.read()
    except OSError as err:
        raise DataError(f"{what} is not available locally and downloading {url} failed: {err}") from None


def _download(url: str, dest: Path, rel_path: str) -> None:
    """Fetch a pinned data file, check its sha256, and store it (gzipped if its name says so)."""
    source = published(rel_path)
    expected = source.pins.get(rel_path) if source else None
    if expected is None:
        raise DataError(f"data file {rel_path} has no pinned sha256, so it is not downloaded: put it in data.dir")
    body = _fetch(url, f"data file {rel_path}")
    got = hashlib.sha256(body).hexdigest()
    if got != expected:
        raise DataError(f"{url} is not the pinned {rel_path}: sha256 {got}, expected {expected}; "
                        "nothing was stored")
    _store(body, dest, gzipped=rel_path.endswith(".gz"))


def _live_pypi_names() -> bytes:
    """Today's PyPI project names, one per line, from the JSON simple index (PEP 691)."""
    body = _fetch(PYPI_SIMPLE_INDEX, "the live PyPI index", accept="application/vnd.pypi.simple.v1+json")
    try:
        return "\n".join(p["name"] for p in json.loads(body)["projects"]).encode() + b"\n"
    except (ValueError, KeyError, TypeError) as err:
        raise DataError(f"{PYPI_SIMPLE_INDEX} did not answer with the JSON project list (PEP 691): {err}") from None


def _fetch_any(url: str) -> bytes:
    import fsspec

    from halluscope.storage.fs import Location

    try:
        return Location(*fsspec.core.url_to_fs(url)).read_bytes()  # within the storage deadline
    except (OSError, ValueError) as err:
        raise DataError(f"cannot fetch {url}: {err}") from None


def _store(body: bytes, dest: Path, gzipped: bool) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=dest.parent, delete=False) as tmp:
        if gzipped and not body[:2] == b"\x1f\x8b":
            with gzip.GzipFile(fileobj=tmp, mode="wb", mtime=0) as gz:
                gz.write(body)
        else:
            tmp.write(body)
    os.replace(tmp.name, dest)


class DataResolver:
    """Resolves relative data names to local files; picklable so Ray workers can use it."""

    def __init__(self, data_dir: str | None = None, cache_dir: str = "~/.cache/halluscope/data",
                 download: bool = True) -> None:
        self.data_dir = data_dir
        self.cache_dir = cache_dir
        self.download = download

    def roots(self) -> list[Path]:
        roots = [Path(d).expanduser() for d in (self.data_dir, os.environ.get(ENV_DATA_DIR)) if d]
        shared = _repo_shared_data()
        if shared:
            roots.append(shared)
        return roots

    def resolve(self, rel_path: str) -> Path:
        for root in self.roots():
            try:
                found = (root / rel_path).is_file()
            except OSError as err:  # a name too long for the filesystem
                raise DataError(f"data file {clip(rel_path)}: {err.strerror}") from None
            if found:
                why = system_path_problem(root / rel_path)
                if why:
                    raise DataError(f"data file {clip(rel_path)} {why}")
                return root / rel_path
        cached = Path(self.cache_dir).expanduser() / rel_path
        if cached.is_file():
            return cached
        if not self.download:
            searched = ", ".join(str(r) for r in self.roots()) or "(no data directory configured)"
            raise DataError(f"data file {rel_path} not found in {searched} or the cache {cached.parent}, "
                            "and downloads are disabled (data.download: false)")
        _download(public_url(rel_path), cached, rel_path)
        return cached

    def resolve_any(self, ref: str) -> Path:
        """A data name, a local path, or a URL (fetched once into the cache)."""
        scheme = url_scheme(ref)
        if scheme == "file":  # a local path: the same checks as one
            ref = re.sub(r"^file:(//)?", "", ref, flags=re.IGNORECASE)
        elif scheme is not None:
            cached = Path(self.cache_dir).expanduser() / "urls" / hashlib.sha256(ref.encode()).hexdigest()[:16] \
                / ref.rstrip("/").rsplit("/", 1)[-1][:100]
            if not cached.is_file():  # the live PyPI index too: a snapshot of the day it was first used
                _store(_live_pypi_names() if ref == PYPI_SIMPLE_INDEX else _fetch_any(ref), cached, gzipped=False)
            return cached
        path = Path(ref).expanduser()
        try:
            local = path.is_absolute() or path.exists()
            if local:
                why = system_path_problem(path)
                if why:
                    raise DataError(f"data file {clip(ref)} {why}")
                if not path.is_file():
                    raise DataError(f"data file {'is not a regular file' if path.exists() else 'not found'}: "
                                    f"{clip(ref)}")
        except OSError as err:  # a name too long for the filesystem, a folder that cannot be entered
            raise DataError(f"data file {clip(ref)}: {err.strerror or err}") from None
        return path if local else self.resolve(ref)


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return sha256_stream(f)


def sha256_stream(f: IO[bytes]) -> str:
    """sha256 of the rest of an open binary file (local or fsspec), read in 1 MiB chunks so a
    file larger than memory can be hashed."""
    h = hashlib.sha256()
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
    return h.hexdigest()


def open_text(path: Path, tolerant: bool = False) -> IO[str]:
    """Open a possibly gzipped UTF-8 text file. ``tolerant`` (files users bring): a BOM is dropped
    and bytes that are not UTF-8 come through as surrogates (``surrogateescape``), so one bad row
    can be quarantined instead of failing the file."""
    encoding, errors = ("utf-8-sig", "surrogateescape") if tolerant else ("utf-8", "strict")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding=encoding, errors=errors, newline="")
    return open(path, encoding=encoding, errors=errors, newline="")


def csv_rows(f: IO[str], path: Path) -> Iterator[tuple[int, dict[str, str] | None, str]]:
    """(row index, row, problem) of an open CSV file: a row that cannot be used comes back as
    None with the reason (more or fewer fields than the header)."""
    reader = csv.DictReader(f)
    if not reader.fieldnames:
        raise DataError(f"{path}: empty file or no header row")
    for i, row in enumerate(reader):
        if None in row:
            yield i, None, f"{len(row[None])} more field(s) than the header"
        elif any(v is None for v in row.values()):
            yield i, None, f"missing field(s) {[k for k, v in row.items() if v is None]}"
        else:
            yield i, row, ""


def jsonl_rows(lines: Iterable[str | bytes], start: int = 1, invalid: str = "invalid JSON: {error}",
               not_object: str = "not a JSON object") -> Iterator[tuple[int, dict | None, str]]:
    """(line number, object, problem) of every non-blank line of JSON lines: a line that is not JSON
    (or, as bytes, not UTF-8) or not an object comes back as None with the reason, so each reader
    keeps its own policy (quarantine, skip, fail). ``invalid`` and ``not_object`` word the reason
    ({error}: the parser's exception; {kind}: the JSON value's Python type) where a reader's wording
    is fixed."""
    for number, line in enumerate(lines, start):
        if not line.strip():
            continue
        deep = json_depth_problem(line)
        if deep:
            yield number, None, invalid.format(error=deep)
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as err:
            yield number, None, invalid.format(error=err)
            continue
        if isinstance(value, dict):
            yield number, value, ""
        else:
            yield number, None, not_object.format(kind=type(value).__name__)


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_JSON_BRACKETS = re.compile(r"[\[\]{}]")


def json_depth_problem(line: str | bytes, limit: int = MAX_JSON_DEPTH) -> str | None:
    """Why a JSON text is nested too deep to parse (json.loads recurses once per level: 200,000
    opening brackets end the process's stack), or None. Cheap for the usual row: only a line with
    more than ``limit`` opening brackets is scanned, its strings left out."""
    opening = line.count(b"[") + line.count(b"{") if isinstance(line, bytes) else line.count("[") + line.count("{")
    if opening <= limit:
        return None
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    depth = 0
    for m in _JSON_BRACKETS.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if m.group() in "[{" else -1
        if depth > limit:
            return f"nested more than {limit} levels deep (arrays and objects)"
    return None
