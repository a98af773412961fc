"""Knowledge files (benchmarks.halogen.pypi_extra_names and pypi_index, the title dump, the article
stores) come from local paths or S3, never from a system folder, and over http(s) only where the config
sets data.allow_http; data.dir must be a folder."""

from __future__ import annotations

import os

import pytest
import yaml
from tests.support.servers import free_port
from tests.unit.test_cli import _replay_config

from halluscope.cli import main
from halluscope.config.load import parse_config
from halluscope.errors import ConfigError, DataError
from halluscope.sources import PYPI_SIMPLE_INDEX, DataResolver


def _config(tmp_path, **changes):
    """The replay config of test_cli (written once per test) with ``a__b=value`` set as a.b."""
    path = tmp_path / "run.yaml"
    if not path.exists():
        _replay_config(tmp_path, ["p0"])
    cfg = yaml.safe_load(path.read_text())
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = cfg
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    path.write_text(yaml.safe_dump(cfg))
    return path


def _plan_error(capsys, path) -> str:
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("halluscope: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


URL = f"http://127.0.0.1:{free_port()}/names.txt"


@pytest.mark.parametrize("ref, problem", [
    ("/etc/shadow", "is in the system folder /etc"),
    ("file:///etc/passwd", "is in the system folder /etc"),
    ("/proc/self/environ", "is in the system folder /proc"),
    ("/dev/stdin", "is in the system folder /dev"),
    (URL, "http:// URLs are not fetched unless the config sets data.allow_http: true"),
    ("ftp://127.0.0.1/names.txt", "ftp:// is not read"),
])
def test_pypi_extra_names_from_a_system_file_or_a_url_is_refused_by_plan(tmp_path, capsys, ref, problem):
    err = _plan_error(capsys, _config(tmp_path, benchmarks__halogen__pypi_extra_names=ref))
    assert f"benchmarks.halogen.pypi_extra_names: {ref}: {problem}" in err


def test_a_symbolic_link_into_a_system_folder_is_refused(tmp_path, capsys):
    (tmp_path / "names.txt").symlink_to("/etc/passwd")
    err = _plan_error(capsys, _config(tmp_path, benchmarks__halogen__pypi_extra_names=str(tmp_path / "names.txt")))
    assert "is in the system folder /etc" in err
    with pytest.raises(DataError, match="system folder /etc"):  # and where a worker resolves it
        DataResolver(cache_dir=str(tmp_path / "c")).resolve_any(str(tmp_path / "names.txt"))


@pytest.mark.parametrize("field, spec", [
    ("benchmarks.halogen.titles.dump", {"benchmarks": {"halogen": {"titles": {"source": "offline", "dump": URL}}}}),
    ("benchmarks.halogen.wiki.articles", {"benchmarks": {"halogen": {"wiki": {"articles": URL}}}}),
    ("benchmarks.halogen.wiki.encoder", {"benchmarks": {"halogen": {"wiki": {"articles": "a.db", "encoder": URL}}}}),
    ("benchmarks.halogen.pypi_index", {"benchmarks": {"halogen": {"pypi_index": URL}}}),
    ("benchmarks.hallulens.wiki.articles", {"benchmarks": {"hallulens": {"wiki": {"articles": URL}}}}),
])
def test_http_knowledge_needs_data_allow_http(field, spec):
    base = {"tasks": ["halogen/code"], "models": [{"id": "a", "backend": "replay"}]}
    with pytest.raises(ConfigError, match=rf"{field}: {URL}: http:// URLs are not fetched unless"):
        parse_config({**base, **spec})
    data = {**spec.get("data", {}), "allow_http": True}
    parse_config({**base, **spec, "data": data})


def test_the_live_pypi_index_and_s3_stay_allowed():
    base = {"tasks": ["halogen/code"], "models": [{"id": "a", "backend": "replay"}]}
    parse_config({**base, "benchmarks": {"halogen": {"pypi_index": PYPI_SIMPLE_INDEX}}})
    parse_config({**base, "benchmarks": {"halogen": {"pypi_extra_names": "s3://bucket/names.txt"}}})
    with pytest.raises(ConfigError, match="pypi_extra_names: https://pypi.org/simple/: http"):  # that list alone
        parse_config({**base, "benchmarks": {"halogen": {"pypi_extra_names": PYPI_SIMPLE_INDEX}}})


def test_resolver_refuses_system_files_and_file_urls_into_them(tmp_path):
    resolver = DataResolver(cache_dir=str(tmp_path / "c"))
    for ref in ("/etc/passwd", "file:///etc/passwd", "file:/etc/passwd"):
        with pytest.raises(DataError, match="system folder /etc"):
            resolver.resolve_any(ref)
    with pytest.raises(DataError, match="system folder /etc"):  # a data name climbing out of data.dir
        DataResolver(str(tmp_path), cache_dir=str(tmp_path / "c")).resolve("../" * 30 + "etc/passwd")
    names = tmp_path / "names.txt"
    names.write_text("a\n")
    assert resolver.resolve_any(f"file://{names}") == names


def test_data_dir_must_be_a_folder(tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    for folder, why in ((tmp_path / "missing", "does not exist"), (fifo, "is not a folder"),
                        (plain, "is not a folder")):
        err = _plan_error(capsys, _config(tmp_path, data__dir=str(folder)))
        assert f"data.dir: {folder} {why}" in err
    err = _plan_error(capsys, _config(tmp_path, data__dir="/etc/passwd"))
    assert "data.dir" in err and "/etc/passwd is in the system folder /etc" in err
