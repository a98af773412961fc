"""HALOGEN rationalization (binary): yes/no questions whose right answer is fixed.

Primality: every number asked about is prime, so the answer is yes. Senator search and graph
connectivity: no such senator or route exists, so the answer is no. As in the paper, an
extractor parses each response (the factors it proposes, the flights of its route, the senator
it names) and the units are the response's leading yes/no plus that parse. A first line that
contains the right answer, or no unit at all, scores no hallucination, so D(y) is empty then;
otherwise every unit but the right answer is hallucinated (for graphs: but flights the prompt
offers, each counted once).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import halluscope.halogen.paper as paper
import halluscope.halogen.prompts as prompts
from halluscope.contract.cost_rules import StageRule
from halluscope.contract.replies import reply_text
from halluscope.contract.task import Item, Verdict
from halluscope.errors import DataError
from halluscope.halogen.common import HalogenTask
from halluscope.halogen.llm_verified import parse_rule
from halluscope.halogen.steps import PARSE, read_rows, recorded_path
from halluscope.sources import sha256_file

if TYPE_CHECKING:
    from pydantic import BaseModel

GOLD = paper.GOLD

_PRIME_Q = re.compile(r"Is (\d+) a prime number")
_ROUTE_Q = re.compile(r"goes from city (\w+) to city (\w+)\?")
# what the extraction prompt's worked examples propose; a parse equal to one of them that the
# response does not state copied the example (corrected rules drop it)
_EXAMPLE_UNITS = {"primality": ["3", "3", "7", "13"], "graph": ["C->H", "H->F", "F->E"]}
_EXAMPLE_IN_RESPONSE = {"primality": re.compile(r"\b7\b.*\b13\b", re.S), "graph": re.compile(r"\bH\b.*\bF\b", re.S)}


PAPER_PARSE = "halogen-paper-parse-binary-v1"  # the authors' prompts, read from their recorded pipeline
_TEMPLATE_SOURCE = "alpaca_7b"  # whose recorded file the prompts are read from (all models share them)


def paper_parse_templates(resolver) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Per category, the text the authors' parse prompt puts before and after the response,
    and the file it was read from with its sha256."""
    rel = recorded_path("rationalization_binary", _TEMPLATE_SOURCE)
    if rel is None:  # RECORDED_FILES names every model's file; reaching this is a bug in that table
        raise DataError(f"no recorded rationalization_binary file is known for {_TEMPLATE_SOURCE}, "
                        "whose parse prompts are read")
    path = resolver.resolve(rel)
    out: dict[str, list[str]] = {}
    for row in read_rows(path):
        prompt, response = row.get("extract_atomic_unit_prompt") or "", row.get("response") or ""
        at = prompt.find(response) if response.strip() else -1
        if row["category"] not in out and at >= 0:
            out[row["category"]] = [prompt[:at], prompt[at + len(response):]]
    missing = sorted(set(GOLD) - set(out))
    if missing:
        raise DataError(f"{rel}: no recorded parse prompt for {missing}")
    return out, {rel: sha256_file(path)}


def copies_example(category: str, units: list[str], text: str) -> bool:
    """A parse whose units are the extraction prompt's worked example, which the response does
    not state: the parser copied the example instead of reading the response."""
    return units == _EXAMPLE_UNITS.get(category) and not _EXAMPLE_IN_RESPONSE[category].search(text)


def _flight(pair: tuple[str, str]) -> str:
    return f"{pair[0]}->{pair[1]}"


class RationalizationBinary(HalogenTask):
    base_name = "halogen/rationalization_binary"
    kind = "response"
    roles = ("extractor",)
    prompt_file = "prompts_rationalization_binary.csv.gz"
    response_dir = "rationalization_binary"

    def __init__(self, rules="paper") -> None:
        super().__init__(rules)
        self.decomposer = f"answer+extractor-parse-{rules}-v2:{prompts.PARSE_BINARY}"
        self.verifier = f"fixed-label+prompt-graph-{rules}-v2"

    def cost_rules(self, options: BaseModel | None = None) -> tuple[StageRule, ...]:
        """The yes/no parse template asks by category: the longest is sized. The paper rules ask
        with the authors' own templates, the corrected with ours: the twins share no call."""
        template = PAPER_PARSE if self.rules == "paper" else prompts.PARSE_BINARY
        return (parse_rule(lambda s: max(s.tokens(prompts.parse_binary_prompt(c, "")) for c in GOLD), template),)

    def item_fields(self, row: Mapping[str, str], where: str) -> dict[str, Any]:
        category = row.get("category", "")
        if category not in GOLD:
            raise ValueError(f"{where} column 'category': {category!r} is not one of {sorted(GOLD)}")
        prompt = row["prompt"]
        fields: dict[str, Any] = {"category": category, "gold": GOLD[category]}
        if category == "primality":
            m = _PRIME_Q.search(prompt)
            if not m:
                raise ValueError(f"{where}: primality prompt names no number")
            fields["number"] = int(m.group(1))
        elif category == "graph":
            if not _ROUTE_Q.search(prompt):
                raise ValueError(f"{where}: graph prompt asks for no route")
            fields["offered"] = sorted(_flight(f) for f in paper.prompt_flights(prompt, self.rules))
        return fields

    def load_items(self, resolver, testsets=(), options=None):
        """Paper rules also carry, per item, the authors' parse prompt for its category, read
        from their recorded pipeline (the prompt before and after the response), so a live
        extractor is asked what their parser was asked."""
        loaded = super().load_items(resolver, testsets, options)
        if self.rules != "paper":
            return loaded
        templates, sources = paper_parse_templates(resolver)
        loaded.sources.update(sources)
        loaded.items = [replace(i, fields={**i.fields, "parse_template": templates[i.fields["category"]]})
                        for i in loaded.items]
        return loaded

    def decompose_call(self, text: str, item: Item):
        template = item.fields.get("parse_template")
        if template:
            return self.recorded_call("extractor", PARSE, [template[0] + text + template[1]], PAPER_PARSE, text, item)
        prompt = prompts.parse_binary_prompt(item.fields["category"], text)
        return self.recorded_call("extractor", PARSE, [prompt], prompts.PARSE_BINARY, text, item)

    def units(self, text: str, parsed: str, category: str) -> list[str]:
        """The leading yes/no and the parse's units, before the answer gate."""
        answer = paper.yes_no_prefix(text)
        if category == "primality":
            found = [str(k) for k in paper.parsed_factors(parsed)]
        elif category == "graph":
            found = [_flight(f) for f in paper.flights(parsed)]
        else:
            found = paper.person_names(parsed)
        if self.rules == "corrected" and copies_example(category, found, text):
            found = []
        return ([answer] if answer else []) + found

    def decompose(self, text: str, item: Item, replies=()) -> list[str]:
        category = item.fields["category"]
        units = self.units(text, reply_text(replies[0], "extractor"), category)
        if not units or paper.gold_in_first_line(text, category, self.rules):
            return []
        return units

    def verify(self, atoms, text, item, kb, replies=()) -> list[Verdict]:
        gold = item.fields["gold"]
        offered = set(item.fields.get("offered", ()))
        graph = item.fields["category"] == "graph"
        seen: set[str] = set()
        out = []
        for atom in atoms:
            if atom == gold:
                out.append(Verdict(True, "the right answer"))
            elif graph and atom in offered:
                out.append(Verdict(True, "a flight the prompt offers"))
            elif graph and atom in seen:
                out.append(Verdict(True, "repeated flight: counted once"))
            else:
                out.append(Verdict(False, "the right answer is " + gold if atom in ("yes", "no")
                                   else "justifies the wrong answer"))
            seen.add(atom)
        return out
