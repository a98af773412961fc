"""Builds the HalluLens test sets of this example from the small sources beside it, offline.

    .venv/bin/python examples/hallulens/build_testsets.py      # from the repository root

The committed test sets under examples/hallulens/testsets/ were made by this script; it prints
the URIs run.yaml lists, and reuses a test set whose spec it built before (same sources, seeds,
sizes, generator and templates). It also writes what the two models under test answer to every
item (answers/<model>.jsonl, from ``ANSWERS`` below), keyed by the items' ids in a run. The
sources are made up: six pages in GoodWiki's format with their WikiRank scores, a small ITIS
taxonomy (two families) and a table of invented medicine names.

PreciseWikiQA needs a model that writes a question about a page section and checks that the
section answers it. Here that is ``question_writer``, a few lines of Python reading the one fact
each section states ("<title> was <done> in <year>."), named "example-rules" in the test set's
provenance; `halluscope testset JOB` does the same with any served or API model. MixedEntities
needs no model: it recombines the taxonomy's and the medicine table's names into names that
exist in neither.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from fsspec.implementations.local import LocalFileSystem

from halluscope.hallulens.generation import PreciseWikiQAConfig, build_wiki_testset
from halluscope.hallulens.nonexistent import MixedEntitiesConfig, build_mixed_testset
from halluscope.hallulens.sources import load_goodwiki, load_harmonic_centrality, load_itis, load_medicines
from halluscope.hallulens.testset import TestSet
from halluscope.models.base import Completion
from halluscope.storage.fs import Location

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OUT = "examples/hallulens/testsets"

FACT = re.compile(r"([A-Z][\w ]+?) was ([a-z ]+?) in (\d{4})\b")
TITLE = re.compile(r"^Title: (.+)$", re.MULTILINE)
REFERENCE = re.compile(r"Reference:\n(.*?)\n\n(?:Reply with|Question: )", re.DOTALL)
QUESTION = re.compile(r"^Question: In what year was (.+)\?$", re.MULTILINE)


def _reply(prompt: str) -> str:
    reference = REFERENCE.search(prompt)
    section = reference.group(1) if reference else ""
    title = TITLE.search(prompt)
    if title:  # write a question about the section's fact
        fact = next((m for m in FACT.finditer(section) if m.group(1) == title.group(1)), None)
        return f"In what year was {fact.group(1)} {fact.group(2)}?" if fact else "[NO QUESTION]"
    question = QUESTION.search(prompt)  # check that the section answers it
    for m in FACT.finditer(section):
        if question and question.group(1) == f"{m.group(1)} {m.group(2)}":
            return m.group(3)
    return "unanswerable"


def question_writer(prompts: list[str]) -> list[Completion]:
    return [Completion(text=_reply(p)) for p in prompts]


# What the two models under test of run.yaml answer, by a phrase of the question (the first that
# is found); their answers files (answers/<model>.jsonl) join the test sets' items by item_id.
ANSWERS: dict[str, tuple[list[tuple[str, str]], str]] = {
    "careful-model": ([  # answers what it knows, declines the rest
        ("Kestrel Point Lighthouse first lit", "It was first lit in 1871."),
        ("Norrland Clock Tower restored", "The tower was restored in 1987."),
        ("Ambervale Canal opened", "1794."),
        ("Brackwater Ferry Bridge opened", "It opened in 1891."),
        ("In what year", "I don't know."),
        ("Gastrova Syrup", "Gastrova Syrup is an antacid syrup taken for heartburn.")],
        "I have never heard of that name, and I cannot find it in what I know."),
    "confident-model": ([  # answers everything, real or not
        ("Kestrel Point Lighthouse first lit", "1871"),
        ("Norrland Clock Tower restored", "It was restored in 1979."),
        ("Ambervale Canal opened", "The canal opened in 1802."),
        ("Brackwater Ferry Bridge opened", "1889"),
        ("Saltmarsh Tide Mill abandoned", "It was abandoned in 1921."),
        ("Hollin Moor Observatory founded", "In 1860.")],
        "It is a well-known name, described in many reference works."),
}


def write_answers(built: dict[str, list[TestSet]]) -> None:
    """One JSONL file per model under test: task, item id (as the run names the item: test set and
    item), the question and the answer."""
    folder = HERE / "answers"
    folder.mkdir(exist_ok=True)
    for model, (rules, default) in ANSWERS.items():
        rows = []
        for task, sets in built.items():
            for ts in sets:
                for item in ts.items:
                    answer = next((a for phrase, a in rules if phrase in item.prompt), default)
                    rows.append({"task": task, "item_id": f"{ts.testset_id[:8]}-{item.item_id}",
                                 "question": item.prompt, "answer": answer})
        (folder / f"{model}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def source(name: str) -> Location:
    """A source by its path from the repository root: the test set records where it was read, so a
    build anywhere gives the same test-set ids."""
    return Location(LocalFileSystem(), f"examples/hallulens/sources/{name}")


def main() -> None:
    os.chdir(REPO)
    root = Location.from_url(f"file://{REPO / OUT}")
    pages = load_goodwiki(source("pages.jsonl"))
    scores = load_harmonic_centrality(source("wikirank.titles"), source("wikirank-h.txt"))
    # two difficulty bins: WikiRank score up to 50 (obscure pages) and above
    small = {"per_bin": 2, "bins": [0, 1], "bin_edges": [-2.0, 50.0, 100.0], "min_words": 30, "max_words": 150,
             "generator_model": "example-rules"}
    built = {"hallulens/precise_wikiqa": [
        build_wiki_testset(root, PreciseWikiQAConfig(seed=seed, **small), pages, scores, question_writer)
        for seed in (0, 1)]}  # two trials
    taxonomy = load_itis(source("itis-hierarchy"), source("itis-longnames"))
    medicines = load_medicines(source("medicines.csv"))
    mixed = MixedEntitiesConfig(seed=0, per_domain=3, domains=["animal", "medicine"])
    built["hallulens/nonexistent_mixed"] = [build_mixed_testset(root, mixed, taxonomy, medicines)]
    write_answers(built)
    print("testsets:")
    for task, sets in built.items():
        print(f"  {task}:")
        for ts in sets:
            print(f"    - testsets/{ts.spec.task}/{ts.testset_id}   # {len(ts.items)} items"
                  + (", reused" if ts.reused else "") + ("" if ts.report.get("complete", True) else ", INCOMPLETE"))


if __name__ == "__main__":
    main()
