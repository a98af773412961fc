"""PreciseWikiQA and LongWiki test-set generation on 32 fake GoodWiki pages spread over the 10 bins,
with deterministic fake generators that write questions and answers from the section text."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from tests.support.hallulens_sources import EDGES, FakeGenerator, write_wiki_sources

from halluscope.contract.completion import Completion
from halluscope.errors import DataError, RunError
from halluscope.hallulens.generation import (
    LongWikiConfig,
    PreciseWikiQAConfig,
    build_wiki_testset,
    difficulty_bin,
    generate_wiki_items,
)
from halluscope.hallulens.sections import count_sentences, words
from halluscope.hallulens.sources import load_goodwiki, load_harmonic_centrality
from halluscope.hallulens.testset import ITEMS_FILE, MANIFEST_FILE, TestSet
from halluscope.storage.fs import Location
from halluscope.storage.spec import StorageSpec


@pytest.fixture()
def sources(tmp_path):
    goodwiki, titles, scores = write_wiki_sources(tmp_path)
    return load_goodwiki(str(goodwiki)), load_harmonic_centrality(str(titles), str(scores))


def pwqa(**kw) -> PreciseWikiQAConfig:
    return PreciseWikiQAConfig(**{"per_bin": 2, "min_words": 20, "max_words": 60, "bin_edges": EDGES, **kw})


def test_bins_are_right_inclusive():
    assert [difficulty_bin(h, EDGES) for h in (-2, -1, 10, 10.5, 100, 100.5)] == [None, 0, 0, 1, 9, None]


def test_precise_wikiqa_fills_bins_and_reports(sources):
    pages, h = sources
    gen = FakeGenerator()
    items, report = generate_wiki_items(pwqa(seed=1), pages.pages, h, gen)
    # one round: every bin takes ceil(2 x 1.2) = 3 pages; then bin 3 has no page left (the others are full)
    # 29 questions: 10 bins x 3 pages, less bin 5's stub (no usable section, no attempt); the outlier and
    # bin 0's fourth page are not taken. All 29 questions are valid, so 29 answer checks ("Hard" ones fail).
    assert report.rounds == 1 and gen.calls == [29, 29]
    assert report.generator_calls == 2 and report.prompts == 58
    assert report.notes == {"pages": 32, "pages_outside_bin_edges": 1, "pages_without_h_score": 1}
    bins = {k: b.as_dict() for k, b in report.bins.items()}
    assert bins["3"] == {"bin": "3", "target": 2, "made": 0, "candidates": 3, "attempts": 3,
                         "rejected": {"unanswerable": 3}, "unusable": {}, "surplus": 0, "stopped": "exhausted"}
    assert bins["5"]["unusable"] == {"no_usable_section": 1} and bins["5"]["attempts"] == 2
    assert bins["5"]["made"] == 2 and bins["5"]["surplus"] == 0
    assert bins["7"]["rejected"] == {"answer_too_long": 1} and bins["7"]["made"] == 2
    assert bins["0"]["candidates"] == 4  # three pages and the unranked one
    assert [b.bin for b in report.incomplete()] == ["3"]
    assert "bin 3: 0/2 made after 3 attempts (stopped: exhausted); rejected: unanswerable=3" in report.summary()
    assert [i.bin for i in items] == [str(b) for b in range(10) if b != 3 for _ in range(2)]
    for item in items:
        assert words(item.answer) <= 10 and item.answer.startswith("K")
        assert item.prompt == f"What is the code of {item.fields['title']} " \
                              f"{['lead', 'History', 'Legacy'][item.provenance['section_index']]}?"
        assert item.answer in item.fields["reference"] and item.fields["pageid"] in pages_by_id(pages)
        assert item.provenance["generator_model"] == "meta-llama/Llama-3.1-70B-Instruct"
        assert item.fields["h_score_cat"] == int(item.bin) and item.provenance["seed"] == 1


def pages_by_id(pages):
    return {p.pageid: p for p in pages.pages}


def test_bounded_attempts_stop_a_failing_bin(sources):
    pages, h = sources
    items, report = generate_wiki_items(pwqa(seed=1, max_attempts_per_bin=2), pages.pages, h, FakeGenerator())
    hard = report.bins["3"]
    assert (hard.made, hard.attempts, hard.stopped, dict(hard.rejected)) == (0, 2, "max_attempts", {"unanswerable": 2})
    assert "bin 3: 0/2 made after 2 attempts (stopped: max_attempts); rejected: unanswerable=2" in report.summary()
    assert all(b.attempts <= 2 for b in report.bins.values())
    assert not any(i.bin == "3" for i in items)


def test_rounds_batch_all_bins(sources):
    """Without oversampling a rejected page is replaced in the next round; each round is two batched calls."""
    pages, h = sources
    gen = FakeGenerator()
    items, report = generate_wiki_items(pwqa(seed=4, oversample=0.0), pages.pages, h, gen)
    assert report.rounds >= 2 and len(gen.calls) == 2 * report.rounds
    assert gen.calls[0] == 20  # round 1: 2 pages per bin; bin 5's stub costs no attempt, a third page is taken
    assert [b.bin for b in report.incomplete()] == ["3"]
    assert sum(b.surplus for b in report.bins.values()) == 0


def test_reproducible_bit_for_bit_and_seeded(sources, tmp_path):
    pages, h = sources
    first = build_wiki_testset(Location.from_url(str(tmp_path / "a")), pwqa(seed=1), pages, h, FakeGenerator())
    second = build_wiki_testset(Location.from_url(str(tmp_path / "b")), pwqa(seed=1), pages, h, FakeGenerator())
    assert first.testset_id == second.testset_id and not second.reused
    for name in (ITEMS_FILE, MANIFEST_FILE):
        assert (tmp_path / "a" / "precise_wikiqa" / first.testset_id / name).read_bytes() == \
               (tmp_path / "b" / "precise_wikiqa" / second.testset_id / name).read_bytes()
    other = build_wiki_testset(Location.from_url(str(tmp_path / "a")), pwqa(seed=2), pages, h, FakeGenerator())
    assert all(a != b for a, b in zip(other.testset_id.split("-"), first.testset_id.split("-")))  # spec, content
    assert [i.prompt for i in other.items] != [i.prompt for i in first.items]
    assert sorted(Location.from_url(str(tmp_path / "a" / "precise_wikiqa")).list_names()) == \
           sorted([first.testset_id, other.testset_id])


def test_same_spec_is_reused_not_regenerated(sources, tmp_path):
    pages, h = sources
    root = Location.from_url(str(tmp_path / "store"))
    gen = FakeGenerator()
    made = build_wiki_testset(root, pwqa(seed=3), pages, h, gen)
    calls = len(gen.calls)
    again = build_wiki_testset(root, pwqa(seed=3), pages, h, gen)
    assert again.reused and len(gen.calls) == calls and again.testset_id == made.testset_id
    assert [i.row() for i in again.items] == [i.row() for i in made.items]
    assert again.report["bins"]["3"]["stopped"] == "exhausted"
    # another attempt bound is another spec
    assert not build_wiki_testset(root, pwqa(seed=3, max_attempts_per_bin=3), pages, h, gen).reused


def test_read_back_checks_integrity(sources, tmp_path):
    pages, h = sources
    root = Location.from_url(str(tmp_path))
    ts = build_wiki_testset(root, pwqa(seed=1), pages, h, FakeGenerator())
    back = TestSet.read(root, "precise_wikiqa", ts.testset_id)
    assert back.counts() == {str(b): 2 for b in range(10) if b != 3}
    item = back.task_items()[0]
    assert item.fields["answer"] == back.items[0].answer and item.fields["bin"] == back.items[0].bin
    manifest = json.loads((tmp_path / "precise_wikiqa" / ts.testset_id / MANIFEST_FILE).read_text())
    assert manifest["spec"]["sources"]["goodwiki"]["sha256"] == pages.refs[0].sha256
    assert manifest["report"]["complete"] is False
    # items edited after the fact no longer match the id
    table = pq.read_table(tmp_path / "precise_wikiqa" / ts.testset_id / ITEMS_FILE)
    pq.write_table(table.slice(1), tmp_path / "precise_wikiqa" / ts.testset_id / ITEMS_FILE)
    with pytest.raises(DataError, match="does not match its id"):
        TestSet.read(root, "precise_wikiqa", ts.testset_id)
    with pytest.raises(DataError, match="no test set nope"):
        TestSet.read(root, "precise_wikiqa", "nope")


def test_generator_returning_wrong_count_is_an_error(sources):
    pages, h = sources
    with pytest.raises(RunError, match="question generation: the generator returned 0 completions for 29"):
        generate_wiki_items(pwqa(seed=1), pages.pages, h, lambda prompts: [])


def test_generator_errors_are_counted(sources):
    pages, h = sources
    _, report = generate_wiki_items(pwqa(seed=1, max_attempts_per_bin=3), pages.pages, h,
                                    lambda prompts: [Completion(text=None, error="HTTP 503") for _ in prompts])
    assert all(dict(b.rejected) == {"generator_error": b.attempts} for b in report.bins.values())
    assert report.rounds == 1 and report.generator_calls == 1  # no question: no answer call


def test_longwiki(sources):
    pages, h = sources
    config = LongWikiConfig(per_bin=1, min_words=20, max_words=60, bin_edges=EDGES, seed=5)
    allowed = [p.title for p in pages.pages if p.title != "Page 9-0"]  # one page missing from the verification DB
    items, report = generate_wiki_items(config, pages.pages, h, FakeGenerator(), allowed_titles=allowed)
    assert report.notes["pages_not_in_allowed_titles"] == 1
    assert list(report.bins) == ["5", "6", "7", "8", "9"] and report.bins["9"].candidates == 2
    # each bin takes ceil(1 x 1.2) = 2 pages per round; "Brief" and "Bare" bins fail both, then hit the bound of 2
    assert dict(report.bins["6"].rejected) == {"mock_answer_too_short": 2}
    assert dict(report.bins["8"].rejected) == {"no_question": 2}
    assert report.bins["6"].stopped == report.bins["8"].stopped == "max_attempts"
    assert [i.bin for i in items] == ["5", "7", "9"]
    for item in items:
        assert item.task == "longwiki" and item.prompt.startswith("Describe the code of ")
        assert count_sentences(item.answer) >= 4 and not item.prompt.startswith('"')


def test_testset_on_s3(sources, s3_endpoint, bucket):
    pages, h = sources
    root = Location.from_url(f"s3://{bucket}/testsets", StorageSpec(root=f"s3://{bucket}", endpoint_url=s3_endpoint))
    ts = build_wiki_testset(root, pwqa(seed=1), pages, h, FakeGenerator())
    back = TestSet.read(root, "precise_wikiqa", ts.testset_id)
    assert back.testset_id == ts.testset_id and len(back.items) == 18
    assert TestSet.find(root, pwqa(seed=1).spec(back.spec.sources)) is not None


@pytest.mark.parametrize("kw, message", [
    ({"bin_edges": [0.0, 1.0, 1.0]}, "bin_edges must be at least two strictly increasing numbers"),
    ({"bins": [3, 10]}, r"bins must be distinct levels in 0..9, got \[3, 10\]"),
    ({"bins": [2, 2]}, "bins must be distinct levels"),
    ({"min_words": 400}, r"min_words \(400\) exceeds max_words \(375\)"),
    ({"per_bin": 0}, "greater than 0"),
])
def test_config_validation(kw, message):
    with pytest.raises(ValueError, match=message):
        PreciseWikiQAConfig(**kw)


def test_backend_adapter(sources):
    """Any ModelBackend plugs in: requests carry the task and a per-prompt id."""
    from halluscope.hallulens.generation import BackendGenerate

    class Backend:
        model_id = "fake"

        def __init__(self):
            self.requests = []

        def generate_batch(self, requests):
            self.requests += requests
            return [Completion(text=FakeGenerator.reply(r.prompt)) for r in requests]

    pages, h = sources
    backend = Backend()
    items, _ = generate_wiki_items(pwqa(seed=1), pages.pages, h, BackendGenerate(backend, "precise_wikiqa"))
    assert len(items) == 18 and {r.task for r in backend.requests} == {"precise_wikiqa"}
    assert len({r.item_id for r in backend.requests}) == len(backend.requests) == 58


def test_longwiki_job_leaves_out_pages_the_article_store_lacks(tmp_path):
    """The authors drop GoodWiki pages their verification database lacks: with them, every claim of
    the answer would lack its source page and stay unverified."""
    from halluscope.errors import ConfigError
    from halluscope.hallulens.build import TestSetJob, build, summary

    class Backend:
        model_id = "gen"

        def generate_batch(self, requests):
            return [Completion(text=FakeGenerator.reply(r.prompt)) for r in requests]

    goodwiki, titles, scores = write_wiki_sources(tmp_path)
    missing = {"Page 9-0", "Page 5-0", "Page 0-1"}  # two LongWiki pages (bins 5 and 9) and one of bin 0
    pages = [r for r in pq.read_table(goodwiki).to_pylist() if r["title"] not in missing]
    articles = tmp_path / "enwiki-articles.jsonl"
    articles.write_text("".join(json.dumps({"title": r["title"], "text": r["markdown"]}) + "\n" for r in pages))
    job = {"storage": {"root": f"file://{tmp_path}/runs"}, "task": "longwiki", "seeds": [5],
           "params": {"per_bin": 1, "min_words": 20, "max_words": 60, "bin_edges": EDGES},
           "sources": {"goodwiki": [str(goodwiki)], "wikirank_titles": str(titles), "wikirank_scores": str(scores),
                       "articles": str(articles)}}
    (ts,) = build(TestSetJob.model_validate(job), {"gen": Backend()})
    assert ts.report["notes"]["pages_not_in_allowed_titles"] == 3
    assert ts.report["bins"]["9"]["candidates"] == 2 and ts.report["bins"]["5"]["candidates"] == 2
    assert ts.items and not {i.fields["title"] for i in ts.items} & missing
    assert "pages left out, not in the article store: 3" in summary(ts)
    assert "allowed_titles_sha256" in ts.spec.params  # another store makes another test set
    with pytest.raises(ConfigError, match="sources.articles is required"):
        build(TestSetJob.model_validate({**job, "sources": {**job["sources"], "articles": None}}), {"gen": Backend()})
