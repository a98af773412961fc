"""What a run says in text: each benchmark's leaderboard section with its own preamble (HALOGEN's
H/R/U only when HALOGEN is in the run), no HTML entities where the text is read on a terminal, the
dollars of `halluscope report --json` equal to the leaderboard's, and the quarantine named with
its folder where `halluscope run` lists the items its file did not answer."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pytest
import yaml

from halluscope import records
from halluscope.cli import main
from halluscope.contract.metrics import MetricRecord
from halluscope.cost.ledger import cost_record
from halluscope.halogen.report import PREAMBLE
from halluscope.report.leaderboard import input_notes, leaderboard
from halluscope.report.render import md_text
from halluscope.storage.fs import Location
from halluscope.storage.parquet import table_to_bytes
from halluscope.storage.run import RunStore

HRU = "H = hallucination score"
HALOGEN_PREAMBLE = md_text(PREAMBLE)  # as leaderboard.md writes it
ENTITY = re.compile(r"&(?:gt|lt|amp|quot|#\d+);")


def board_of(recs: list[dict]) -> str:
    """leaderboard.md of records as metrics.json holds them."""
    return leaderboard([MetricRecord.from_json(r) for r in recs], "r")


def halogen(model: str = "m1") -> dict:
    return {"model": model, "task": "halogen/code", "benchmark": "halogen", "task_kind": "response",
            "n_items": 4, "n_errors": 0, "n_missing": 0, "hallucination_score": 0.25,
            "hallucination_score_micro": 0.2, "response_ratio": 1.0, "utility_score": 0.75}


def hallulens(model: str = "m1") -> dict:
    summary = {"false_refusal_rate": {"mean": 0.5, "std": None}, "hallucination_rate": {"mean": 0.5, "std": None},
               "correct_rate": {"mean": 0.25, "std": None}}
    return {"model": model, "task": "hallulens/precise_wikiqa", "benchmark": "hallulens", "n_trials": 1,
            "summary": summary, "trials": []}


def ragtruth(model: str = "m1") -> dict:
    return {"model": model, "task": "ragtruth/generate", "benchmark": "ragtruth", "table": "generation",
            "task_type": "Overall", "scored": 3, "hallucination_rate": 1 / 3, "density": 6.5,
            "generation_errors": 0, "unpredicted": 0}


def fewl(model: str = "m1") -> list[dict]:
    pair = {"method": "fewl", "positive": "best", "negative": "bad", "wins": 3, "ties": 0, "losses": 1,
            "share": 0.75, "skipped": {}}
    return [{"model": model, "task": "fewl/score", "benchmark": "fewl", "items": 4, "scored": 4, "unscored": 0,
             "mean_score": 0.1, "mean_truthfulness": 0.3, "mean_penalty": 0.2, "share_above_zero": 0.75,
             "methods": {"fewl": 0.1}},
            {"model": "(labelled candidates)", "task": "fewl/score", "benchmark": "fewl", "dataset": "truthfulqa-gen",
             "questions": 4, "scored_questions": 4, "mean_by_label": [],
             "evaluation": {"pairwise": [pair], "ranked_first": [{"method": "fewl", "label": "best", "first": 2,
                                                                   "compared": 4}]}}]


PREAMBLES = {  # a phrase of each benchmark's own preamble
    "hallulens": "false refusal = share of questions the model declined",
    "ragtruth": "Hallucination rate = share of answers with at least one span",
    "fewl": "FEWL scores an answer without a gold answer",
}


@pytest.mark.parametrize("name,recs", [("hallulens", [hallulens()]), ("ragtruth", [ragtruth()]), ("fewl", fewl())])
def test_a_run_without_halogen_has_no_halogen_preamble_and_its_benchmark_has_its_own(name, recs):
    board = board_of(recs)
    assert HRU not in board and "HALOGEN" not in board
    assert PREAMBLES[name] in board
    assert [b for b, phrase in PREAMBLES.items() if phrase in board] == [name]


def test_halogen_preamble_only_with_halogen_and_before_its_tables():
    board = board_of([halogen(), hallulens(), ragtruth(), *fewl()])
    assert board.count(HALOGEN_PREAMBLE) == 1
    head = board.index("## HALOGEN")
    assert head < board.index(HALOGEN_PREAMBLE) < board.index("## halogen/code (response-based)")
    assert board.index(HALOGEN_PREAMBLE) < board.index("## HalluLens")
    assert all(phrase in board for phrase in PREAMBLES.values())
    # a run written before records named their benchmark: its HALOGEN records still count as HALOGEN
    old = {k: v for k, v in halogen().items() if k != "benchmark"}
    assert HALOGEN_PREAMBLE in board_of([old])


def test_leaderboard_text_has_no_html_entities():
    board = board_of([halogen(), hallulens(), ragtruth(), *fewl()])
    assert "| fewl | best > bad | 3 | 0 | 1 | 75.0 | - |" in board
    assert not ENTITY.search(board), ENTITY.findall(board)


def test_hostile_ids_stay_escaped_in_the_fewl_section():
    board = board_of(fewl("<b>&x"))
    assert "&lt;b>&amp;x" in board and "<b>" not in board


def _old_run(tmp_path) -> Location:
    """A finished run as 90c560b wrote it: replayed answers only, no line item in costs.parquet, and
    metrics.json's total with usd null (its ledger summed no priced row to None)."""
    run = tmp_path / "runs" / "mine"
    run.mkdir(parents=True)
    total = {"model": "*", "task": "costs/total", "aggregate": True, "usd": None, "calls": 0, "input_tokens": 0,
             "output_tokens": 0}
    (run / "metrics.json").write_text(json.dumps([halogen(), total]))
    (run / "leaderboard.md").write_text("# halluscope leaderboard: run mine\n")
    (run / "manifest.json").write_text(json.dumps({"run_id": "mine", "status": "complete"}))
    (run / "costs.parquet").write_bytes(table_to_bytes(records.COSTS.empty_table()))
    return Location.from_url(str(run))


def test_report_json_gives_the_dollars_plan_and_the_leaderboard_give(tmp_path, capsys):
    run = _old_run(tmp_path)
    assert main(["report", run.url, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (total,) = [r for r in out if r["task"] == "costs/total"]
    assert total["usd"] == 0.0 and total["complete"] is True and total["unpriced_rows"] == 0
    assert out[0] == halogen()  # the other records as written
    # the leaderboard states the same $0 (it printed no cost line for a run without model calls)
    board = board_of([halogen(), cost_record(records.COSTS.empty_table()).as_json()])
    assert "Cost of this run: $0.0000; 0 model calls" in board


def test_report_json_keeps_a_current_total_as_written(tmp_path, capsys):
    run = _old_run(tmp_path)
    costs = pa.Table.from_pylist([{"model": "judge", "role": "judge", "task": "halogen/code", "stage": "verify",
                                   "calls": 3, "cached_calls": 0, "failed_calls": 0, "input_tokens": 30,
                                   "output_tokens": 3, "usd": None, "note": "no price table (costs.price_table)"}],
                                 schema=records.COSTS)
    Location.from_url(run.url).child("costs.parquet").write_bytes_atomic(table_to_bytes(costs))
    written = cost_record(costs).as_json()
    (tmp_path / "runs" / "mine" / "metrics.json").write_text(json.dumps([halogen(), written]))
    assert main(["report", run.url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [halogen(), written]


QUARANTINED = [{"source": "/data/my-model.jsonl", "row": 3, "model": "my-model", "task": "halogen/code",
                "reason": "invalid JSON: Expecting value: line 1 column 12 (char 11)"}]
UNMATCHED = {"source": "/data/my-model.jsonl", "row": 7, "model": "my-model", "task": "halogen/code",
             "reason": "matches no item of the task"}


def test_input_notes_name_the_quarantine_and_its_folder():
    quarantine = pa.Table.from_pylist(QUARANTINED, schema=records.QUARANTINE)
    notes = input_notes({"my-model/halogen/code": 1, "gpt/halogen/code": 2}, {"my-model": "/data/my-model.jsonl"},
                        quarantine, "/runs/mine/quarantine")
    assert "not in your file" not in "\n".join(notes)  # the row is in the file: it could not be read
    assert ("my-model/halogen/code: 1 item(s) with no usable response in your file /data/my-model.jsonl; "
            "1 row(s) of it could not be read") in notes
    assert "gpt/halogen/code: 2 item(s) with no released response" in notes
    assert "quarantine: 1 input row(s) set aside, each with its file, row and reason, in /runs/mine/quarantine/ " \
           "(Parquet)" in notes
    assert "  /data/my-model.jsonl row 3 (my-model, halogen/code): invalid JSON: Expecting value: line 1 column 12 " \
           "(char 11)" in notes


def test_input_notes_without_unreadable_rows():
    # a row that matches no item: the items are not in the file, and the row is named in the quarantine
    unmatched = pa.Table.from_pylist([UNMATCHED], schema=records.QUARANTINE)
    notes = input_notes({"my-model/halogen/code": 2}, {"my-model": "/data/my-model.jsonl"}, unmatched, "/q")
    assert notes[0] == "my-model/halogen/code: 2 item(s) not in your file /data/my-model.jsonl; 1 row(s) of it " \
                       "match no item"
    assert notes[1].startswith("quarantine: 1 input row(s) set aside")
    # no quarantine: as before
    clean = input_notes({"my-model/halogen/code": 1}, {"my-model": "/data/my-model.jsonl"},
                        records.QUARANTINE.empty_table(), "/runs/mine/quarantine")
    assert clean[0] == "my-model/halogen/code: 1 item(s) not in your file /data/my-model.jsonl"
    assert not any("quarantine:" in n for n in clean)


def test_run_summary_on_screen_gives_the_quarantine_counts_and_folder(tmp_path, capsys, monkeypatch):
    """`halluscope run` after a run whose file had an unreadable row: the row's item is not
    reported as missing from the file, and the quarantine folder is named with its count."""
    from halluscope.pipeline import runner

    (tmp_path / "gens.jsonl").write_text('{"prompt": "p", "response": "import os"}\n')
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({
        "storage": {"root": f"file://{tmp_path}/runs"}, "tasks": ["halogen/code"], "costs": {"price_table": None},
        "models": [{"id": "my-model", "backend": "replay", "params": {"source": "file", "path": "gens.jsonl"}}]}))

    def fake_run(resolved, run_id=None, progress=True, retry_failed=True, agreement=()):
        store = RunStore(resolved.root, run_id)
        store.write_part("quarantine", "k", pa.Table.from_pylist(QUARANTINED, schema=records.QUARANTINE))
        return runner.RunResult(run_id, store.loc.url, [], "# board", 2, 0, 1.0, 0.5, {"my-model/halogen/code": 1})

    monkeypatch.setattr(runner, "run", fake_run)
    assert main(["run", str(cfg), "--run-id", "mine"]) == 0
    out = capsys.readouterr().out
    assert "not in your file" not in out
    assert f"quarantine: 1 input row(s) set aside, each with its file, row and reason, in {tmp_path}/runs/mine/" \
           "quarantine/" in out


def test_status_shows_each_models_rows_its_deployment_and_the_spend():
    from halluscope.report.status import status_doc, status_text

    progress = {"updated_at": "2026-11-27T10:00:00+00:00", "elapsed_s": 1800.0,
                "spend": {"earlier_attempts_usd": 2.0, "calls_usd": 0.5, "deployments_usd": 1.0, "total_usd": 3.5,
                          "budget_usd": 10.0},
                "planned": {"usd": 4.0, "wall_s": 7200.0},
                "log": "s3://b/runs/r1/logs/driver-a1.log", "models": {"big": {"done": 8, "failed": 1, "total": 40}, "api": {"done": 40, "total": 40}},
                "deployments": [{"model": "big", "status": "generating", "wave": 1, "staged_rows": 24,
                                 "reason": None}]}
    doc = status_doc("r1", {"status": "running"}, progress)
    assert doc["models"]["big"] == {"evaluated": 8, "failed": 1, "total": 40, "deployment": {
        "status": "generating", "wave": 1, "staged_rows": 24, "reason": None}}
    assert doc["models"]["api"] == {"evaluated": 40, "failed": 0, "total": 40}  # a progress.json of before
    text = status_text(doc)
    assert text.splitlines()[0] == "run r1: running"
    assert ("spent so far: $3.50 of costs.budget_usd $10.00: this attempt's calls $0.50 (as of its last commit) "
            "and deployments $1.00, earlier attempts $2.00") in text
    assert "planned for this attempt: $4.00; $2.50 of it left; 2.00 h, 1.50 h of it left" in text
    assert "wave 1: generating, 24 generated" in text
    assert "this attempt's log: s3://b/runs/r1/logs/driver-a1.log" in text
    assert status_doc("r2", None, None)["status"] == "not started"
