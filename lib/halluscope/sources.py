"""Find benchmark data: a configured directory, then the local cache, then the public source.

Data files are named by a path relative to a data root (``halogen/prompts/prompts_code.csv.gz``).
The same names are used in ``../shared/data`` beside a development checkout, in the cache and in
the download table below, so a run is reproducible wherever its files came from: the manifest
records each file's sha256.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tempfile
import urllib.request
from pathlib import Path
from typing import IO

from halluscope.errors import DataError

HALOGEN_RAW = "https://raw.githubusercontent.com/AbhilashaRavichander/HALoGEN/main"
PYPI_SIMPLE_INDEX = "https://pypi.org/simple/"

# Environment variables a user (or a test) may set.
ENV_DATA_DIR = "HALLUSCOPE_DATA_DIR"
ENV_SOURCE_BASE = "HALLUSCOPE_SOURCE_BASE_URL"  # replaces the public hosts, e.g. a mirror


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
    if plain.startswith("halogen/"):
        return f"{HALOGEN_RAW}/{plain[len('halogen/'):]}"
    if plain == "pypi/project-names.txt":
        return PYPI_SIMPLE_INDEX
    raise DataError(f"no public source is known for data file {rel_path}")


def _download(url: str, dest: Path, rel_path: str) -> None:
    headers = {"User-Agent": "halluscope"}
    if url == PYPI_SIMPLE_INDEX:
        headers["Accept"] = "application/vnd.pypi.simple.v1+json"
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            body = resp.read()
    except OSError as err:
        raise DataError(f"data file {rel_path} is not available locally and downloading {url} failed: {err}") from None
    if url == PYPI_SIMPLE_INDEX:
        import json

        try:
            body = "\n".join(p["name"] for p in json.loads(body)["projects"]).encode() + b"\n"
        except (ValueError, KeyError, TypeError) as err:
            raise DataError(f"{url} did not answer with the JSON project list (PEP 691): {err}") from None
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=dest.parent, delete=False) as tmp:
        if rel_path.endswith(".gz") and not body[:2] == b"\x1f\x8b":
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
            if (root / rel_path).is_file():
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
        if "://" in ref:
            cached = Path(self.cache_dir).expanduser() / "urls" / hashlib.sha256(ref.encode()).hexdigest()[:16] \
                / ref.rstrip("/").rsplit("/", 1)[-1]
            if not cached.is_file():
                import fsspec

                try:
                    with fsspec.open(ref, "rb") as src:
                        body = src.read()
                except (OSError, ValueError) as err:
                    raise DataError(f"cannot fetch {ref}: {err}") from None
                cached.parent.mkdir(parents=True, exist_ok=True)
                tmp = cached.with_suffix(cached.suffix + ".tmp")
                tmp.write_bytes(body)
                os.replace(tmp, cached)
            return cached
        path = Path(ref).expanduser()
        if path.is_absolute() or path.exists():
            if not path.is_file():
                raise DataError(f"data file not found: {ref}")
            return path
        return self.resolve(ref)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def open_text(path: Path) -> IO[str]:
    """Open a possibly gzipped text file."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return open(path, "r", encoding="utf-8", newline="")
