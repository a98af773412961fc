"""Run ids, model ids and storage roots that would write outside a run's folder are refused, with a
clear error, whichever way they come in (CLI, config, API) and on local and S3 roots alike."""

import boto3
import pytest
import yaml
from tests.support.servers import s3_storage

from halluscope.cli import main
from halluscope.config.load import parse_config
from halluscope.errors import ConfigError
from halluscope.pipeline.runner import run
from halluscope.resolve.run import ResolvedRun
from halluscope.storage.fs import Location
from halluscope.storage.names import check_run_id
from halluscope.storage.run import RunStore

BAD_RUN_IDS = ["../x", "..", ".", "_cache", "testsets", "a/b", "x" * 300, "-rf", "a b", ""]


def _config(storage: dict, **extra) -> dict:
    return {"storage": storage, "tasks": ["halogen/code"], "models": [{"id": "m", "backend": "replay"}],
            "data": {"download": False}, **extra}


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    """(storage spec, a function listing everything written anywhere the test could reach)."""
    if request.param == "local":
        (tmp_path / "runs").mkdir()
        yield {"root": f"file://{tmp_path}/runs"}, lambda: sorted(str(p) for p in tmp_path.rglob("*")
                                                                    if p.name not in ("runs", "run.yaml"))
    else:
        endpoint = request.getfixturevalue("s3_endpoint")
        bucket = request.getfixturevalue("bucket")
        s3 = boto3.client("s3", endpoint_url=endpoint)
        yield s3_storage(endpoint, f"s3://{bucket}/runs"), \
            lambda: [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


@pytest.mark.parametrize("run_id", BAD_RUN_IDS)
def test_bad_run_id_on_the_command_line(root, run_id, tmp_path, capsys):
    storage, written = root
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(_config(storage)))
    with pytest.raises(SystemExit) as exited:
        main(["run", str(cfg), f"--run-id={run_id}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --run-id: run id" in err and "Traceback" not in err
    assert written() == []


@pytest.mark.parametrize("run_id", BAD_RUN_IDS)
def test_bad_run_id_in_a_config(root, run_id, tmp_path, capsys):
    storage, written = root
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(_config(storage, run_id=run_id)))
    assert main(["run", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("halluscope: error: invalid run config") and "run_id: Value error, run id" in err
    assert written() == []


@pytest.mark.parametrize("run_id", ["../x", "..", ".", "_cache"])
def test_bad_run_id_through_the_api(root, run_id):
    storage, written = root
    with pytest.raises(ConfigError, match="run id"):
        run(ResolvedRun.of(parse_config(_config(storage))), run_id=run_id)
    with pytest.raises(ConfigError, match="run id"):
        RunStore(Location.from_url(storage["root"]), run_id)
    assert written() == []


@pytest.mark.parametrize("model_id", ["..", "../x", "a/../b", ".", "_cache", "x" * 300, "<b>x</b>", "a|b",
                                      "\x1b[31mred", "a/", " a"])
def test_bad_model_ids_are_refused(model_id):
    cfg = _config({"root": "file://./runs"})
    cfg["models"] = [{"id": model_id, "backend": "replay"}]
    with pytest.raises(ConfigError, match=r"models\.0\..*model id"):
        parse_config(cfg)


@pytest.mark.parametrize("model_id", ["gpt_3.5_turbo_0125", "meta-llama/Llama-3.1-8B-Instruct", "judge/scripted v1"])
def test_ordinary_model_ids_pass(model_id):
    cfg = _config({"root": "file://./runs"})
    cfg["models"] = [{"id": model_id, "backend": "replay"}]
    assert parse_config(cfg).models[0].id == model_id


def test_ordinary_run_ids_pass():
    for run_id in ("halogen-14", "20250101-120000-abcd1234", "a.b_c-1", "x" * 128):
        assert check_run_id(run_id) == run_id


def test_unsupported_storage_root_is_a_clear_error(tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(_config({"root": "ftp://example.org/runs"})))
    assert main(["run", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "storage.root: Value error, storage root 'ftp://example.org/runs' is not supported" in err
    cfg.write_text(yaml.safe_dump(_config({"root": f"file://{tmp_path}/runs"})))
    with pytest.raises(SystemExit):
        main(["run", str(cfg), "--storage-root", "ftp://example.org/runs"])
    assert "argument --storage-root: storage root" in capsys.readouterr().err
