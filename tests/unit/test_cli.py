import pytest

from halluscope.cli import _resume_command, build_parser, main


def test_tasks_lists_every_task(capsys):
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    for name in ("halogen/code", "halogen/false_presuppositions", "halogen/rationalization_binary",
                 "halogen/rationalization_numerical"):
        assert name in out


def test_bad_config_is_a_clear_error_and_writes_nothing(tmp_path, capsys):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(f"storage: {{root: file://{tmp_path}/runs}}\ntasks: [halogen/cod]\n"
                   "models: [{id: a, backend: replay}]\n")
    assert main(["run", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("halluscope: error: invalid run config") and "did you mean halogen/code" in err
    assert not (tmp_path / "runs").exists()


def test_unknown_replay_model_fails_before_ray(tmp_path, capsys):
    from tests.conftest import SHARED_DATA

    if not SHARED_DATA.exists():
        pytest.skip("needs ../shared/data")
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"storage: {{root: file://{tmp_path}/runs}}\ntasks: [halogen/code]\n"
                   "models: [{id: gpt-5, backend: replay}]\ndata: {download: false}\n")
    assert main(["run", str(cfg), "--run-id", "x"]) == 2
    assert "released no responses for model 'gpt-5'" in capsys.readouterr().err


def test_report_of_a_folder_that_is_no_run(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "no manifest.json" in capsys.readouterr().err


def _data(tmp_path, prompts):
    """A data folder with a HALOGEN code prompt file and a PyPI name list: a run's plan needs no more."""
    import gzip

    root = tmp_path / "data"
    (root / "halogen" / "prompts").mkdir(parents=True)
    (root / "pypi").mkdir()
    body = "prompt\n" + "".join(f'"{p}"\n' for p in prompts)
    (root / "halogen" / "prompts" / "prompts_code.csv.gz").write_bytes(gzip.compress(body.encode()))
    (root / "pypi" / "project-names.txt.gz").write_bytes(gzip.compress(b"numpy\n"))
    return root


def _replay_config(tmp_path, prompts, **extra):
    import json

    import yaml

    (tmp_path / "gens.jsonl").write_text("".join(json.dumps({"prompt": p, "response": "import os"}) + "\n"
                                                 for p in prompts))
    cfg = {"storage": {"root": f"file://{tmp_path}/runs"}, "tasks": ["halogen/code"],
           "data": {"dir": str(_data(tmp_path, prompts)), "download": False},
           "models": [{"id": "mine", "backend": "replay", "params": {"source": "file", "path": "gens.jsonl"}}],
           "costs": {"price_table": None}, **extra}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize("stop,status,rc", [(KeyboardInterrupt(), "interrupted", 130),
                                            (RuntimeError("worker lost"), "failed", 1)])
def test_a_stopped_run_records_why_and_prints_how_to_resume(tmp_path, capsys, monkeypatch, stop, status, rc):
    """Whatever stops a run, the last lines are halluscope's own: the error in one line (a bug's
    traceback above it), then the command that resumes the run."""
    import json

    from halluscope.pipeline import execute, runner

    def pipeline(*args, **kwargs):
        raise stop

    monkeypatch.setattr(runner, "init_ray", lambda spec, **_: None)  # the stop comes before any Ray work
    monkeypatch.setattr(execute, "execute", pipeline)
    path = _replay_config(tmp_path, ["p0", "p1"])
    assert main(["run", str(path), "--run-id", "r1", "--quiet"]) == rc
    manifest = json.loads((tmp_path / "runs" / "r1" / "manifest.json").read_text())
    assert manifest["status"] == status
    assert manifest["reason"] == ("interrupted (Ctrl-C)" if rc == 130 else "RuntimeError: worker lost")
    err = capsys.readouterr().err
    last = err.rstrip("\n").splitlines()[-3:]
    assert last == [("halluscope: interrupted" if rc == 130 else "halluscope: error: RuntimeError: worker lost"),
                    f"halluscope: run r1 is recorded as {status}; to resume it (committed work is kept),:",
                    f"  halluscope run {path} --run-id r1"]
    assert ("Traceback" in err) == (rc == 1)  # a bug's traceback, above halluscope's own lines


def test_an_unset_api_key_variable_fails_before_anything_is_written(tmp_path, capsys, monkeypatch):
    import yaml

    monkeypatch.delenv("HALLUSCOPE_TEST_UNSET_KEY", raising=False)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({
        "storage": {"root": f"file://{tmp_path}/runs"}, "tasks": ["halogen/code"],
        "models": [{"id": "api", "backend": "openai",
                    "params": {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "HALLUSCOPE_TEST_UNSET_KEY"}}]}))
    assert main(["run", str(path)]) == 2
    assert "models: 'api': params.api_key_env: environment variable HALLUSCOPE_TEST_UNSET_KEY is not set" \
        in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_plan_needs_no_storage_credentials_and_checks_replay_files(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HALLUSCOPE_TEST_S3_KEY", raising=False)
    s3 = {"root": "s3://bucket/runs", "access_key_env": "HALLUSCOPE_TEST_S3_KEY",
          "secret_key_env": "HALLUSCOPE_TEST_S3_KEY"}
    path = _replay_config(tmp_path, ["p0", "p1"], storage=s3)
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert "total: $0.0000" in out and "served models held" not in out
    (tmp_path / "gens.jsonl").unlink()
    assert main(["plan", str(path)]) == 2
    assert f"recorded generations file not found: {tmp_path}/gens.jsonl" in capsys.readouterr().err


def test_report_json_prints_only_json(tmp_path, capsys):
    import json

    (tmp_path / "manifest.json").write_text("{}")
    (tmp_path / "leaderboard.md").write_text("# halluscope leaderboard\n")
    (tmp_path / "metrics.json").write_text(json.dumps([{"model": "m", "task": "t", "n_items": 3}]))
    assert main(["report", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"model": "m", "task": "t", "n_items": 3}]


def test_missing_s3_credentials_are_one_line(capsys, monkeypatch):
    from botocore.exceptions import NoCredentialsError

    from halluscope import cli

    def boom(args):
        try:
            raise ValueError("inner")
        except ValueError:
            raise NoCredentialsError() from None

    monkeypatch.setattr(cli, "_cmd_tasks", boom)
    assert main(["tasks"]) == 2
    assert capsys.readouterr().err.startswith("halluscope: error: no S3 credentials: name the environment variables")


def test_a_folder_or_a_binary_file_as_config_is_one_line(tmp_path, capsys):
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"\x00\xff\xfe\x89")
    for path, what in ((tmp_path, "is a folder"), (binary, "is not a YAML text file")):
        assert main(["run", str(path)]) == 2
        err = capsys.readouterr().err
        assert what in err and err.count("\n") == 1


def test_report_of_a_stopped_run_says_why(tmp_path, capsys, monkeypatch):
    from halluscope.pipeline import execute, runner

    def pipeline(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "init_ray", lambda spec, **_: None)
    monkeypatch.setattr(execute, "execute", pipeline)
    assert main(["run", str(_replay_config(tmp_path, ["p0"])), "--run-id", "r2", "--quiet"]) == 130
    capsys.readouterr()
    assert main(["report", str(tmp_path / "runs" / "r2")]) == 0
    assert capsys.readouterr().out.startswith("run r2 is interrupted: partial results\nreason: interrupted (Ctrl-C)\n")


def test_the_manifest_names_the_config_file_and_the_sha256_of_its_bytes(tmp_path, monkeypatch):
    """What `halluscope run` read, as `submit` uploads it (<storage.root>/_configs/<sha256>.yaml):
    a run can be traced to the exact file it ran, CRLF line ends and all."""
    import hashlib
    import json

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    path = _replay_config(tmp_path, ["p0"])
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert main(["run", str(path), "--run-id", "r1", "--quiet"]) == 0
    manifest = json.loads((tmp_path / "runs" / "r1" / "manifest.json").read_text())
    assert manifest["config_source"] == {"uri": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def test_a_pilot_is_the_config_at_fewer_items_and_resumes_as_one(tmp_path, capsys, monkeypatch):
    """`run --max-items-per-task N`: the run the plan's --stats reads before the full run is paid for."""
    import json

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    path = _replay_config(tmp_path, ["p0", "p1", "p2"])
    assert main(["run", str(path), "--run-id", "pilot", "--max-items-per-task", "2", "--quiet"]) == 0
    manifest = json.loads((tmp_path / "runs" / "pilot" / "manifest.json").read_text())
    assert manifest["config"]["limits"]["max_items_per_task"] == 2
    assert "2 generations processed" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["run", str(path), "--max-items-per-task", "0"])
    assert "argument --max-items-per-task: a whole number of at least 1, not '0'" in capsys.readouterr().err
    args = build_parser().parse_args(["run", str(path), "--max-items-per-task", "2"])
    assert _resume_command(args, "pilot").endswith(f"run {path} --run-id pilot --max-items-per-task 2")
