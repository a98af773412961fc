import pytest

from halluscope.config.load import default_config, load_config, parse_config
from halluscope.errors import ConfigError
from halluscope.task_registry import get_task


def _write(tmp_path, text):
    p = tmp_path / "run.yaml"
    p.write_text(text)
    return str(p)


def test_default_config_is_valid():
    cfg = default_config()
    assert sum(m.role == "test" for m in cfg.models) == 14
    assert {(m.role, m.backend) for m in cfg.models if m.role != "test"} == {("judge", "recorded"),
                                                                             ("extractor", "recorded")}
    # nine domains by the paper's rules, seven by the corrected ones (not references and
    # biographies, which need a title index and an article store)
    assert len(cfg.tasks) == 16 and sum(t.endswith("@corrected") for t in cfg.tasks) == 7


def test_wrong_field_names_field_and_file(tmp_path):
    path = _write(tmp_path, "tasks: [halogen/code]\nmodels:\n  - {id: a, backend: replay, parms: {}}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert path in str(err.value) and "models.0.replay.parms" in str(err.value)


def test_missing_required_field(tmp_path):
    path = _write(tmp_path, "tasks: [halogen/code]\nmodels:\n  - {id: a, backend: openai, params: {}}\n")
    with pytest.raises(ConfigError, match=r"models\.0\.openai\.params\.base_url: Field required"):
        load_config(path)


def test_unknown_task_suggests_closest(tmp_path):
    path = _write(tmp_path, "tasks: [halogen/code, halogen/rationalisation_binary]\n"
                            "models: [{id: a, backend: replay}]\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert "tasks.1" in msg and "did you mean halogen/rationalization_binary" in msg and path in msg


def test_unknown_backend(tmp_path):
    path = _write(tmp_path, "tasks: [halogen/code]\nmodels: [{id: a, backend: tgi}]\n")
    with pytest.raises(ConfigError, match="models.0"):
        load_config(path)


def test_duplicate_models_and_bad_values():
    with pytest.raises(ConfigError, match="duplicate model id"):
        parse_config({"tasks": ["halogen/code"], "models": [{"id": "a", "backend": "replay"}] * 2})
    with pytest.raises(ConfigError, match="limits.max_items_per_task"):
        parse_config({"tasks": ["halogen/code"], "models": [{"id": "a", "backend": "replay"}],
                      "limits": {"max_items_per_task": 0}})


def test_yaml_and_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(_write(tmp_path, "tasks: [unclosed\n"))
    with pytest.raises(ConfigError, match="run config not found"):
        load_config(str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(_write(tmp_path, "- just\n- a list\n"))


def test_fingerprint_ignores_storage_and_width():
    base = {"tasks": ["halogen/code"], "models": [{"id": "a", "backend": "replay"}]}
    a = parse_config(base)
    b = parse_config({**base, "storage": {"root": "s3://x/y"}, "concurrency": {"batch_size": 7}})
    c = parse_config({**base, "limits": {"max_items_per_task": 3}})
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


def test_fingerprint_changes_with_a_benchmark_option():
    base = {"tasks": ["halogen/code@corrected"], "models": [{"id": "a", "backend": "replay"}]}
    fingerprints = {parse_config({**base, **extra}).fingerprint() for extra in (
        {}, {"benchmarks": {"halogen": {"import_name_aliases": True}}},
        {"benchmarks": {"halogen": {"pypi_extra_names": "names.txt"}}},
        {"benchmarks": {"halogen": {"pypi_index": "other.txt.gz"}}})}
    assert len(fingerprints) == 4


@pytest.mark.parametrize("old, message", [
    ({"verifiers": {"titles": {"dump": "t.txt"}}},
     "verifiers.titles: this option moved; set benchmarks.halogen.titles instead"),
    ({"verifiers": {"import_name_aliases": True}}, "verifiers.import_name_aliases: this option moved; "
                                                   "set benchmarks.halogen.import_name_aliases instead"),
    ({"verifiers": {"wiki": {"articles": "a.jsonl"}}},
     "verifiers.wiki: this option moved; set benchmarks.hallulens.wiki or benchmarks.halogen.wiki instead"),
    ({"verifiers": {}}, "verifiers: this option moved; set benchmarks.halogen instead"),
    ({"data": {"pypi_index": "names.txt.gz"}},
     "data.pypi_index: this option moved; set benchmarks.halogen.pypi_index instead"),
])
def test_moved_keys_are_refused_naming_their_new_place(tmp_path, old, message):
    base = {"tasks": ["halogen/code"], "models": [{"id": "a", "backend": "replay"}]}
    with pytest.raises(ConfigError) as err:
        parse_config({**base, **old}, "run.yaml")
    assert str(err.value) == f"invalid run config run.yaml: {message}"


def test_a_stored_config_with_moved_keys_reads_back():
    """A run's manifest keeps the config it started with: the old keys, defaults included."""
    stored = {"tasks": ["halogen/code", "hallulens/longwiki"], "models": [TESTED, JUDGE, EXTRACTOR],
              "testsets": {"hallulens/longwiki": ["ts"]},
              "data": {"dir": None, "pypi_index": "names.txt.gz", "allow_http": False},
              "verifiers": {"import_name_aliases": True, "pypi_extra_names": None, "titles": None,
                            "wiki": {"articles": "a.jsonl", "top_k": 3}},
              "benchmarks": {"hallulens": {"far_overrides": []}}}
    cfg = parse_config(stored, stored=True)
    halogen, hallulens = cfg.options_for("halogen"), cfg.options_for("hallulens")
    assert halogen.import_name_aliases and halogen.pypi_index == "names.txt.gz"
    assert halogen.wiki.top_k == hallulens.wiki.top_k == 3 and hallulens.far_overrides == []
    assert "verifiers" in stored  # the document itself is left alone
    with pytest.raises(ConfigError, match="this option moved"):
        parse_config(stored)


def test_config_from_s3(s3_endpoint, bucket, monkeypatch):
    import boto3

    boto3.client("s3", endpoint_url=s3_endpoint).put_object(
        Bucket=bucket, Key="configs/run.yaml", Body=b"tasks: [halogen/code]\nmodels: [{id: a, backend: replay}]\n")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_endpoint)
    cfg = load_config(f"s3://{bucket}/configs/run.yaml")
    assert cfg.tasks == ["halogen/code"]


JUDGE = {"id": "j", "role": "judge", "backend": "scripted"}
EXTRACTOR = {"id": "x", "role": "extractor", "backend": "scripted", "params": {"extract": True}}
TESTED = {"id": "a", "backend": "replay"}


@pytest.mark.parametrize("cfg,message", [
    ({"tasks": ["halogen/historical_events"], "models": [TESTED]},
     "task 'halogen/historical_events' needs a judge model; add one to models with role: judge"),
    ({"tasks": ["halogen/summarization"], "models": [TESTED, JUDGE]}, "needs a extractor model"),
    ({"tasks": ["halogen/references"], "models": [TESTED, EXTRACTOR]},
     "task 'halogen/references' needs a judge model"),  # the paper's title lookups, put to the judge
    ({"tasks": ["halogen/references@corrected"], "models": [TESTED, EXTRACTOR]},
     "task 'halogen/references@corrected' needs benchmarks.halogen.titles to be set"),
    ({"tasks": ["halogen/biographies@corrected"], "models": [TESTED, JUDGE, EXTRACTOR]},
     "needs benchmarks.halogen.wiki to be set"),
    ({"tasks": ["hallulens/longwiki"], "models": [TESTED, JUDGE, EXTRACTOR],
      "testsets": {"hallulens/longwiki": ["ts"]}}, "needs benchmarks.hallulens.wiki to be set"),
    ({"tasks": ["halogen/code"], "models": [TESTED, JUDGE, {**JUDGE, "id": "j2"}]}, "a run has at most one"),
    ({"tasks": ["halogen/code"], "models": [TESTED, {"id": "r", "role": "judge", "backend": "replay"}]},
     "a judge must be a live model"),
    ({"tasks": ["halogen/code"], "models": [JUDGE]}, "nothing to evaluate"),
    ({"tasks": ["halogen/references@corrected"], "models": [TESTED, EXTRACTOR],
      "benchmarks": {"halogen": {"titles": {"source": "offline"}}}},
     "benchmarks.halogen.titles: Value error, dump: an offline title index needs a title dump"),
])
def test_llm_verified_tasks_need_their_roles_and_knowledge(cfg, message):
    with pytest.raises(ConfigError) as err:
        parse_config(cfg)
    assert message in str(err.value)


def test_missing_semantic_scholar_key_fails_in_the_driver(monkeypatch, tmp_path):
    from halluscope.resolve.knowledge import knowledge_provenance
    from halluscope.resolve.run import ResolvedRun

    monkeypatch.delenv("S2_KEY_FOR_TEST", raising=False)
    cfg = parse_config({"tasks": ["halogen/references@corrected"], "models": [TESTED, EXTRACTOR],
                        "storage": {"root": f"file://{tmp_path}"},
                        "benchmarks": {"halogen": {"titles": {"source": "semantic_scholar",
                                                              "api_key_env": "S2_KEY_FOR_TEST"}}}})
    with pytest.raises(ConfigError, match="S2_KEY_FOR_TEST"):
        knowledge_provenance(cfg.tasks, ResolvedRun.of(cfg).knowledge)


def test_the_manifest_describes_halogen_knowledge_from_its_options(tmp_path):
    from halluscope.resolve.knowledge import knowledge_provenance
    from halluscope.resolve.run import ResolvedRun

    (tmp_path / "names.txt").write_text("numpy\nopencv-python\n")
    (tmp_path / "extra.txt").write_text("# then\nPIL\n")
    cfg = parse_config({"tasks": ["halogen/code@corrected", "halogen/historical_events"],
                        "models": [TESTED, JUDGE], "data": {"cache_dir": str(tmp_path / "cache")},
                        "storage": {"root": f"file://{tmp_path}"},
                        "benchmarks": {"halogen": {"pypi_index": str(tmp_path / "names.txt"),
                                                   "pypi_extra_names": str(tmp_path / "extra.txt"),
                                                   "import_name_aliases": True}}})
    kb = ResolvedRun.of(cfg).knowledge
    described = knowledge_provenance(cfg.tasks, kb)
    assert set(described) == {"pypi", "pypi_extra_names"}
    assert described["pypi"]["source"] == str(tmp_path / "names.txt") and described["pypi"]["import_name_aliases"]
    assert described["pypi_extra_names"]["names"] == 1
    task = get_task("halogen/code@corrected")
    verdicts = task.verify(["numpy", "PIL", "cv2", "os", "nope"], "", None, kb)
    assert [v.supported for v in verdicts] == [True, True, True, True, False]
    assert verdicts[2].evidence == "pypi (import name of opencv-python)"


def test_hallulens_tasks_need_their_test_sets():
    with pytest.raises(ConfigError, match="task 'hallulens/longwiki' needs testsets.hallulens/longwiki"):
        parse_config({"tasks": ["hallulens/longwiki"], "models": [TESTED, JUDGE, EXTRACTOR],
                      "benchmarks": {"hallulens": {"wiki": {"articles": "a.jsonl"}}}})


def test_a_folder_or_a_binary_file_is_a_one_line_error(tmp_path):
    with pytest.raises(ConfigError, match=rf"^run config {tmp_path} is a folder; give the YAML file in it$"):
        load_config(str(tmp_path))
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    with pytest.raises(ConfigError, match=rf"^run config {binary} is not a YAML text file"):
        load_config(str(binary))


FEWL_MODELS = ("models:\n  - {id: t, backend: scripted}\n  - {id: r1, role: reference, backend: scripted}\n"
               "tasks: [fewl/score]\n")


@pytest.mark.parametrize("section,message", [
    ("", r"benchmarks\.fewl\.dataset: Field required"),
    ("benchmarks:\n  fewl: {dataset: {name: chale, source: c.json}, references: [r1, r2], generator: r1}\n",
     r"benchmarks\.fewl names reference model 'r2', but models has no model with id 'r2' and role: reference"),
    ("benchmarks:\n  fewl: {dataset: {name: chale, source: c.json}, references: [r1], generator: r1,\n"
     "         generator_role: judge}\n", r"names judge model 'r1', but models has no model with id 'r1' and role"),
])
def test_a_benchmark_section_is_checked_when_its_task_is_listed(tmp_path, section, message):
    """A listed benchmark's options validate even when its section is absent, and the role models
    they name must be in models."""
    with pytest.raises(ConfigError, match=message):
        load_config(_write(tmp_path, FEWL_MODELS + section))


def test_relative_replay_paths_are_taken_from_the_config_folder(tmp_path, monkeypatch):
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "run.yaml").write_text(
        "tasks: [halogen/code]\nmodels:\n  - {id: mine, backend: replay,\n"
        "     params: {source: file, path: gens/mine.jsonl}}\n  - {id: up, backend: replay,\n"
        "     params: {source: file, path: ../up.jsonl}}\n  - {id: abs, backend: replay,\n"
        f"     params: {{source: file, path: {tmp_path}/abs.jsonl}}}}\n")
    monkeypatch.chdir(tmp_path)  # not the config's folder
    cfg = load_config("configs/run.yaml")
    assert [m.params.path for m in cfg.models] == [f"{folder}/gens/mine.jsonl", f"{tmp_path}/up.jsonl",
                                                   f"{tmp_path}/abs.jsonl"]


def test_max_error_fraction_is_a_share():
    with pytest.raises(ConfigError, match="max_error_fraction"):
        parse_config({"tasks": ["halogen/code"], "models": [{"id": "a", "backend": "replay"}],
                      "max_error_fraction": 1.5})
    assert parse_config({"tasks": ["halogen/code"], "models": [{"id": "a", "backend": "replay"}]}) \
        .max_error_fraction == 0.1


def test_a_task_named_twice_is_refused():
    """It would score every generation of the task twice."""
    with pytest.raises(ConfigError, match=r"tasks: .*task\(s\) named more than once: \['halogen/code'\]"):
        parse_config({"tasks": ["halogen/code", "halogen/rationalization_binary", "halogen/code"],
                      "models": [{"id": "a", "backend": "replay"}]})
