"""Hostile inputs end in one line that names the file, field or row, never in a crash, a traceback,
a value echoed whole, or memory and time without bound: deeply nested JSON rows, YAML alias bombs,
very long strings, replay paths that are URLs."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml
from tests.unit.test_cli import _replay_config

from halluscope.cli import main
from halluscope.config.load import load_config, parse_config
from halluscope.config.reader import read_yaml
from halluscope.config.schema import ReplayModel
from halluscope.errors import ConfigError, StorageError
from halluscope.models.replay import load_replay, replay_source
from halluscope.sources import DataResolver, jsonl_rows
from halluscope.task_registry import get_task, unknown_task

CODE = get_task("halogen/code")
ROOT = Path(__file__).resolve().parents[2]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("halluscope: error: ") and err.count("\n") == 1, err[:2000]
    assert "Traceback" not in err
    return err


# ---- 4: a row nested 200,000 deep is quarantined, not a RecursionError in the worker -------------

def test_a_deeply_nested_json_row_is_quarantined_with_its_file_and_row(tmp_path):
    from halluscope.contract.task import Item

    path = tmp_path / "gens.jsonl"
    good = [json.dumps({"prompt": f"p{n}", "response": "import os"}) for n in range(2)]
    path.write_text(f"{good[0]}\n{'[' * 200_000}\n{{\"prompt\": \"x\", \"response\": {'[' * 65}{']' * 65}}}\n"
                    f"{good[1]}\n")
    spec = ReplayModel.model_validate({"id": "mine", "backend": "replay",
                                       "params": {"source": "file", "path": str(path)}})
    items = [Item(CODE.name, f"i{n}", f"p{n}", {"occurrence": 0}) for n in range(2)]
    replay_source(spec, CODE, DataResolver(download=False))
    rep = load_replay(spec, CODE, items, DataResolver(download=False))
    assert rep.texts == {"i0": "import os", "i1": "import os"}
    deep = [q for q in rep.quarantine if q["row"] in (1, 2)]
    assert [(q["row"], q["source"]) for q in deep] == [(1, str(path)), (2, str(path))]
    assert all("nested more than 64 levels deep" in q["reason"] for q in deep)


def test_json_depth_is_bounded_cheaply_and_strings_do_not_count():
    from halluscope.sources import json_depth_problem

    lines = [b"[" * 200_000, '{"a": "' + "[" * 1000 + '"}', json.dumps({"a": [[1]] * 10_000}),
             "{" + '"a":{' * 64 + "}" * 65]
    started = time.perf_counter()
    got = [(n, problem) for n, _, problem in jsonl_rows(lines)]
    assert time.perf_counter() - started < 10  # milliseconds on an idle machine
    deep = "invalid JSON: nested more than 64 levels deep (arrays and objects)"
    assert got == [(1, deep), (2, ""), (3, ""), (4, deep)]
    assert [p for _, _, p in jsonl_rows(["{" + '"a":{' * 63 + "}" * 64])] == [""]  # 64 levels are read
    assert json_depth_problem('["\\"' + "[" * 70 + '"]') is None  # an escaped quote inside a string


# ---- 5: YAML aliases, deep nesting, huge files and values are refused at load ---------------------

BOMB = """\
tasks: [halogen/code]
models:
  - id: v
    backend: vllm
    params:
      model_source: x
      engine_kwargs:
        a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]
        b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
        c: [*b, *b, *b, *b, *b, *b, *b, *b, *b]
"""


def test_a_yaml_alias_bomb_in_a_free_form_field_is_refused_by_plan(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    assert main(["plan", str(path)]) == 2
    err = _one_line_error(capsys)
    assert f"run config {path}: line 8, column 12: YAML anchors and aliases" in err


@pytest.mark.parametrize("text, message", [
    ("a: " + "[" * 200_000 + "\n", "line 1, column 35: nested more than 32 levels deep"),
    ("base: &b {x: 1}\nother:\n  <<: *b\n", "line 1, column 7: YAML anchors and aliases"),
    ("a: " + "9" * 5000 + "\n", "is not valid YAML: Exceeds the limit"),
    ("a: [1, 2\nb: {\n", "is not valid YAML: line 2, column 2: expected ',' or ']'"),
    ("tasks: [halogen/code]\nmodels:\n  - {id: v, backend: vllm, params: {model_source: x, engine_kwargs: {k: "
     + "x" * 5000 + "}}}\n", "models.0.params.engine_kwargs.k: a string of 5,000 characters; at most 4,096"),
])
def test_config_files_are_bounded_and_refusals_are_one_line(tmp_path, text, message):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        read_yaml(str(path))
    assert message in str(err.value) and "\n" not in str(err.value) and len(str(err.value)) < 500


def test_a_config_over_4_mib_is_refused_unread(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("a: [" + "1, " * 3_000_000 + "1]\n")
    with pytest.raises(ConfigError, match=r"big.yaml is larger than 4 MiB"):
        read_yaml(str(path))


def test_the_shipped_configs_still_load():
    for path in [*sorted((ROOT / "jobs").rglob("*.yaml")), *sorted((ROOT / "serve").glob("*.yaml")),
                 ROOT / "examples" / "capitals" / "run.yaml", ROOT / "lib" / "halluscope" / "configs" / "demo.yaml"]:
        assert read_yaml(str(path), "config") is not None, path


# ---- 6: long strings: one line naming the field, no value echoed whole, no quadratic "did you mean" -

def test_a_long_replay_path_is_a_one_line_error_naming_the_field(tmp_path, capsys):
    too_long = "/tmp/" + "x" * 5000 + ".jsonl"  # over the string limit: refused at load
    path = _replay_config(tmp_path, ["p0"])
    cfg = yaml.safe_load(path.read_text())
    cfg["models"][0]["params"]["path"] = too_long
    path.write_text(yaml.safe_dump(cfg))
    assert main(["plan", str(path)]) == 2
    err = _one_line_error(capsys)
    assert "models.0.params.path: a string of 5,011 characters; at most 4,096" in err and len(err) < 400
    # within the limit, but a file name longer than the filesystem's (the old OSError: File name too long)
    cfg["models"][0]["params"]["path"] = str(tmp_path / ("y" * 300 + ".jsonl"))
    path.write_text(yaml.safe_dump(cfg))
    assert main(["plan", str(path)]) == 2
    err = _one_line_error(capsys)
    assert "models: 'mine': params.path: File name too long: " in err and len(err) < 600


def test_a_100_mb_value_is_refused_without_being_echoed():
    huge = "x" * 100_000_000
    base = {"tasks": ["halogen/code"], "models": [{"id": "a", "backend": "replay"}]}
    started = time.perf_counter()
    for cfg in ({**base, "models": [{"id": "a", "backend": "replay", "params": {"source": "file", "path": huge}}]},
                {**base, "tasks": [huge]}, {**base, "storage": {"root": "gs://" + huge}}):
        with pytest.raises(ConfigError) as err:
            parse_config(cfg)
        assert len(str(err.value)) < 400 and "a string of 100,000,0" in str(err.value)
    assert time.perf_counter() - started < 10
    with pytest.raises(ConfigError, match=r"^invalid run config <config>: benchmarks: a key of 100,000,000 "
                                          r"characters \(x{60}\.\.\. \(100,000,000 characters\)\); at most 4,096"):
        parse_config({**base, "benchmarks": {huge: {}}})


def test_did_you_mean_only_for_short_task_names():
    started = time.perf_counter()
    long_name = "halogen/code" + "x" * 4076  # within a config's 4,096 characters
    problem = unknown_task(long_name)
    assert time.perf_counter() - started < 1
    assert "did you mean" not in problem and "at most 100 characters" in problem and len(problem) < 1500
    assert "did you mean halogen/code" in unknown_task("halogen/cod")


def test_validation_messages_show_part_of_a_long_value():
    with pytest.raises(ConfigError) as err:
        parse_config({"tasks": ["halogen/code"], "models": [{"id": "a", "backend": "replay"}],
                      "storage": {"root": "gs://" + "b" * 4000}})
    assert "storage.root" in str(err.value) and len(str(err.value)) < 700


# ---- 9: replay paths with a URL scheme are refused as URLs, not looked up as relative paths --------

@pytest.mark.parametrize("url, scheme", [("file:///etc/passwd", "file"), ("http://127.0.0.1:9/g.jsonl", "http"),
                                         ("memory://gens.jsonl", "memory"), ("FILE:/etc/passwd", "file")])
def test_a_replay_path_with_a_url_scheme_says_replay_paths_are_local_files(tmp_path, capsys, url, scheme):
    path = _replay_config(tmp_path, ["p0"])
    cfg = yaml.safe_load(path.read_text())
    cfg["models"][0]["params"]["path"] = url
    path.write_text(yaml.safe_dump(cfg))
    assert main(["plan", str(path)]) == 2
    err = _one_line_error(capsys)
    assert f"models.0.params.path: replay paths must be local files, not URLs ({scheme}:// in {url})" in err
    assert "not found" not in err and str(tmp_path) + "/file:" not in err


def test_replay_source_refuses_a_url_set_after_validation(tmp_path):
    spec = ReplayModel.model_validate({"id": "mine", "backend": "replay",
                                       "params": {"source": "file", "path": str(tmp_path / "g.jsonl")}})
    spec.params.path = "file:///etc/passwd"
    with pytest.raises(ConfigError, match=r"params.path: replay paths must be local files, not URLs \(file://"):
        replay_source(spec, CODE, DataResolver(download=False))
    spec.params.path = "/etc/passwd"  # a local path, but a system file
    with pytest.raises(Exception, match="system folder /etc"):
        replay_source(spec, CODE, DataResolver(download=False))


def test_a_relative_replay_path_still_resolves_from_the_config_folder(tmp_path):
    path = _replay_config(tmp_path, ["p0"])
    cfg = load_config(str(path))
    assert cfg.models[0].params.path == str(tmp_path / "gens.jsonl")


@pytest.mark.parametrize("kwargs, message", [
    ({"trust_remote_code": True}, "trust_remote_code is True; allowed: False"),
    ({"worker_extension_cls": "os.system"}, "worker_extension_cls is not an engine argument a config may pass"),
    ({"worker_cls": "evil.Worker"}, "worker_cls is not an engine argument a config may pass"),
    ({"kv_transfer_config": {"kv_connector": "evil.Connector"}}, "kv_transfer_config is not an engine argument"),
    ({"load_format": "dummy"}, "load_format is 'dummy'; allowed: 'auto'"),
    ({"distributed_executor_backend": "evil.Executor"}, "distributed_executor_backend is 'evil.Executor'"),
    ({"quantization": {"class": "x"}}, "quantization is a dict; a number, string or boolean is allowed"),
])
def test_a_vllm_config_names_data_never_code(kwargs, message):
    """engine_kwargs pass an allow-list of data (dtype, quantization, memory and batching knobs):
    anything that loads or names code is refused when the config is read, before plan or run."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config({"tasks": ["halogen/code"], "models": [{"id": "v", "backend": "vllm", "params": {
            "model_source": "x", "engine_kwargs": kwargs}}]})
    parse_config({"tasks": ["halogen/code"], "models": [{"id": "v", "backend": "vllm", "params": {
        "model_source": "x", "engine_kwargs": {"enforce_eager": True, "dtype": "bfloat16", "quantization": "fp8",
                                               "gpu_memory_utilization": 0.9, "trust_remote_code": False}}}]})


def test_a_key_given_twice_is_refused(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("tasks: [halogen/code]\nmodels:\n  - {id: a, backend: scripted}\ntasks: [halogen/biographies]\n")
    with pytest.raises(ConfigError, match=r"line 4, column 1: key 'tasks' is given twice in one mapping"):
        read_yaml(str(path))


@pytest.mark.parametrize("forged, message", [
    ({"models": {"m": {"done": -40, "total": 40}}}, "models.m.done is -40, not a count"),
    ({"models": {"m": {"done": 4.5, "total": 40}}}, "models.m.done is 4.5, not a count"),
    ({"models": {"m": {"done": 1, "total": 40}}, "elapsed_s": float("nan")}, "elapsed_s is nan, not a finite number"),
    ({"spend": {"usd": float("inf")}, "models": {}}, "spend.usd is inf, not a finite number"),
])
def test_status_shows_nothing_from_a_forged_progress_file(tmp_path, capsys, forged, message):
    """A progress.json no run wrote (negative, fractional or NaN counts) is named and refused, in
    the text and the --json view alike, rather than printed as numbers."""
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"status": "running"}))
    (run / "progress.json").write_text(json.dumps(forged))  # json writes NaN and Infinity as such
    for extra in ([], ["--json"]):
        assert main(["status", str(run), *extra]) == 2
        err = capsys.readouterr().err
        assert f"progress.json of run r1: {message}" in err and "nothing is shown from it" in err


@pytest.fixture()
def silent_endpoint():
    """An S3 endpoint on 127.0.0.1 that accepts every connection and never answers."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()
    for conn in held:
        conn.close()


def test_a_config_on_an_s3_endpoint_that_never_answers_fails_in_seconds(monkeypatch, silent_endpoint):
    """`plan s3://bucket/cfg.yaml` against an endpoint that accepts and never answers was silent
    for 600 s and more (botocore's and s3fs's retries on a 120 s read timeout): the endpoint is
    asked first, ``FIRST_LOOK_S`` at a time (5 s; here 1 s), twice, and the read fails in one line naming it."""
    from halluscope.storage import fs

    monkeypatch.setattr(fs, "FIRST_LOOK_S", 1.0)
    endpoint = silent_endpoint
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    started = time.monotonic()
    with pytest.raises(Exception, match=rf"run config s3://bucket: cannot reach the S3 endpoint {endpoint}"):
        read_yaml("s3://bucket/cfg.yaml")
    assert time.monotonic() - started < 12


@pytest.mark.parametrize("operation", ["read", "write", "list", "exists", "footer", "run table", "download",
                                       "input file"])
def test_every_storage_operation_during_a_run_ends_by_its_deadline(monkeypatch, silent_endpoint, operation, tmp_path):
    """A run's storage reads and writes, past the first look at its root, stacked botocore's and
    s3fs's retries on the read timeout: an endpoint that stopped answering mid-run held a worker for
    over an hour. Each one now ends at its deadline (here made 1 s), in one line naming the URL."""
    from halluscope.storage import fs
    from halluscope.storage.fs import Location
    from halluscope.storage.run import RunStore
    from halluscope.storage.spec import StorageSpec

    monkeypatch.setattr(fs, "DEADLINE_BASE_S", 1.0)
    spec = StorageSpec(root="s3://bucket/runs", endpoint_url=silent_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    root = Location.from_url(spec.root, spec)
    part = root.child("r1", "scores", "part-k.0.parquet")
    do = {"read": part.read_bytes, "write": lambda: part.write_bytes_atomic(b"x" * 1000),
          "list": root.list_names, "exists": part.exists, "footer": part.parquet_metadata,
          "run table": lambda: RunStore(root, "r1").read_table("scores"),
          "download": lambda: part.download(str(tmp_path / "copy")),  # an article store
          "input file": lambda: part.read_stream()}[operation]  # a data set a benchmark parses
    started = time.monotonic()
    with pytest.raises(StorageError, match=r"s3://bucket/runs.*: storage did not answer within 1 s"):
        do()
    assert time.monotonic() - started < 10


def test_every_reader_refuses_a_view_edited_after_the_run_wrote_it(tmp_path, capsys):
    """metrics.json, leaderboard.md and costs.parquet are what a run builds from its parts at its
    end; the manifest records their sha256. Edited, each is named by every reader (report, its
    --json, compare) instead of three views printing three numbers; a run resumed rebuilds them."""
    path = _replay_config(tmp_path, ["p0", "p1"])
    assert main(["run", str(path), "--run-id", "r1", "--quiet"]) == 0
    run = tmp_path / "runs" / "r1"
    assert set(json.loads((run / "manifest.json").read_text())["views"]) == {
        "metrics.json", "leaderboard.md", "costs.parquet"}
    capsys.readouterr()
    metrics = json.loads((run / "metrics.json").read_text())
    (run / "metrics.json").write_text(json.dumps(metrics[::-1], indent=2))  # the same records, reordered
    for args in (["report", str(run), "--json"], ["compare", str(run), str(run)]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "metrics.json was changed after the run wrote it" in err and "--run-id r1" in err
    (run / "leaderboard.md").write_text("| model | H |\n| forged | 0.000 |\n")
    assert main(["report", str(run)]) == 2
    assert "leaderboard.md was changed after the run wrote it" in capsys.readouterr().err
    assert main(["run", str(path), "--run-id", "r1", "--quiet"]) == 0  # the views rebuilt from the parts
    capsys.readouterr()
    assert main(["report", str(run), "--json"]) == 0 and main(["compare", str(run), str(run)]) == 0


@pytest.mark.parametrize("how", ["copied", "re-encoded"])
def test_a_batch_copied_under_another_key_is_counted_once(tmp_path, caplog, how):
    """Every part of a finished run copied under another batch key, then the run resumed: its rows
    were counted twice (n 5 -> 10, a standard error shrunk by sqrt 2). A batch holding generation
    ids another batch committed is that batch's copy, whether its bytes are the same or the rows
    were written again (another compression: other bytes, another digest in its name): skipped
    with a warning, its rows counted once."""
    import hashlib
    import shutil

    import pyarrow.parquet as pq

    from halluscope.storage.fs import Location
    from halluscope.storage.run import RunStore

    path = _replay_config(tmp_path, ["p0", "p1"])
    assert main(["run", str(path), "--run-id", "r1", "--quiet"]) == 0
    run = tmp_path / "runs" / "r1"
    before = RunStore(Location.from_url(f"file://{tmp_path}/runs"), "r1").read_table("scores", ["gen_id"]).num_rows
    copied = 0
    for table in (t for t in run.iterdir() if t.is_dir()):
        for part in list(table.glob("part-*.parquet")):
            key, digest = part.name[len("part-"):-len(".parquet")].rsplit(".", 1)
            if how == "copied":
                shutil.copy(part, table / f"part-{key}x.{digest}.parquet")
            else:
                staging = tmp_path / "staging.parquet"
                pq.write_table(pq.read_table(part), staging, compression="gzip")
                data = staging.read_bytes()
                (table / f"part-{key}x.{hashlib.sha256(data).hexdigest()}.parquet").write_bytes(data)
            copied += 1
    assert copied and before
    assert main(["run", str(path), "--run-id", "r1", "--quiet"]) == 0
    fresh = RunStore(Location.from_url(f"file://{tmp_path}/runs"), "r1")
    assert fresh.read_table("scores", ["gen_id"]).num_rows == before
    assert "(a copy)" in caplog.text
