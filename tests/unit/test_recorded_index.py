"""The replay join's index of a recorded file and a recorded pipeline's answers are derived once per
content of the file and loaded from the data cache afterwards: what a run gets is the same either
way, a changed file or changed code is never served an old index, and a broken file fails as it
always did, leaving no index behind."""

from __future__ import annotations

import csv
import gzip
import io

import pytest
from tests.conftest import SHARED_DATA

from halluscope.config.schema import ReplayModel
from halluscope.contract.task import Item
from halluscope.errors import DataError
from halluscope.halogen import recorded
from halluscope.halogen.historical_events import HistoricalEvents
from halluscope.halogen.steps import MEETING, read_rows, recorded_path, step_keys
from halluscope.knowledge import index_cache
from halluscope.models import replay
from halluscope.models.replay import load_replay
from halluscope.sources import DataResolver
from halluscope.task_registry import get_task

CODE = get_task("halogen/code")
REAL = DataResolver(download=False)
needs_data = pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")


def _spec(path, columns=None):
    return ReplayModel.model_validate({"id": "mine", "backend": "replay",
                                       "params": {"source": "file", "path": str(path), "columns": columns or {}}})


def _recorded_spec(model):
    return ReplayModel.model_validate({"id": model, "backend": "replay", "params": {"source": "recorded"}})


def _items(prompts):
    return [Item(CODE.name, f"i{n}", p, {"occurrence": 0}) for n, p in enumerate(prompts)]


def _indexes(cache):
    return sorted(p.name for p in (cache / "indexes").glob("*.arrow")) if (cache / "indexes").exists() else []


@pytest.fixture()
def no_parse(monkeypatch):
    """Call it to make any parse of a file fail from then on: what follows must come from the cache."""
    def forbid():
        def fail(*args):
            raise AssertionError("the file was parsed again")
        monkeypatch.setattr(replay, "file_rows", fail)
        monkeypatch.setattr(recorded, "read_rows", fail)
    return forbid


def _csv_gz(rows: list[dict[str, str]]) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return gzip.compress(out.getvalue().encode())


def _slice(tmp_path, domain, model, n, edit=None):
    """The first ``n`` rows of a model's real recorded file, as the only file of a data folder
    (``edit`` changes them first); the prompts still come from ../shared/data."""
    rows = [dict(r) for r in read_rows(REAL.resolve(recorded_path(domain, model)))[:n]]
    if edit:
        edit(rows)
    path = tmp_path / "data" / recorded_path(domain, model)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_csv_gz(rows))
    return rows


def test_a_user_file_joins_and_quarantines_the_same_from_the_cache(tmp_path, no_parse):
    path = tmp_path / "gens.csv"
    path.write_text('prompt,response\n"p0","import os"\n"p1","a","extra field"\n"p2"\n"px","unmatched"\n'
                    '"p0","a repeat"\n')
    resolver = DataResolver(cache_dir=str(tmp_path / "cache"), download=False)
    items = _items(["p0", "p1", "p2"])
    built = load_replay(_spec(path), CODE, items, resolver)
    [index] = _indexes(tmp_path / "cache")
    assert index.startswith("replay-")
    assert (tmp_path / "cache" / "indexes" / index).stat().st_mode & 0o777 == 0o600  # it holds the user's texts
    no_parse()
    again = load_replay(_spec(path), CODE, items, resolver)
    assert (again.texts, again.quarantine) == (built.texts, built.quarantine)
    assert built.texts == {"i0": "import os"}
    assert [(q["row"], q["reason"]) for q in built.quarantine] == [
        (1, "1 more field(s) than the header"), (2, "missing field(s) ['response']"),
        (3, "matches no item of the task"), (4, "matches no item of the task")]


@needs_data
def test_the_cached_join_and_replies_are_those_of_a_fresh_build(tmp_path, no_parse):
    resolver = DataResolver(str(tmp_path / "data"), cache_dir=str(tmp_path / "cache"), download=False)
    sliced = [_slice(tmp_path, domain, model, 40) for domain, model in [
        ("summarization", "gpt_4_0125_turbo"), ("historical_events", "llama_2_70b_chat"),
        ("numerical_falsepresupposition", "llama_2_70b_chat")]]
    tasks = [get_task(t) for t in ("halogen/summarization", "halogen/historical_events",
                                   "halogen/false_presuppositions")]
    items = {t.name: t.load_items(REAL).items for t in tasks}
    models = ["gpt_4_0125_turbo", "llama_2_70b_chat", "llama_2_70b_chat"]

    def read():
        joins = [load_replay(_recorded_spec(m), t, items[t.name], resolver) for t, m in zip(tasks, models)]
        answers = [recorded.replies(resolver, m)._load(t.response_dir) for t, m in zip(tasks, models)]
        return [(list(j.texts.items()), j.quarantine) for j in joins], [list(a.items()) for a in answers]

    fresh = read()
    assert len(_indexes(tmp_path / "cache")) == 6
    no_parse()
    assert read() == fresh
    joins, answers = fresh
    for (texts, quarantine), rows in zip(joins, sliced):  # each row joined to one item
        assert sorted(text for _, text in texts) == sorted(r["response"] for r in rows) and quarantine == []
    assert {v for _, v in answers[1]} == {r["verified_response"] for r in sliced[1]}
    quirk = recorded.QUIRKS[("numerical_falsepresupposition", "llama_2_70b_chat")]
    assert answers[2] and all(isinstance(v, tuple) and v[1] == quirk for _, v in answers[2])
    assert answers[0] and all(isinstance(v, str) for _, v in answers[0])


@needs_data
def test_a_recorded_answer_is_found_under_its_role_call_key(tmp_path):
    resolver = DataResolver(str(tmp_path / "data"), cache_dir=str(tmp_path / "cache"), download=False)
    rows = _slice(tmp_path, "historical_events", "gpt_4_0125_turbo", 5)
    task = HistoricalEvents("paper")
    joins = task.replay_keys({**rows[0], "occurrence": 0})
    key = step_keys("historical_events", MEETING, joins, rows[0]["response"], [""])[0][0]
    for _ in range(2):  # built, then loaded
        assert recorded.replies(resolver, "gpt_4_0125_turbo").get(key) == rows[0]["verified_response"]


@needs_data
def test_a_changed_file_or_changed_code_is_not_served_the_old_index(tmp_path, monkeypatch):
    resolver = DataResolver(str(tmp_path / "data"), cache_dir=str(tmp_path / "cache"), download=False)
    task, model = get_task("halogen/historical_events"), "gpt_4_0125_turbo"
    items = task.load_items(REAL).items
    rows = _slice(tmp_path, "historical_events", model, 5)
    joins = task.replay_keys({**rows[0], "occurrence": 0})
    key = step_keys("historical_events", MEETING, joins, rows[0]["response"], [""])[0][0]
    before = load_replay(_recorded_spec(model), task, items, resolver).texts
    assert recorded.replies(resolver, model).get(key) == rows[0]["verified_response"]
    first = _indexes(tmp_path / "cache")

    def edit(rows):
        rows[0]["verified_response"] += " (edited)"
        rows[1]["response"] += " (edited)"

    _slice(tmp_path, "historical_events", model, 5, edit)
    after = load_replay(_recorded_spec(model), task, items, resolver).texts
    assert [k for k in before if before[k] != after[k]] == [list(before)[1]]
    assert after[list(before)[1]].endswith(" (edited)")
    assert recorded.replies(resolver, model).get(key) == rows[0]["verified_response"] + " (edited)"
    second = _indexes(tmp_path / "cache")
    assert len(second) == 2 and not set(first) & set(second)  # the old ones replaced, not kept beside

    monkeypatch.setattr(index_cache, "code_digest", lambda *files: "other code")
    built, build = [], replay._index
    monkeypatch.setattr(replay, "_index", lambda *args: built.append(args) or build(*args))
    assert load_replay(_recorded_spec(model), task, items, resolver).texts == after
    third = _indexes(tmp_path / "cache")
    assert built and len(third) == 2 and third[0] == second[0] and third[1] != second[1]


def _truncated_gz(rows: list[dict[str, str]]) -> bytes:
    body = _csv_gz(rows)
    return body[: len(body) * 2 // 3]


def test_a_broken_user_file_fails_as_before_and_caches_nothing(tmp_path):
    path = tmp_path / "gens.csv.gz"
    path.write_bytes(_truncated_gz([{"prompt": f"p{n}", "response": f"import m{n} # {n * 7919}"}
                                    for n in range(3000)]))
    resolver = DataResolver(cache_dir=str(tmp_path / "cache"), download=False)
    for _ in range(2):
        with pytest.raises(DataError, match=rf"cannot read {path} after row \d+: Compressed file ended"):
            load_replay(_spec(path), CODE, _items(["p0"]), resolver)
    assert _indexes(tmp_path / "cache") == []


@needs_data
def test_a_broken_recorded_file_fails_as_before_and_caches_nothing(tmp_path):
    rel = recorded_path("historical_events", "gpt_4_0125_turbo")
    path = tmp_path / "data" / rel
    path.parent.mkdir(parents=True)
    path.write_bytes(_truncated_gz([dict(r) for r in read_rows(REAL.resolve(rel))]))
    resolver = DataResolver(str(tmp_path / "data"), cache_dir=str(tmp_path / "cache"), download=False)
    for _ in range(2):
        with pytest.raises(DataError, match=rf"cannot read {path} after row \d+: Compressed file ended"):
            recorded.replies(resolver, "gpt_4_0125_turbo").get("historical_events:0")
    assert _indexes(tmp_path / "cache") == []
