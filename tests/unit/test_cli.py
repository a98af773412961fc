import pytest

from halluscope.cli import main


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
