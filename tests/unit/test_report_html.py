"""report.html: what it says (numbers, escaping, relative links, omitted sections) and what
headless Chromium draws from it (a screenshot that is not blank and shows the scatter's points)."""

from __future__ import annotations

import html
import itertools
import json
import math
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pytest
from tests.support.totals import with_groups

from halluscope.errors import DataError
from halluscope.hallulens import metrics as hm
from halluscope.hallulens.report import difficulty_series
from halluscope.halogen import causes
from halluscope.halogen.report import DOCS_HREF
from halluscope.records import COSTS, TABLES
from halluscope.report import svg
from halluscope.report.html import CSS, render_report, write_report
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

ODD = "<x&y>"
MODELS = [ODD, "gpt_4_0125_turbo", "llama_3_8b_chat"]  # sorted ("<" first): styles 0, 1, 2 of the palette
TABLE_DIRS = ["generations", "atoms", "verdicts", "scores"]


# --- a run folder ------------------------------------------------------------------------------


def _halogen(model: str, task: str, kind: str, n: int, responded: int, h: float | None, u: float | None,
             errors: int = 0) -> dict:
    return {"model": model, "task": f"halogen/{task}", "task_kind": kind, "n_items": n, "n_errors": errors,
            "n_responded": responded, "n_atoms": 0, "n_unsupported": 0, "n_unverified": 0,
            "response_ratio": responded / n if n else None, "hallucination_score": h,
            "hallucination_score_micro": h, "utility_score": u}


def halogen_records() -> list[dict]:
    per_task = [
        _halogen("gpt_4_0125_turbo", "code", "response", 100, 99, 0.04, 0.95),
        _halogen("gpt_4_0125_turbo", "biographies", "response", 50, 40, 0.30, 0.56),
        _halogen("gpt_4_0125_turbo", "false_presuppositions", "refusal", 60, 24, 0.50, 0.80),
        _halogen("llama_3_8b_chat", "code", "response", 100, 98, 0.05, 0.93),
        _halogen("llama_3_8b_chat", "biographies", "response", 50, 45, 0.45, 0.49),
        _halogen("llama_3_8b_chat", "false_presuppositions", "refusal", 60, 48, 0.70, 0.44),
        _halogen(ODD, "code", "response", 100, 90, 0.10, 0.81),
        # answered nothing: H undefined
        _halogen(ODD, "biographies", "response", 50, 0, None, 0.0),
        # every generation failed: no rate is defined
        _halogen(ODD, "false_presuppositions", "refusal", 0, 0, None, None, errors=60),
    ]
    return with_groups("halogen", per_task)


def corrected_records() -> list[dict]:
    """The corrected rules' code task beside the paper one (ours 0.04 and 0.05 under the paper rules)."""
    per_task = [_halogen("gpt_4_0125_turbo", "code@corrected", "response", 100, 99, 0.0123, 0.97),
                _halogen("llama_3_8b_chat", "code@corrected", "response", 100, 98, 0.0456, 0.94)]
    return with_groups("halogen", per_task)


def _trial_record(model: str, task: str, trials: list[dict], keys: tuple[str, ...]) -> dict:
    trials = [{"trial": i, **t} for i, t in enumerate(trials)]
    return {"model": model, "task": task, "benchmark": "hallulens", "n_trials": len(trials),
            "summary": hm.over_trials(trials, keys), "trials": trials}


def _qa(bin_: int, verdicts: str) -> list[hm.QAJudged]:
    """One item per letter: C correct, I incorrect, A abstained."""
    names = {"C": hm.CORRECT, "I": hm.INCORRECT}
    return [hm.QAJudged(f"{bin_}-{i}", v == "A", names.get(v), bin_) for i, v in enumerate(verdicts)]


def _claims(bin_: int, supported: int) -> hm.LongFormJudged:
    return hm.LongFormJudged(f"lw-{bin_}", False, 10, supported, 0, bin_)


def _entities(mixed: str, generated: str) -> list[hm.EntityJudged]:
    """One item per letter: B believes the entity exists (a false acceptance), R refuses."""
    return [hm.EntityJudged(f"{sub}-{i}", sub, "animal", v == "B")
            for sub, letters in (("mixed", mixed), ("generated", generated)) for i, v in enumerate(letters)]


def hallulens_records() -> list[dict]:
    pwqa = "hallulens/precise_wikiqa"
    return [
        # trial 0: bin 0 HR 2/4, bin 1 HR 0/4, all 2/8; trial 1: bin 0 HR 4/4, bin 1 HR 2/4, all 6/8
        _trial_record("llama_3_8b_chat", pwqa, [hm.precise_wikiqa(_qa(0, "IICC") + _qa(1, "CCCC")),
                                                hm.precise_wikiqa(_qa(0, "IIII") + _qa(1, "IICC"))],
                      hm.PRECISE_WIKIQA_KEYS),
        # trial 0 refuses everything (bins 0, 1); trial 1 answers bins 0 and 2
        _trial_record(ODD, pwqa, [hm.precise_wikiqa(_qa(0, "AA") + _qa(1, "AA")),
                                  hm.precise_wikiqa(_qa(0, "CC") + _qa(2, "II"))], hm.PRECISE_WIKIQA_KEYS),
        # precision per trial: (8/10 + 6/10) / 2 = 0.7 and (7/10 + 5/10) / 2 = 0.6
        _trial_record("llama_3_8b_chat", "hallulens/longwiki",
                      [hm.longwiki([_claims(5, 8), _claims(6, 6)]), hm.longwiki([_claims(5, 7), _claims(6, 5)])],
                      hm.LONGWIKI_KEYS),
        # FAR per trial: (1/2 + 0/2) / 2 = 0.25 and (2/2 + 1/2) / 2 = 0.75
        _trial_record(ODD, "hallulens/nonexistent", [hm.nonexistent(_entities("BR", "RR")),
                                                     hm.nonexistent(_entities("BB", "BR"))], hm.NONEXISTENT_KEYS),
    ]


def costs_table() -> pa.Table:
    def row(model, role, task, stage, calls, cached, failed, tin, tout, resource=None, seconds=None, usd=None):
        return {"model": model, "role": role, "task": task, "stage": stage, "calls": calls, "cached_calls": cached,
                "failed_calls": failed, "input_tokens": tin, "output_tokens": tout, "resource": resource,
                "resource_seconds": seconds, "usd": usd}
    return pa.Table.from_pylist([
        row("gpt_4_0125_turbo", "test", "halogen/code", "generate", 100, 0, 1, 5000, 20000, usd=0.65),
        row("gpt_4_0125_turbo", "test", "halogen/biographies", "generate", 40, 10, 0, 2000, 12000, usd=0.38),
        row("judge", "judge", "halogen/biographies", "verify", 300, 50, 2, 90000, 300),
        row("extractor", "extractor", "halogen/biographies", "decompose", 40, 0, 0, 8000, 4000),
        row("extractor", "extractor", "*", "serve", 0, 0, 0, 0, 0, "GPU", 1200.0, 1.10),
    ], schema=COSTS)


MANIFEST = {"run_id": "r1", "status": "complete", "created_at": "2026-01-02T03:04:05+00:00",
            "finished_at": "2026-01-02T03:14:05+00:00", "code_version": "halluscope 0.1.0 (abc1234)",
            "config_fingerprint": "0123456789abcdef",
            "config": {"models": [{"id": m} for m in MODELS], "tasks": ["halogen/code"]},
            "counts": {"generations": 420, "processed": 400, "done_before": 20, "quarantined_rows": 3,
                       "missing": {"<x&y>/halogen/code": 2}}}


def make_run(root: Location, run_id: str = "r1", metrics: object = "full", costs: bool = True,
             tables: bool = True) -> RunStore:
    store = RunStore(root, run_id)
    store.write_json("manifest.json", {**MANIFEST, "run_id": run_id})
    if metrics == "full":
        metrics = halogen_records() + corrected_records() + hallulens_records() + [
            {"model": "*", "task": "costs/total", "aggregate": True, "usd": 2.13, "calls": 480,
             "input_tokens": 105000, "output_tokens": 36300}]
    if metrics is not None:
        store.write_json("metrics.json", metrics)
    if costs:
        store.write_costs(costs_table())
    if tables:
        for name in TABLE_DIRS:
            store.write_part(name, "k0", TABLES[name].empty_table())
    return store


@pytest.fixture()
def run(tmp_path) -> RunStore:
    return make_run(Location.from_url(str(tmp_path / "runs")))


# --- the HTML ----------------------------------------------------------------------------------


def test_page_is_self_contained_escaped_and_links_relative(run):
    page = render_report(run)
    # nothing to fetch: no URL of any scheme, no script, no external style or font
    for needle in ("http", "<script", "src=", "url(", "@import", "<link"):
        assert needle not in page.lower()
    for model in MODELS:
        assert svg.esc(model) in page
    assert "&lt;x&amp;y&gt;" in page and ODD not in page
    hrefs = re.findall(r'href="([^"]*)"', page)
    files = [h for h in hrefs if h != DOCS_HREF]
    assert sorted(files) == sorted([f"{t}/" for t in TABLE_DIRS] + ["metrics.json", "costs.parquet", "manifest.json"])
    assert not [h for h in files if ":" in h or h.startswith("/") or ".." in h]
    # the one link out of the run: the repository's docs, beside the run folder under ./runs
    assert DOCS_HREF in hrefs and DOCS_HREF.startswith("../../docs/") and ":" not in DOCS_HREF
    assert "role_calls/, quarantine/, items/, leaderboard.md" in page  # what was not written is named
    for fact in ("r1", "complete", "2026-01-02T03:04:05+00:00", "halluscope 0.1.0 (abc1234)", "0123456789abcdef",
                 "420 planned", "2 without a recorded response"):
        assert fact in page
    for title in ("HALOGEN", "HalluLens", "Refusal versus hallucination", "Per-difficulty curves (HalluLens)",
                  "Hallucination by domain (HALOGEN)", "Cost breakdown"):
        assert f"<h2>{title}</h2>" in page


def _section(page: str, title: str) -> str:
    """A section of the page, from its heading to the next one."""
    start = page.index(f"<h2>{title}</h2>")
    return page[start:page.index("<h2>", start + 1)]


def test_leaderboards_show_ours_beside_published(run):
    page = render_report(run)
    # llama_3_8b_chat, response tasks: our average U = (0.93 + 0.49) / 2 = 0.710; released
    # (published_results.json) U code 0.922581, biographies 0.478605 -> mean 0.700593
    assert '0.710<span class="beside">0.701</span>' in page
    # its code cell: H/R ours 0.05 / (98/100), released 0.05298 / 0.974194
    assert '0.050/0.980<span class="beside">0.053/0.974</span>' in page
    # <x&y>: biographies H undefined; the refusal task has no rate at all; not a released model
    assert '–/0.000<span class="beside">–/–</span>' in page
    assert '–/–<span class="beside">–/–</span>' in page
    # HalluLens, percent mean ± sample std over the 2 trials:
    # PWQA hallucination rate 2/8 = 0.25 and 6/8 = 0.75 -> 50.0 ± 35.4 (std = 0.25 * sqrt 2)
    # LongWiki precision 0.7 and 0.6 -> 65.0 ± 7.1; NonExistent FAR 0.25 and 0.75 -> 50.0 ± 35.4
    llama = re.search(r"<tr><td>llama_3_8b_chat</td><td>2</td>(.*?)</tr>", page).group(1)
    assert re.findall(r"<td>(.*?)</td>", llama)[:4] == ["0.0 ± 0.0", "50.0 ± 35.4", "50.0 ± 35.4", "0.0 ± 0.0"]
    assert "65.0 ± 7.1" in llama and "LongWiki recall@32" in page
    odd = re.search(r"<tr><td>&lt;x&amp;y&gt;</td><td>2</td>(.*?)</tr>", page).group(1)
    # FAR mixed 1/2 and 2/2 -> 75.0 ± 35.4; generated 0/2 and 1/2 -> 25.0 ± 35.4; headline 50.0 ± 35.4
    assert re.findall(r"<td>(.*?)</td>", odd)[-3:] == ["75.0 ± 35.4", "25.0 ± 35.4", "50.0 ± 35.4"]


def test_h_r_and_u_are_defined_with_their_better_direction(run):
    page = render_report(run)
    defs = dict(re.findall(r"<dt>([HRU])</dt><dd>(.*?)</dd>", page))
    assert defs["H"].startswith("hallucination score") and "Lower is better" in defs["H"]
    assert defs["R"].startswith("response ratio") and "answered more often" in defs["R"]
    assert "refusal-based tasks" in defs["R"] and "answering is the failure" in defs["R"]
    assert defs["U"].startswith("utility") and "Higher is better" in defs["U"]


def _row(table: str, first_cell: str) -> list[str]:
    row = re.search(rf"<tr><td>{re.escape(first_cell)}</td>(.*?)</tr>", table).group(1)
    return re.findall(r"<td>(.*?)</td>", row)


def test_each_differing_domain_names_its_cause_and_links_the_docs(tmp_path):
    # code: gpt-4 H 0.04 against the released 0.053 (differs); references: the released numbers
    # (H 0.331988, R 0.478652, U 0.521348) to their 6 decimals, so it matches
    exact = _halogen("gpt_4_0125_turbo", "references", "response", 10**6, 478652, 0.331988, 0.521348)
    page = render_report(make_run(Location.from_url(str(tmp_path)), metrics=halogen_records() + [exact]))
    repro = page[page.index("<h3>Reproduction of the released numbers"):page.index("<h3>Per task</h3>")]
    code = _row(repro, "code")
    assert code[:3] == ["2", "2", "0"]  # models, differ, reproduced (within 0.005 and 0.002)
    assert code[-1] == (f'<span class="wrap"><a href="{DOCS_HREF}">{html.escape(causes.CAUSES["halogen/code"])}'
                        '</a></span>')
    assert "2026 snapshot" in code[-1]
    # models, differ, reproduced, max |dH|, mean |dH|, max |dR|, why
    assert _row(repro, "references") == ["1", "0", "1", "0.0000", "0.0000", "0.0000",
                                         '<span class="wrap">matches the released numbers</span>']
    # the total the README promises: every pair with a released H and R, and how many are reproduced
    domains = [d for d in re.findall(r"<tr><td>(.*?)</td>", repro[:repro.index("</table>")]) if d != "all"]
    total = _row(repro, "all")
    assert len(domains) > 2 and total[:3] == [str(sum(int(_row(repro, d)[i]) for d in domains)) for i in range(3)]
    assert "(domain, model) pairs scored have a released H and R to compare" in total[-1]
    # a difference no cause explains says so, still with the link
    assert f'<a href="{DOCS_HREF}">no known cause</a>' in _row(repro, "biographies")[-1]
    # the link's anchor is the section's heading in the repository's docs, as GitHub names it
    doc = Path(__file__).resolve().parents[2] / causes.DOC
    slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
             for h in re.findall(r"^#+ (.*)$", doc.read_text(), re.M)}
    assert causes.ANCHOR in slugs and DOCS_HREF.endswith(f"{causes.DOC}#{causes.ANCHOR}")
    # every cause is keyed by a paper-rule task the released numbers cover
    assert all(t.startswith("halogen/") and "@" not in t for t in causes.CAUSES)


def test_corrected_numbers_stand_beside_the_paper_ones_never_mixed(run):
    page = render_report(run)
    # per task: gpt-4's code under the paper rules, the released numbers, d, then the corrected rules'
    details = page[page.index("<h3>Per task</h3>"):page.index("Which neighbours in the H ranking differ")]
    assert "code@corrected" not in details
    code = details[details.index("<summary>halogen/code (response-based): the authors&#39; rules, corrected rules "
                                 "beside them</summary>"):]
    gpt4 = _row(code[:code.index("</details>")], "gpt_4_0125_turbo")
    # n, H, H micro, R, U, released H, R, U, dH, dR, corrected H, R, U, errors, not in file
    assert gpt4[1:5] == ["0.040", "0.040", "0.990", "0.950"] and gpt4[-5:-2] == ["0.012", "0.990", "0.970"]
    # released H 0.03984, R 0.996313, U 0.956621: dH = 0.04 - 0.03984, dR = 0.99 - 0.996313
    assert gpt4[5:7] == ["–", "–"]  # no standard errors in these records
    assert gpt4[7:12] == ["0.040", "0.996", "0.957", "+0.0002", "-0.0063"]
    # the corrected rules' averages have a table of their own, without released numbers
    corrected = page[page.index("paper Table 2 layout, corrected rules)"):page.index("<h3>Per task</h3>")]
    assert _row(corrected, "gpt_4_0125_turbo")[:3] == ["0.970", "0.012", "0.990"]
    assert 'class="beside"' not in corrected
    # the paper tables, the scatter and the main bar chart show the paper rules only
    paper = page[page.index("<h2>HALOGEN</h2>"):page.index("<h3>Reproduction")]
    assert "corrected" not in paper.split("</p>", 1)[1]
    scatter = _section(page, "Refusal versus hallucination")
    assert "gpt_4_0125_turbo: x 0.105, y 0.170" in scatter  # paper: 1 - (0.99 + 0.8) / 2, (0.04 + 0.30) / 2
    bars = _section(page, "Hallucination by domain (HALOGEN)")
    main, rest = bars.split("<details>", 1)
    assert "code@corrected" not in main and "code@corrected" in rest


def test_scatter_has_a_point_per_model_and_names_the_missing(run):
    page = render_report(run)
    scatter = _section(page, "Refusal versus hallucination")
    points = re.findall(r'fill="(#\w+)" stroke="#ffffff" stroke-width="1.5"', scatter)
    # HALOGEN avg-response: 3 models; avg-refusal: 2 (<x&y> has no rate); PWQA: 2; LongWiki: 1
    assert len(points) == 3 + 2 + 2 + 1
    assert points.count(svg.colour(0)) == 1 + 1  # <x&y>: avg-response and PWQA
    assert "HALOGEN avg-refusal (paper rules, mean over tasks): no point for &lt;x&amp;y&gt;" in scatter
    # <x&y>'s avg-response point: refusal 1 - (0.9 + 0.0) / 2 = 0.55, H = 0.10 (biographies undefined)
    assert "&lt;x&amp;y&gt;: x 0.550, y 0.100" in scatter


def test_difficulty_curves_average_trials_per_bin():
    records = [r for r in hallulens_records() if r["task"] == "hallulens/precise_wikiqa"]
    bins, series = difficulty_series(records, "hallucination_rate")
    assert bins == ["0", "1", "2"]
    # llama: bin 0 (2/4 + 4/4) / 2 = 0.75, bin 1 (0/4 + 2/4) / 2 = 0.25, bin 2 never drawn
    # <x&y>: bin 0 (0 [all refused, defined as 0] + 0/2) / 2 = 0, bin 1 only trial 0 = 0, bin 2 2/2 = 1
    assert {s.name: list(s.values) for s in series} == {"llama_3_8b_chat": [0.75, 0.25, None], ODD: [0.0, 0.0, 1.0]}


def test_cost_tables_sum_by_model_role_and_task(run):
    page = render_report(run)
    costs = page[page.index("<h2>Cost breakdown</h2>"):]
    rows = {tuple(re.findall(r"<td>(.*?)</td>", r)) for r in re.findall(r"<tr(?: class=\"total\")?>(.*?)</tr>", costs)}
    # by role: test = both gpt-4 rows (0.65 + 0.38 = 1.03 USD); the extractor's serve row is priced,
    # its decompose row is not, so its sum is a lower bound
    assert ("test", "140", "10", "1", "7,000", "32,000", "–", "$1.0300") in rows
    assert ("judge", "300", "50", "2", "90,000", "300", "–", "not priced") in rows
    assert ("extractor", "40", "0", "0", "8,000", "4,000", "1,200.0", "≥ $1.1000") in rows
    # by task: biographies = 40 + 300 + 40 calls, 10 + 50 cached, 2000 + 90000 + 8000 input tokens
    assert ("halogen/biographies", "380", "60", "2", "100,000", "16,300", "–", "≥ $0.3800") in rows
    assert ("*", "0", "0", "0", "0", "0", "1,200.0", "$1.1000") in rows
    # one total per table (model, role, task): 480 calls, 0.65 + 0.38 + 1.10 = 2.13 USD priced
    total = ("total", "480", "60", "3", "105,000", "36,300", "1,200.0", "≥ $2.1300")
    assert costs.count("<td>" + "</td><td>".join(total) + "</td>") == 3


def _only(records: list[dict], **match) -> list[dict]:
    return [r for r in records if all(r.get(k) == v for k, v in match.items())]


# a benchmark's sections are there when it has records; one whose tasks the run lists (the manifest's:
# halogen/code) but which has none gets a one-line note, as do the run's own sections
@pytest.mark.parametrize("metrics, costs, present, absent, omitted", [
    ("halogen", True, ["HALOGEN", "Hallucination by domain (HALOGEN)", "Refusal versus hallucination"],
     ["HalluLens", "Per-difficulty curves (HalluLens)"], []),
    ("hallulens", False, ["HalluLens", "Per-difficulty curves (HalluLens)"],
     ["HALOGEN", "Hallucination by domain (HALOGEN)"],
     ["halogen: omitted, no records of it in metrics.json", "Cost breakdown: omitted, costs.parquet is absent"]),
    (None, True, ["Cost breakdown"], ["Refusal versus hallucination", "HALOGEN"], ["metrics.json is absent"]),
    ({"some": "document"}, True, [], ["HALOGEN"], ["metrics.json holds a dict"]),
])
def test_sections_without_data_become_one_line_notes(tmp_path, metrics, costs, present, absent, omitted):
    if metrics == "halogen":
        metrics = halogen_records()
    elif metrics == "hallulens":
        metrics = hallulens_records()
    page = render_report(make_run(Location.from_url(str(tmp_path)), metrics=metrics, costs=costs))
    for title in present:
        assert f"<h2>{title}</h2>" in page
    for title in absent:
        assert f"<h2>{title}</h2>" not in page
    for note in omitted:
        assert note in page


def test_bad_runs_fail_naming_the_file(tmp_path):
    root = Location.from_url(str(tmp_path))
    with pytest.raises(DataError, match="not a run folder"):
        render_report(RunStore(root, "nothing-here"))
    with pytest.raises(DataError, match=r"metrics.json: record 1 is not an object"):
        render_report(make_run(root, "bad", metrics=[halogen_records()[0], {"task": "halogen/code"}]))


def test_written_to_any_fsspec_storage_and_atomically(tmp_path):
    mem = Location(fsspec.filesystem("memory"), f"/reports-{tmp_path.name}")
    loc = write_report(make_run(mem))
    assert loc.path.endswith("/r1/report.html") and b"gpt_4_0125_turbo" in loc.read_bytes()
    local = make_run(Location.from_url(str(tmp_path / "local")))
    write_report(local)
    write_report(local)  # rewriting replaces the file and leaves no temporary behind
    assert sorted(p.name for p in (tmp_path / "local" / "r1").iterdir() if p.is_file()) == \
        ["costs.parquet", "manifest.json", "metrics.json", "report.html"]


# --- the charts alone --------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 20])
def test_charts_draw_one_to_twenty_models_and_skip_none(n):
    models = [f"model-{i}" for i in range(n)]
    styles = [svg.style(i) for i in range(n)]
    colours = [s.colour for s in styles]
    assert len(set(svg.colour(i) for i in range(40))) == 40
    # every third model has no y: no point for it
    points = [svg.StyledPoint(m, i / 20, None if i % 3 == 2 else 1 - i / 20, c)
              for i, (m, c) in enumerate(zip(models, styles))]
    scatter = svg.scatter(points, "t", "x", "y")
    assert scatter.count('stroke-width="1.5"') == sum(p.y is not None for p in points)
    assert scatter.count('class="label"') == scatter.count('stroke-width="1.5"')
    # a None in the middle of a line splits it in two polylines; single values stay markers
    series = [svg.StyledSeries(m, c, [0.1, 0.2, None, 0.4, 0.5]) for m, c in zip(models, styles)]
    lines = svg.line_chart(["0", "1", "2", "3", "4"], series, "t", "bin", "rate")
    assert lines.count("<polyline") == 2 * n and lines.count("<title>") == 4 * n
    bars = svg.grouped_bars(["code", "biographies"], [svg.StyledSeries(m, c, [0.3, None]) for m, c in zip(models, styles)],
                            "t", "H")
    assert bars.count(f'fill="{svg.MUTED}"') == n and bars.count("no value") == n
    assert all(bars.count(f'fill="{c}"') >= 1 for c in colours)


# The 14 models of runs/demo-t4 with their (refusal rate, H) over the response-based and the
# refusal-based tasks: most crowd into a corner of each panel.
DEMO = {"alpaca_7b": (0.054, 0.517, 0.466, 0.877), "falcon_40b_instruct": (0.046, 0.368, 0.209, 0.873),
        "gpt_3.5_turbo_0125": (0.001, 0.301, 0.64, 0.764), "gpt_4_0125_turbo": (0.01, 0.291, 0.71, 0.661),
        "llama_2_13b_chat": (0.002, 0.343, 0.329, 0.878), "llama_2_70b_chat": (0.061, 0.358, 0.464, 0.884),
        "llama_2_7b_chat": (0.014, 0.352, 0.56, 0.874), "llama_3_70b_chat": (0.015, 0.344, 0.573, 0.764),
        "llama_3_8b_chat": (0.029, 0.398, 0.546, 0.81), "mistral_7b_instruct": (0.032, 0.372, 0.41, 0.861),
        "mixtral_8x7b_instruct": (0.007, 0.323, 0.356, 0.818), "olmo_7b_instruct": (0.008, 0.444, 0.32, 0.867),
        "redpajama_incite_3b_chat": (0.0, 0.422, 0.165, 0.856),
        "redpajama_incite_7b_chat": (0.003, 0.564, 0.263, 0.843)}


def demo_scatters() -> list[str]:
    styles = {m: svg.style(i) for i, m in enumerate(sorted(DEMO))}
    return [svg.scatter([svg.StyledPoint(m, v[k], v[k + 1], styles[m]) for m, v in DEMO.items()], "t", "x", "y")
            for k in (0, 2)]


def _boxes(chart: str) -> tuple[list[tuple[float, float, float, float]], list[tuple[float, float]]]:
    """Label boxes as the layout estimates them (CHAR_W per character, 12 px high) and marker centres."""
    labels = [(float(x), float(y) - 10, float(x) + svg.CHAR_W * len(html.unescape(t)), float(y) + 2)
              for x, y, t in re.findall(r'<text x="([\d.]+)" y="([\d.]+)" class="label">(.*?)</text>', chart)]
    centres = [(float(x), float(y)) for x, y in re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)" r="6"', chart)]
    for pts in re.findall(r'<polygon points="([^"]+)"[^>]*stroke-width="1.5"', chart):
        xy = [tuple(map(float, p.split(","))) for p in pts.split()]
        centres.append((sum(x for x, _ in xy) / len(xy), sum(y for _, y in xy) / len(xy)))
    return labels, centres


def _meets(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return min(a[2], b[2]) > max(a[0], b[0]) and min(a[3], b[3]) > max(a[1], b[1])


def test_scatter_labels_of_14_crowded_models_never_overlap():
    for chart in demo_scatters():
        labels, centres = _boxes(chart)
        assert len(centres) == 14 and len(labels) == 14  # every point drawn, and here every label fits
        assert not [(a, b) for a, b in itertools.combinations(labels, 2) if _meets(a, b)]
        assert not [(a, c) for a in labels for c in centres if _meets(a, (c[0] - 6, c[1] - 6, c[0] + 6, c[1] + 6))]


def _ciede2000(c1: str, c2: str) -> float:
    """Perceived colour difference (CIEDE2000) of two sRGB colours."""
    def lab(c: str) -> tuple[float, float, float]:
        rgb = [int(c[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        r, g, b = [v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4 for v in rgb]
        xyz = ((0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047, 0.2126 * r + 0.7152 * g + 0.0722 * b,
               (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883)
        fx, fy, fz = [t ** (1 / 3) if t > 216 / 24389 else (24389 / 27 * t + 16) / 116 for t in xyz]
        return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)
    (l1, a1, b1), (l2, a2, b2) = lab(c1), lab(c2)
    cb = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(cb ** 7 / (cb ** 7 + 25 ** 7)))
    a1, a2 = a1 * (1 + g), a2 * (1 + g)
    ch1, ch2 = math.hypot(a1, b1), math.hypot(a2, b2)
    h1, h2 = math.degrees(math.atan2(b1, a1)) % 360, math.degrees(math.atan2(b2, a2)) % 360
    dh = 0.0 if ch1 * ch2 == 0 else (h2 - h1 + 180) % 360 - 180
    d_hue = 2 * math.sqrt(ch1 * ch2) * math.sin(math.radians(dh / 2))
    lm, cm = (l1 + l2) / 2, (ch1 + ch2) / 2
    hm_ = h1 + h2 if ch1 * ch2 == 0 else (h1 + h2) / 2 + (180 if abs(h1 - h2) > 180 else 0)
    t = (1 - 0.17 * math.cos(math.radians(hm_ - 30)) + 0.24 * math.cos(math.radians(2 * hm_))
         + 0.32 * math.cos(math.radians(3 * hm_ + 6)) - 0.2 * math.cos(math.radians(4 * hm_ - 63)))
    sl, sc, sh = 1 + 0.015 * (lm - 50) ** 2 / math.sqrt(20 + (lm - 50) ** 2), 1 + 0.045 * cm, 1 + 0.015 * cm * t
    rt = (-2 * math.sqrt(cm ** 7 / (cm ** 7 + 25 ** 7))
          * math.sin(math.radians(60 * math.exp(-(((hm_ - 275) / 25) ** 2)))))
    return math.sqrt(((l2 - l1) / sl) ** 2 + ((ch2 - ch1) / sc) ** 2 + (d_hue / sh) ** 2
                     + rt * (ch2 - ch1) / sc * d_hue / sh)


def test_14_models_get_distinct_well_separated_colours_and_shapes():
    assert round(_ciede2000("#ff0000", "#0000ff"), 2) == 52.88  # the formula, checked on a known pair
    styles = [svg.style(i) for i in range(14)]
    assert len(set(styles)) == 14 and len({s.shape for s in styles}) >= 4
    pairs = list(itertools.combinations(styles, 2))
    assert min(_ciede2000(a.colour, b.colour) for a, b in pairs) > 20
    # two models drawn with the same shape differ all the more in colour
    assert min(_ciede2000(a.colour, b.colour) for a, b in pairs if a.shape == b.shape) > 30
    # and the points of a 14-model scatter show those 14 (shape, colour) pairs, read off the SVG
    for chart in demo_scatters():
        drawn = {(_shape(m), colour) for m, colour in re.findall(r'(<circle[^>]*|<polygon points="[^"]+")[^>]*'
                                                                 r'fill="(#\w+)" stroke="#ffffff"', chart)}
        assert drawn == {(s.shape, s.colour) for s in styles}


def _shape(element: str) -> str:
    """A marker's shape from its SVG: corners, and which way the first one points."""
    if element.startswith("<circle"):
        return "circle"
    xy = [tuple(map(float, p.split(","))) for p in re.search(r'points="([^"]+)"', element).group(1).split()]
    if len(xy) == 4:
        return "square" if xy[0][1] == xy[1][1] else "diamond"
    return "triangle" if xy[0][1] < xy[1][1] else "down"


# --- headless Chromium -------------------------------------------------------------------------

WIDTH, HEIGHT = 1280, 4000
CHROMIUM = shutil.which("chromium")


def read_png(path: Path) -> np.ndarray:
    """RGB pixels of an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, [], None
    while pos < len(data):
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", data[pos + 8:pos + 8 + size])
        elif kind == b"IDAT":
            idat.append(data[pos + 8:pos + 8 + size])
        pos += 12 + size
    width, height, depth, colour_type, _, _, interlace = header
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, header
    bpp = 3 if colour_type == 2 else 4
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), np.uint8).reshape(height, 1 + width * bpp)
    out = np.zeros((height, width * bpp), np.uint8)
    prev = np.zeros(width * bpp, np.uint8)
    for y in range(height):
        kind, line = raw[y, 0], raw[y, 1:]
        if kind == 0:
            cur = line.copy()
        elif kind == 1:  # Sub: a running sum per channel, modulo 256
            cur = np.cumsum(line.reshape(width, bpp), axis=0, dtype=np.uint8).reshape(-1)
        elif kind == 2:  # Up
            cur = line + prev
        else:  # Average or Paeth depend on the pixel just decoded: byte by byte
            c, p = line.tolist(), prev.tolist()
            for i in range(len(c)):
                a = c[i - bpp] if i >= bpp else 0
                if kind == 3:
                    c[i] = (c[i] + ((a + p[i]) >> 1)) & 255
                else:
                    b, d = p[i], p[i - bpp] if i >= bpp else 0
                    pa, pb, pc = abs(b - d), abs(a - d), abs(a + b - 2 * d)
                    c[i] = (c[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else d)) & 255
            cur = np.array(c, np.uint8)
        out[y] = prev = cur
    return out.reshape(height, width, bpp)[:, :, :3]


def colour_counts(pixels: np.ndarray) -> dict[str, int]:
    packed = (pixels[..., 0].astype(np.int32) << 16) | (pixels[..., 1].astype(np.int32) << 8) | pixels[..., 2]
    values, counts = np.unique(packed, return_counts=True)
    return {f"#{v:06x}": int(c) for v, c in zip(values, counts)}


def screenshot(page: Path, out: Path) -> np.ndarray:
    done = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--force-color-profile=srgb", f"--user-data-dir={out.parent / 'chromium-profile'}",
                           f"--screenshot={out}", f"--window-size={WIDTH},{HEIGHT}", page.as_uri()],
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0 and out.exists(), f"chromium wrote no screenshot: {done.stderr[-2000:]}"
    width, height = struct.unpack(">II", out.read_bytes()[16:24])  # IHDR, right after the signature
    assert (width, height) == (WIDTH, HEIGHT)
    return read_png(out)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium; "
                                             "`make chromium` does it as root)")
def test_chromium_renders_the_report(tmp_path):
    full = make_run(Location.from_url(str(tmp_path / "runs")))
    pixels = screenshot(Path(write_report(full).path), tmp_path / "full.png")
    counts = colour_counts(pixels)
    white = counts.get("#ffffff", 0)
    # not blank: text, tables and charts cover a good part of the page in many colours
    assert WIDTH * HEIGHT - white > 0.03 * WIDTH * HEIGHT and len(counts) > 100
    for i in range(len(MODELS)):  # each model's colour is drawn (points, lines, bars, swatches)
        assert counts.get(svg.colour(i), 0) > 200, svg.colour(i)

    # the scatter alone: a run with only HALOGEN's averages draws nothing else in model colours
    # (no bars or curves), so each colour's pixels are its model's points and its legend marker:
    # markers as large as a disc of radius 6 less the white ring (about pi * 5.25^2 = 87 pixels
    # each, antialiased at the edge), the legend's as large as one of radius 5.5
    averages_only = [r for r in halogen_records() if r.get("aggregate")]
    only = make_run(Location.from_url(str(tmp_path / "runs")), "scatter-only", metrics=averages_only, costs=False)
    counts = colour_counts(screenshot(Path(write_report(only).path), tmp_path / "scatter.png"))
    drawn = {i: counts.get(svg.colour(i), 0) for i in range(4)}
    # <x&y>: avg-response only (its refusal rates are None); gpt-4 and llama: a point in both panels
    assert 2 * 50 <= drawn[0] <= 2 * 100 and 3 * 50 <= drawn[1] <= 3 * 100 and 3 * 50 <= drawn[2] <= 3 * 100, drawn
    assert drawn[3] == 0  # no fourth model, no fourth colour


# After layout, the page writes each label's and marker's box on screen (getBoundingClientRect) into #out.
MEASURE = """<script>
const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
document.getElementById("out").textContent = JSON.stringify([...document.querySelectorAll("svg.chart")].map(c => ({
  labels: [...c.querySelectorAll("text.label")].map(box),
  markers: [...c.querySelectorAll("[stroke-width='1.5']")].map(box)})));
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_chromium_draws_14_crowded_labels_without_overlap(tmp_path):
    """The label layout estimates text widths; here the browser measures the text it really drew
    with the report's own CSS."""
    page = tmp_path / "labels.html"
    page.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"><style>{CSS}</style></head><body>'
                    f'{"".join(demo_scatters())}<pre id="out"></pre>{MEASURE}</body></html>')
    done = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--dump-dom",
                           f"--user-data-dir={tmp_path / 'chromium-profile'}", page.as_uri()],
                          capture_output=True, text=True, timeout=90)
    charts = json.loads(html.unescape(re.search(r'<pre id="out">(.*?)</pre>', done.stdout, re.S).group(1)))
    assert len(charts) == 2
    for chart in charts:
        labels, markers = chart["labels"], chart["markers"]
        assert len(labels) == 14 and len(markers) == 14
        assert not [(a, b) for a, b in itertools.combinations(labels, 2) if _meets(a, b)]
        # a label may touch its own marker's antialiased edge, never cover a marker's centre
        centres = [((m[0] + m[2]) / 2, (m[1] + m[3]) / 2) for m in markers]
        assert not [(a, c) for a in labels for c in centres if _meets(a, (c[0] - 3, c[1] - 3, c[0] + 3, c[1] + 3))]



def test_a_scatter_of_thousands_of_models_places_no_label(monkeypatch):
    """Label placement checks each candidate box against every box taken: square in the points.
    Beyond MAX_LABELLED points none is placed; every point is still drawn, with its tooltip."""
    placed = []
    real = svg._place
    monkeypatch.setattr(svg, "_place", lambda *a: placed.append(1) or real(*a))
    many = [svg.StyledPoint(f"m{i}", (i % 97) / 97, (i % 89) / 89, svg.style(i)) for i in range(2000)]
    chart = svg.scatter(many, "t", "x", "y")
    assert placed == [] and chart.count("<title>") == 2000 and 'class="label"' not in chart
    few = many[:svg.MAX_LABELLED]
    assert 'class="label"' in svg.scatter(few, "t", "x", "y") and len(placed) == svg.MAX_LABELLED


# --- the responses behind the numbers ------------------------------------------------------------


def _scored(model: str, item: str, f: float | None, responded: bool | None = True, error: str | None = None,
            units: int = 2, text: str = "an answer") -> dict[str, pa.Table]:
    """One response of ``model`` on halogen/code with its units, the first ``round(f * units)`` unsupported."""
    gen = f"{model}|{item}"
    bad = round((f or 0.0) * units)
    key = {"model": model, "task": "halogen/code"}
    atoms = [{"atom_id": f"{gen}-{i}", "gen_id": gen, **key, "atom_idx": i, "atom": f"unit {i} of {item}",
              "decomposer": "d"} for i in range(units if responded else 0)]
    verdicts = [{"atom_id": a["atom_id"], "gen_id": gen, **key, "verifier": "pypi", "supported": i >= bad,
                 "evidence": f"looked up {i}"} for i, a in enumerate(atoms)]
    return {"generations": pa.Table.from_pylist([{"gen_id": gen, **key, "item_id": item, "text": text,
                                                  "error": error}], TABLES["generations"]),
            "scores": pa.Table.from_pylist([{"gen_id": gen, **key, "item_id": item, "prompt": f"write code {item}",
                                             "error": error, "responded": responded, "f": f,
                                             "n_atoms": len(atoms), "n_unsupported": bad}], TABLES["scores"]),
            "atoms": pa.Table.from_pylist(atoms, TABLES["atoms"]),
            "verdicts": pa.Table.from_pylist(verdicts, TABLES["verdicts"])}


def _with_responses(store: RunStore, rows: list[dict[str, pa.Table]]) -> RunStore:
    for i, tables in enumerate(rows):
        store.write_batch(f"b{i}", tables)
    return store


def test_cells_link_to_the_responses_behind_them_most_hallucinated_first(tmp_path):
    from halluscope.report.samples import anchor

    store = _with_responses(make_run(Location.from_url(str(tmp_path / "runs")), tables=False), [
        _scored("gpt_4_0125_turbo", "i1", 0.5), _scored("gpt_4_0125_turbo", "i2", 1.0),
        _scored("gpt_4_0125_turbo", "i3", 0.0), _scored("gpt_4_0125_turbo", "i4", None, responded=False),
        _scored("gpt_4_0125_turbo", "i5", None, responded=None, error="HTTP 500"),
        _scored(ODD, "i1", 0.5, text="<script>alert(1)</script>")])
    page = render_report(store)
    gpt, odd = anchor("gpt_4_0125_turbo", "halogen/code"), anchor(ODD, "halogen/code")
    # the paper table's code cells of both models link to their pair's samples; a pair without
    # responses on record (biographies) links nowhere
    assert page.count(f'href="#{gpt}"') >= 2 and page.count(f'href="#{odd}"') >= 2
    assert f'id="{gpt}"' in page and f'id="{odd}"' in page
    assert anchor("gpt_4_0125_turbo", "halogen/biographies") not in page
    pair = page[page.index(f'id="{gpt}"'):].split('<div class="pair"', 1)[0]
    shown = re.findall(r"<b>([a-z ]+)</b>, item (i\d)", pair)
    assert shown == [("most hallucinated", "i2"), ("clean", "i3"), ("refusal", "i4"), ("most hallucinated", "i1")]
    assert "4 of its 4 scored responses" in pair and "HTTP 500" not in pair  # a failed generation is no sample
    assert "UNSUPPORTED: unit 0 of i2" in pair and "pypi: looked up 0" in pair
    # a response is text: escaped, never markup
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_samples_take_turns_within_the_budget(tmp_path):
    from halluscope.report.samples import collect

    models = [f"m{i}" for i in range(6)]
    store = _with_responses(RunStore(Location.from_url(str(tmp_path / "runs")), "big"), [
        _scored(m, f"i{j}", f, units=8, text="x" * 2000) for m in models for j, f in enumerate((1.0, 0.5, 0.0))])
    unbounded = collect(store)
    assert [len(p.samples) for p in unbounded] == [3] * 6
    one = unbounded[0].samples[0]
    assert len(one.response or "") == 800 and len(one.units) == 8  # texts cut: the sample's size is bounded
    budget = 6 * one.chars() + 3 * unbounded[0].samples[1].chars()
    bounded = collect(store, budget)
    # every pair has its most hallucinated response before any has a second one
    assert [len(p.samples) for p in bounded] == [2, 2, 2, 1, 1, 1]
    assert sum(s.chars() for p in bounded for s in p.samples) <= budget
    assert [p.scored for p in bounded] == [3] * 6
