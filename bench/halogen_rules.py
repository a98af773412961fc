"""Counts, over the 14 released models' recorded pipeline, the responses each correction of
HALOGEN's rules touches (docs/architecture.md quotes them). A response is counted for a
correction when the correction's condition holds for it and the paper rule decides otherwise.

    .venv/bin/python bench/halogen_rules.py [--json]
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter

from halluscope.contract.replies import parse_yes_no
from halluscope.halogen import paper
from halluscope.halogen.code import extract_imports
from halluscope.halogen.published import _RESULT_FILES
from halluscope.halogen.rationalization_binary import copies_example
from halluscope.halogen.recorded import QUIRKS
from halluscope.halogen.steps import RECORDED_FILES, read_rows, recorded_path
from halluscope.halogen.tasks import TASKS
from halluscope.sources import DataResolver

# recorded folder -> the paper-rule task that reads it
DOMAIN_OF = {t.response_dir: t.name for t in TASKS if t.rules == "paper"}


def _responded(text: str, rules: str) -> bool:
    return not paper.abstained(text, rules)


def _name_words(prompt: str) -> list[str]:
    """The words (3 letters or more) of the person a biography prompt asks about."""
    return [w.lower() for w in re.findall(r"\w+", prompt.removeprefix("Tell me a bio of ")) if len(w) > 2]


def foreign_facts(rows: list[dict], window: int = 10) -> int:
    """Rows of a recorded biographies file whose atomic facts name none of the words of their own
    prompt's person but a person a nearby row asks about (two of their name's words, or the only
    one): facts recorded against the wrong response, which the corrected rules, extracting facts
    from each response itself, do not read."""
    names = [_name_words(r.get("prompt") or "") for r in rows]
    count = 0
    for i, row in enumerate(rows):
        facts = (row.get("atoms") or "").lower()
        if not facts or any(w in facts for w in names[i]):
            continue
        near = range(max(0, i - window), min(len(rows), i + window + 1))
        count += any(j != i and names[j] and sum(w in facts for w in names[j]) >= min(2, len(names[j]))
                     for j in near)
    return count


def audit(resolver: DataResolver) -> dict[str, Counter]:
    counts: dict[str, Counter] = {task: Counter() for task in _RESULT_FILES}
    for domain, models in RECORDED_FILES.items():
        task = DOMAIN_OF[domain]
        for model in models:
            rows = list(read_rows(resolver.resolve(recorded_path(domain, model))))
            if domain == "biographies" and (shifted := foreign_facts(rows)):
                counts[task][f"{model}'s recorded facts of another prompt's person (rows shifted in its file)"] += \
                    shifted
            for row in rows:
                text = row.get("response") or ""
                c = counts[task]
                c["responses"] += 1
                if _responded(text, "paper") != _responded(text, "corrected"):
                    c["abstention phrases split ('I am sorry', 'Sorry')"] += 1
                if not _responded(text, "paper"):
                    continue
                parsed = row.get("parsed_response") or ""
                if domain == "code":
                    names = set(paper.paper_imports(text))
                    if names != set(extract_imports(text)):
                        c["every import statement form read"] += 1
                    if any(paper.stdlib_without_page(n) for n in names):
                        c["standard-library modules without a page of their own accepted"] += 1
                elif domain == "rationalization_binary":
                    category = row["category"]
                    if paper.gold_in_first_line(text, category, "paper") != \
                            paper.gold_in_first_line(text, category, "corrected"):
                        c["'/' separates words in the answer gate"] += 1
                    if paper.gold_in_first_line(text, category, "paper"):
                        continue
                    if category == "graph":
                        asked = set(paper.prompt_flights(row["prompt"], "paper")) - \
                            set(paper.prompt_flights(row["prompt"], "corrected"))
                        if asked & set(paper.flights(parsed)):
                            c["the question's own route is not an offered flight"] += 1
                    units = [str(k) for k in paper.parsed_factors(parsed)] if category == "primality" \
                        else [f"{a}->{b}" for a, b in paper.flights(parsed)] if category == "graph" else []
                    if copies_example(category, units, text):
                        c["a parse copying the prompt's example is dropped"] += 1
                elif domain in ("rationalization_numerical", "numerical_falsepresupposition"):
                    if domain == "numerical_falsepresupposition" and "no response" in text.lower():
                        continue
                    if paper.copies_few_shot(parsed):
                        c["a parse copying the prompt's example is dropped"] += 1
                    gold = {g.lower() for g in paper.literal_list(row.get("list_condition", ""))}
                    units = paper.list_items(parsed) if domain != "rationalization_numerical" \
                        else paper.count_and_entities(parsed)[1]
                    forms = {u.lower().strip() for u in units}
                    fixed = {u.rstrip(".").strip().removeprefix("the ").strip() for u in forms}
                    if (fixed & gold) - (forms & gold):
                        c["name forms ('The Bahamas.') matched to the list"] += 1
                    if (domain, model) in QUIRKS:
                        c[f"{model}'s file split like every other file"] += 1
                elif domain == "historical_events":
                    answer = row.get("verified_response") or ""
                    if parse_yes_no(answer) is None:
                        c["judge answer without a leading yes/no: unreadable (row fails)"] += 1
                    elif ("no" not in answer.lower()) != parse_yes_no(answer):
                        c["judge answer read by its leading yes/no, not a 'no' anywhere"] += 1
    return counts


def main() -> None:
    counts = audit(DataResolver())
    if "--json" in sys.argv:
        print(json.dumps({t: dict(c) for t, c in counts.items()}))
        return
    for task, c in counts.items():
        print(task, f"({c.pop('responses')} responses)")
        for what, n in c.most_common():
            print(f"  {n:6d}  {what}")


if __name__ == "__main__":
    main()
