import gzip
import json

import pytest
from tests.conftest import SHARED_DATA

from halluscope.config.schema import ReplayModel
from halluscope.contract.task import Item
from halluscope.errors import ConfigError, DataError
from halluscope.models.replay import load_replay, replay_source
from halluscope.sources import DataResolver
from halluscope.task_registry import get_task

CODE = get_task("halogen/code")


def _items(prompts):
    return [Item(CODE.name, f"i{n}", p, {"occurrence": 0}) for n, p in enumerate(prompts)]


def _spec(path, fmt=None, columns=None):
    return ReplayModel.model_validate({"id": "mine", "backend": "replay",
                                       "params": {"source": "file", "path": str(path), "format": fmt,
                                                  "columns": columns or {}}})


def test_csv_with_broken_rows_is_quarantined(tmp_path):
    path = tmp_path / "gens.csv"
    path.write_text('prompt,response\n"p0","import os"\n"p1","a","extra field"\n"p2"\n"px","unmatched"\n')
    rep = load_replay(_spec(path), CODE, _items(["p0", "p1", "p2"]), DataResolver(download=False))
    assert rep.texts == {"i0": "import os"}
    reasons = sorted((q["row"], q["reason"]) for q in rep.quarantine)
    assert reasons == [(1, "1 more field(s) than the header"), (2, "missing field(s) ['response']"),
                       (3, "matches no item of the task")]
    assert all(q["source"] == str(path) and q["model"] == "mine" for q in rep.quarantine)


def test_jsonl_with_column_mapping(tmp_path):
    path = tmp_path / "gens.jsonl"
    path.write_text(json.dumps({"q": "p0", "out": "import numpy"}) + "\n{not json\n" +
                    json.dumps({"q": "p1", "out": 3}) + "\n")
    rep = load_replay(_spec(path, columns={"prompt": "q", "text": "out"}), CODE, _items(["p0", "p1"]),
                      DataResolver(download=False))
    assert rep.texts == {"i0": "import numpy"}
    assert [q["reason"] for q in rep.quarantine][0].startswith("invalid JSON")
    assert "not text" in rep.quarantine[1]["reason"]


def test_parquet_joined_by_item_id(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "gens.parquet"
    pq.write_table(pa.table({"id": ["i1", "i0"], "response": ["b", "a"]}), path)
    rep = load_replay(_spec(path, columns={"item_id": "id"}), CODE, _items(["x", "y"]), DataResolver(download=False))
    assert rep.texts == {"i0": "a", "i1": "b"}


def test_file_errors(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_replay(_spec(tmp_path / "none.csv"), CODE, [], DataResolver(download=False))
    odd = tmp_path / "gens.txt"
    odd.write_text("x")
    with pytest.raises(ConfigError, match="set params.format"):
        load_replay(_spec(odd), CODE, [], DataResolver(download=False))
    with pytest.raises(ValueError, match="unknown column role"):
        _spec(odd, columns={"answer": "x"})


@pytest.mark.skipif(not SHARED_DATA.exists(), reason="../shared/data is not beside this checkout")
def test_halogen_release_joins():
    resolver = DataResolver(download=False)
    fp = get_task("halogen/false_presuppositions")
    items = fp.load_items(resolver).items
    assert len(items) == 1084
    spec = ReplayModel.model_validate({"id": "redpajama_incite_7b_chat", "backend": "replay"})
    rep = load_replay(spec, fp, items, resolver)
    # this file was recorded with an older wording of the prompts: joined on (list, condition, letter)
    assert len(rep.texts) == 1006 and rep.quarantine == []
    code = get_task("halogen/code")
    items = code.load_items(resolver).items
    rep = load_replay(ReplayModel.model_validate({"id": "gpt_4_0125_turbo", "backend": "replay"}), code, items,
                      resolver)
    assert len(rep.texts) == 1085  # 37 repeated prompts told apart by occurrence
    with pytest.raises(DataError, match="released no responses for model 'gpt-5'"):
        load_replay(ReplayModel.model_validate({"id": "gpt-5", "backend": "replay"}), code, items, resolver)
    bios = get_task("halogen/biographies")
    items = bios.load_items(resolver).items
    rep = load_replay(ReplayModel.model_validate({"id": "llama_2_70b_chat", "backend": "replay"}), bios, items,
                      resolver)
    assert len(rep.texts) == 683 and rep.quarantine == []  # its prompts quote the name: joined by name
    summaries = get_task("halogen/summarization")
    rep = load_replay(ReplayModel.model_validate({"id": "llama_2_7b_chat", "backend": "replay"}), summaries,
                      summaries.load_items(resolver).items, resolver)
    assert rep.texts == {}  # released for four models only: every item is missing, not an error


def test_gzip_csv_prompt_file_with_bad_row(tmp_path):
    root = tmp_path / "data"
    (root / "halogen" / "prompts").mkdir(parents=True)
    with gzip.open(root / "halogen" / "prompts" / "prompts_code.csv.gz", "wt") as f:
        f.write('prompt\n"ok"\n"two","fields"\n')
    with pytest.raises(DataError, match=r"prompts_code.csv.gz row 3: 1 more field"):
        CODE.load_items(DataResolver(str(root), cache_dir=str(tmp_path / "cache"), download=False))


def _jsonl(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def _run_source(path, items):
    """What the driver does before Ray starts (replay_source), then the worker's join."""
    spec = _spec(path)
    replay_source(spec, CODE, DataResolver(download=False))
    return load_replay(spec, CODE, items, DataResolver(download=False))


def test_bad_bytes_and_surrogates_quarantine_their_row_only(tmp_path):
    rows = [{"prompt": f"p{n}", "response": f"import m{n}"} for n in range(7)]
    body = _jsonl(rows).replace(b"import m5", b"import caf\xe9")  # one latin-1 byte in row 5
    body = body.replace(b"import m3", b"import \\ud800")  # a lone surrogate in row 3
    path = tmp_path / "gens.jsonl"
    path.write_bytes(body)
    rep = _run_source(path, _items([f"p{n}" for n in range(7)]))
    assert sorted(rep.texts) == ["i0", "i1", "i2", "i4", "i6"]
    bad = {q["row"]: q for q in rep.quarantine}
    assert set(bad) == {3, 5} and all(q["source"] == str(path) for q in bad.values())
    assert bad[5]["reason"].startswith("column 'response': byte 0xe9 at character 10 is not UTF-8")
    assert "lone surrogate \\ud800" in bad[3]["reason"]


def test_latin1_byte_in_a_csv_quarantines_the_row(tmp_path):
    path = tmp_path / "gens.csv"
    path.write_bytes(b'prompt,response\n"p0","import os"\n"p1","import caf\xe9"\n')
    rep = _run_source(path, _items(["p0", "p1"]))
    assert rep.texts == {"i0": "import os"}
    assert [(q["row"], q["source"]) for q in rep.quarantine] == [(1, str(path))]
    assert "byte 0xe9" in rep.quarantine[0]["reason"]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_utf8_bom_keeps_row_0(tmp_path, suffix):
    path = tmp_path / f"gens{suffix}"
    body = _jsonl([{"prompt": "p0", "response": "a"}, {"prompt": "p1", "response": "b"}]) if suffix == ".jsonl" \
        else b'prompt,response\np0,a\np1,b\n'
    path.write_bytes(b"\xef\xbb\xbf" + body)
    rep = _run_source(path, _items(["p0", "p1"]))
    assert rep.texts == {"i0": "a", "i1": "b"} and rep.quarantine == []


def test_unreadable_files_are_named_before_any_worker(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    utf16 = tmp_path / "gens.jsonl"
    utf16.write_bytes(_jsonl([{"prompt": "p0", "response": "a"}]).decode().encode("utf-16"))
    with pytest.raises(DataError, match=rf"models: 'mine': params.path: {utf16} is not UTF-8 text \(UTF-16"):
        replay_source(_spec(utf16), CODE, DataResolver(download=False))
    full = tmp_path / "full.parquet"
    pq.write_table(pa.table({"prompt": ["p0"], "response": ["a"]}), full)
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(full.read_bytes()[:-20])
    with pytest.raises(DataError, match=rf"cannot read {cut} as parquet"):
        replay_source(_spec(cut), CODE, DataResolver(download=False))
    with pytest.raises(DataError, match="is a folder"):
        replay_source(_spec(tmp_path), CODE, DataResolver(download=False))


def test_a_missing_file_is_named_by_its_resolved_path(tmp_path, monkeypatch):
    from halluscope.config.load import load_config

    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "run.yaml").write_text(
        "tasks: [halogen/code]\nmodels: [{id: mine, backend: replay, params: {source: file, path: gens.jsonl}}]\n")
    monkeypatch.chdir(tmp_path)
    spec = load_config("cfg/run.yaml").models[0]
    with pytest.raises(DataError, match=rf"params.path: recorded generations file not found: {tmp_path}/cfg/gens.jsonl "
                                        r"\(a relative path is taken from the config file's folder\)"):
        replay_source(spec, CODE, DataResolver(download=False))
