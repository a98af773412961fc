"""Model ids with HTML, table pipes or terminal escape codes (from stored runs or replay files, which
config validation never saw) are escaped in leaderboard.md and on the terminal."""

import io
import json
import re

import pyarrow as pa

from halluscope import records
from halluscope.cli import main
from halluscope.contract.metrics import MetricRecord
from halluscope.halogen.metrics import task_metrics
from halluscope.pipeline.aggregate import merged
from halluscope.pipeline.progress import Progress
from halluscope.report.escape import markdown, terminal
from halluscope.report.leaderboard import leaderboard
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

HOSTILE = ["<img src=x onerror=alert(1)>", "a|b|c", "\x1b[31mred\x1b[0m", "line\nbreak", "`code` [l](javascript:x)"]
ESC = "\x1b"


def _score(model: str, task: str, kind: str, i: int) -> dict:
    return {"gen_id": f"{model}{task}{i}", "model": model, "task": task, "item_id": str(i), "prompt": "p",
            "task_kind": kind, "error": None, "responded": True, "abstention_rule": "r", "n_atoms": 2,
            "n_unsupported": 1, "n_unverified": 0, "f": 0.5, "g": 0.5 if kind == "response" else 0.0,
            "atoms": [], "unsupported_atoms": []}


def _metrics() -> list[MetricRecord]:
    rows = [_score(m, t, k, i) for m in HOSTILE + ["plain_model"] for t, k in
            (("halogen/code", "response"), ("halogen/false_presuppositions", "refusal")) for i in range(2)]
    per_task = task_metrics(pa.Table.from_pylist(rows, schema=records.SCORES))
    return merged("halogen", [MetricRecord.from_json(r) for r in per_task])


def _cells(line: str) -> list[str]:
    """A Markdown table row split at its unescaped pipes."""
    return re.split(r"(?<!\\)\|", line.strip())[1:-1]


def test_leaderboard_escapes_every_model_id():
    board = leaderboard(_metrics(), "run-1")
    assert "<img" not in board and "<" not in board.replace("&lt;", "")
    assert ESC not in board
    assert "[l](" not in board and r"\`code\` \[l\](javascript:x)" in board  # no code span, no link
    for table in board.split("\n\n"):
        rows = [line for line in table.splitlines() if line.startswith("|")]
        if rows:  # every row of a table has as many cells as its header
            assert {len(_cells(r)) for r in rows} == {len(_cells(rows[0]))}, table
    # the escaped id still reads as itself, and ordinary ids are untouched
    assert "&lt;img src=x onerror=alert(1)>" in board and r"a\|b\|c" in board  # a ">" opens no tag
    assert r"\\x1b\[31mred" in board and "| plain_model |" in board


def test_markdown_and_terminal_escapes():
    assert markdown("gpt_3.5_turbo-0125") == "gpt_3.5_turbo-0125"
    assert markdown("a|b<c>&") == r"a\|b&lt;c&gt;&amp;"
    assert terminal("ok\n\x1b[2Jgone\x07\u202e") == "ok\n\\x1b[2Jgone\\x07\\u202e"


def test_progress_lines_show_escape_codes_instead_of_obeying_them(tmp_path):
    out = io.StringIO()
    out.isatty = lambda: True  # type: ignore[method-assign]
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "r")
    progress = Progress(store, {(m, "halogen/code"): 2 for m in HOSTILE}, {}, show=True, out=out)
    progress.flush(final=True)
    drawn = out.getvalue()
    # rich's own codes (colours, cursor moves) stay; none of the ids' codes reach the terminal,
    # and an id's brackets are text, not rich markup
    assert ESC + "[31mred" not in drawn
    assert "\\x1b[31mred\\x1b[0m" in drawn and "`code` [l](javascript:x)" in drawn
    assert drawn.endswith(ESC + "[?25h")  # the final flush ends the live view: the cursor shows again


def test_report_of_a_stored_run_escapes_its_ids(tmp_path, capsys):
    run = tmp_path / "r"
    run.mkdir()
    (run / "leaderboard.md").write_text("| \x1b]0;pwned\x07\x1b[31mevil | 1 |\n")
    (run / "metrics.json").write_text(json.dumps([]))
    assert main(["report", str(run)]) == 0
    printed = capsys.readouterr().out
    assert ESC not in printed and "\x07" not in printed and "\\x1b[31mevil" in printed
