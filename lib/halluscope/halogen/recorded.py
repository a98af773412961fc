"""HALOGEN's recorded pipeline: per released model, the response behind the released numbers
and the output of every LLM step the authors ran on it (``halogen/recorded/``).

A recorded role model (``backend: recorded``, ``steps: halluscope.halogen.recorded:replies``)
answers a role call from these files: each call names its step and the content it asks about
(``steps.step_keys``), and :func:`replies` maps the same keys to what the authors' model answered.
The program tasks' verdicts are never read from here: their label columns are not shipped.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa

from halluscope.halogen import paper
from halluscope.halogen.common import HalogenTask
from halluscope.halogen.steps import (
    FACT_VERDICT,
    FACTS,
    MEETING,
    PARSE,
    TITLE_FOUND,
    TITLES,
    read_rows,
    recorded_path,
    step_keys,
)
from halluscope.halogen.tasks import TASKS
from halluscope.knowledge.index_cache import cached_table
from halluscope.sources import DataResolver


def _core(unit: str) -> str:
    """A recorded unit without the judge's flag ("fact | True", "fact\tFalse") and extra spaces."""
    return " ".join(re.sub(r"[\s|]*(?:True|False)[\s|]*$", "", unit.strip()).split())


def _fact_verdicts(units: list[str], hallucinated: list[str]) -> list[bool]:
    """Supported per unit: a unit is unsupported when it is one of the hallucinated units (each
    used once), which is what the authors' scorer counted. The flags the judge left beside
    some units disagree with that list in places and are not read. On every recorded row each
    hallucinated unit is found among the units (41,254 rows)."""
    left = [_core(h) for h in hallucinated]
    out = []
    for u in units:
        core = _core(u)
        if core in left:
            left.remove(core)
            out.append(False)
        else:
            out.append(True)
    return out


# Files the authors processed differently from the rest (found by reproducing their numbers):
# Llama-2-70B's false-presupposition parses were split at every "," with items stripped and kept
# in case, and their hallucinated items counted with repeats (a list, not a set).
QUIRKS = {("numerical_falsepresupposition", "llama_2_70b_chat"): {"list_split": "comma-stripped-repeats"}}


def _put(out: dict, domain: str, joins: list[str], response: str, step: str, replies: list[str],
         units: list[str]) -> None:
    """Files each unit's recorded answer under its content keys; the first record under a key wins."""
    for reply, keys in zip(replies, step_keys(domain, step, joins, response, units)):
        for k in keys:
            out.setdefault(k, reply)


def _domain_replies(task: HalogenTask, rows: tuple[dict[str, str], ...]) -> dict[str, str]:
    """A task's recorded answers under the keys its role calls carry (see
    ``HalogenTask.recorded_call``): each row under each of its replay keys, with occurrences
    counted as the replay join counts them."""
    domain = task.response_dir
    out: dict[str, str] = {}
    seen: Counter[str] = Counter()
    for row in rows:
        response = row.get("response") or ""
        record: dict[str, Any] = dict(row)  # the row, and its occurrence (an int) below
        group = task.replay_group(record)
        record["occurrence"] = seen[group]
        seen[group] += 1
        joins = task.replay_keys(record)

        put = partial(_put, out, domain, joins, response)
        if domain in ("rationalization_binary", "rationalization_numerical", "numerical_falsepresupposition"):
            if row.get("parsed_response") is not None:  # an empty parse is an answer too
                put(PARSE, [row["parsed_response"]], [""])
        elif domain in ("summarization", "simplification", "biographies"):
            units_col, hall_col = (("atoms", "hallucinated atoms") if domain == "biographies"
                                   else ("atomic_units", "hallucinated_atomic_units"))
            units = paper.recorded_units(row.get(units_col, ""))
            put(FACTS, [row.get(units_col, "")], [""])
            verdicts = _fact_verdicts(units, paper.recorded_units(row.get(hall_col, "")))
            put(FACT_VERDICT, ["Yes" if ok else "No" for ok in verdicts], units)
        elif domain == "references":
            titles = [str(t) for t in paper.literal_list(row.get("atomic_units", ""))]
            hallucinated = {str(t) for t in paper.literal_list(row.get("hallucinated_atomic_units", ""))}
            put(TITLES, [repr(titles)], [""])
            put(TITLE_FOUND, ["No" if t in hallucinated else "Yes" for t in titles], titles)
        elif domain == "historical_events":
            if row.get("verified_response") is not None:
                put(MEETING, [row["verified_response"]], [""])
    return out


def _table(replies: dict[str, str]) -> pa.Table:
    """The answers as columns; an answer is kept as UTF-8 bytes, as it may hold the surrogates a
    byte that was not UTF-8 was read as."""
    return pa.table({"key": pa.array(list(replies), pa.string()),
                     "reply": pa.array([r.encode("utf-8", "surrogatepass") for r in replies.values()], pa.binary())})


class RecordedReplies:
    """One released model's recorded answers by content key, each domain's answers loaded on the
    first call that asks for it. They are derived from the file once per content and kept under
    the data cache (``index_cache.cached_table``): a later run or worker loads two columns instead
    of parsing the file and hashing every unit of it."""

    def __init__(self, resolver: DataResolver, subject: str) -> None:
        self.resolver = resolver
        self.subject = subject
        self._domains: dict[str, dict[str, str | tuple]] = {}

    def _load(self, domain: str) -> dict[str, str | tuple]:
        rel = recorded_path(domain, self.subject)
        task = next((t for t in TASKS if t.response_dir == domain and t.rules == "paper"), None)
        if rel is None or task is None:
            return {}
        notes = QUIRKS.get((domain, self.subject), {})
        path = self.resolver.resolve(rel)
        table = cached_table(Path(self.resolver.cache_dir).expanduser() / "indexes", "recorded", path,
                             [domain, self.subject, notes], lambda: _table(_domain_replies(task, read_rows(path))))
        replies = [r.decode("utf-8", "surrogatepass") for r in table["reply"].to_pylist()]
        return dict(zip(table["key"].to_pylist(), [(r, notes) for r in replies] if notes else replies))

    def get(self, key: str) -> str | tuple[str, dict] | None:
        domain = key.partition(":")[0]
        answers = self._domains.get(domain)
        if answers is None:
            answers = self._domains[domain] = self._load(domain)
        return answers.get(key)


def replies(resolver: DataResolver, subject: str) -> RecordedReplies:
    """The recorded answers of one released model (none for a model the authors did not release)."""
    return RecordedReplies(resolver, subject)
