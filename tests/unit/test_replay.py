import gzip
import json

import pytest

from halluscope.config import ReplayModel
from halluscope.errors import ConfigError, DataError
from halluscope.models.replay import load_replay
from halluscope.sources import DataResolver
from halluscope.tasks.base import Item
from halluscope.tasks.registry import get_task
from tests.conftest import SHARED_DATA

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
