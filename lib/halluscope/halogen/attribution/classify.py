"""Type A / B / C flags for hallucinated units, following HALOGEN §5.1 (spec §4.2).

Flags are multi-label booleans, not an exclusive class: the paper lets A and B hold together.
Every query is a list of phrases that must all occur in one document (see corpus.py for what a
phrase match is); each row's evidence records the queries, their document counts and a sample of
matching document ids, so any flag can be checked by hand.

* Code: a hallucinated package name found in the corpus is Type B (the paper's coverage). A name
  found nowhere is flagged Type C (nothing in the data to recall or misread); Type A has no
  operational test for code and stays False.
* Historical events, per hallucinated response about (name1, name2):
  - B: the two names co-occur in a document: query ``[name1, name2]``;
  - per entity: some document holds its name, birth year and death year: query
    ``[name, birth, death]`` (years as phrases, e.g. "1844");
  - A: that holds for both entities; C: it fails for either. So, as the paper's criteria are
    worded, C is exactly "not A"; B is independent of both.
  Names lose a trailing Wikipedia disambiguator before the query ("George Robertson (writer)" is
  searched as "George Robertson"), since running text does not carry it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from halluscope.halogen.attribution.corpus import CorpusIndex

CODE_TASK = "halogen/code"
HISTORICAL_TASK = "halogen/historical_events"
SAMPLE_DOCS = 3  # matching document ids kept as evidence per query
_DISAMBIGUATOR = re.compile(r"\s*\([^()]*\)\s*$")


@dataclass(frozen=True)
class Unit:
    """One hallucinated unit of a generation: a package name, or a response's pair of people."""

    model: str
    task: str
    gen_id: str
    atom: str
    fields: dict | None = None  # the item's fields (historical events: names and years)


class Lookups:
    """Corpus queries made once per distinct phrase list: models share package names and people."""

    def __init__(self, corpus: CorpusIndex) -> None:
        self.corpus = corpus
        self._cache: dict[tuple[str, ...], dict] = {}

    def __call__(self, phrases: list[str]) -> dict:
        key = tuple(phrases)
        if key not in self._cache:
            found = self.corpus.hits(phrases, SAMPLE_DOCS)
            self._cache[key] = {"query": phrases, "docs": found.count, "sample_docs": found.sample}
        return self._cache[key]


def _row(unit: Unit, a: bool, b: bool, c: bool, evidence: dict) -> dict:
    return {"model": unit.model, "task": unit.task, "gen_id": unit.gen_id, "atom": unit.atom,
            "type_a": a, "type_b": b, "type_c": c, "evidence": json.dumps(evidence, sort_keys=True)}


def classify_code(units: Iterable[Unit], lookups: Lookups) -> list[dict]:
    """One row per hallucinated package occurrence; the query is the package name as imported."""
    rows = []
    for u in units:
        ev = lookups([u.atom])
        rows.append(_row(u, False, ev["docs"] > 0, ev["docs"] == 0, ev))
    return rows


def entity_name(name: str) -> str:
    """The name as running text writes it: without a trailing "(writer)"-style disambiguator."""
    return _DISAMBIGUATOR.sub("", name).strip() or name.strip()


def pair_atom(fields: dict) -> str:
    return f"{fields['name1']} | {fields['name2']}"


def classify_historical(units: Iterable[Unit], lookups: Lookups) -> list[dict]:
    """One row per hallucinated response; ``unit.fields`` holds name1/birth1/death1/name2/...."""
    rows = []
    for u in units:
        f = u.fields or {}
        n1, n2 = entity_name(f["name1"]), entity_name(f["name2"])
        pair = lookups([n1, n2])
        e1 = lookups([n1, str(f["birth1"]).strip(), str(f["death1"]).strip()])
        e2 = lookups([n2, str(f["birth2"]).strip(), str(f["death2"]).strip()])
        both = e1["docs"] > 0 and e2["docs"] > 0
        rows.append(_row(u, both, pair["docs"] > 0, not both, {"pair": pair, "entity1": e1, "entity2": e2}))
    return rows


def coverage(rows: list[dict], scope: Iterable[tuple[str, str]]) -> list[dict]:
    """Per (model, task) in ``scope``: hallucinated units (rows), unique units (distinct atoms),
    flag counts over unique units, and coverage = unique units flagged B / unique units (for code
    the paper's Table 4 coverage: unique hallucinated packages found in the corpus)."""
    out = []
    for model, task in sorted(set(scope)):
        mine = [r for r in rows if r["model"] == model and r["task"] == task]
        unique = {r["atom"]: r for r in mine}  # flags depend only on the atom
        counts = {k: sum(r[k] for r in unique.values()) for k in ("type_a", "type_b", "type_c")}
        out.append({"model": model, "task": task, "hallucinated_units": len(mine), "unique_units": len(unique),
                    **counts, "found": counts["type_b"],
                    "coverage": counts["type_b"] / len(unique) if unique else None})
    return out
