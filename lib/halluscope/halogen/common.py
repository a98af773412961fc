"""What HALOGEN's program-verified tasks share: released files, the abstention rule, CSV reading."""

from __future__ import annotations

import ast
import csv
import json
from collections import Counter
from collections.abc import Iterator, Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from halluscope.contract.roles import AnswerFormat, RoleCall
from halluscope.contract.task import Item, LoadedItems, Task
from halluscope.errors import DataError
from halluscope.halogen.paper import RuleSet, abstained, plain_str_list
from halluscope.halogen.prompts import VERDICT
from halluscope.halogen.steps import recorded_path, step_keys
from halluscope.knowledge.base import Knowledge
from halluscope.records import stable_id
from halluscope.sources import DataResolver, csv_rows, open_text, sha256_file

RELEASED = json.loads(resources.files(__package__).joinpath("released_files.json").read_text())

def parse_list_field(value: str, where: str) -> list[str]:
    """HALOGEN stores lists as Python literals: "['mercury', 'venus']"."""
    plain = plain_str_list(value)
    if plain is not None:
        return [x.strip().lower() for x in plain]
    try:
        parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        raise ValueError(f"{where}: not a list literal: {value[:60]!r}") from None
    if not isinstance(parsed, list):
        raise ValueError(f"{where}: expected a list, got {type(parsed).__name__}")
    return [str(x).strip().lower() for x in parsed]


def read_csv_rows(path: Path) -> Iterator[tuple[int, dict[str, str] | None, str]]:
    """(row index, row, problem): a row that cannot be used comes back as None with the reason."""
    try:
        with open_text(path) as f:
            yield from csv_rows(f, path)
    except (OSError, EOFError, csv.Error, UnicodeDecodeError) as err:
        raise DataError(f"cannot read {path}: {err}") from None


@lru_cache(maxsize=16384)
def normalize_prompt(prompt: str) -> str:
    """Cached: every role call of a row keys its item by prompt (and source), in each phase
    and for each model, so the same few thousand texts are normalised over and over."""
    return " ".join(prompt.split())


_MEMO_ITEMS = 16384  # items whose replay keys a task keeps (the largest HALOGEN task has 1,780)


@lru_cache(maxsize=4096)
def content_keys(domain: str, step: str, joins: tuple[str, ...], response: str,
                 units: tuple[str, ...]) -> tuple[str, ...]:
    """``steps.step_keys`` of one call, each unit's keys joined by spaces (a recorded role model
    tries them in order). Hashing the response and every unit is most of a role call's cost, and
    a task's paper and corrected twins ask the same step of the same response, unit by unit, one
    right after the other in the same process: the twin reads the keys from here."""
    return tuple(" ".join(k) for k in step_keys(domain, step, list(joins), response, list(units)))


class HalogenTask(Task[Knowledge]):
    """A HALOGEN task backed by its released prompt file and recorded responses.

    Each task comes in two rule sets (``paper.RULE_SETS``): ``paper``, named as the benchmark's
    task (``halogen/code``), reproduces the released numbers; ``corrected`` (``halogen/code@corrected``)
    fixes the authors' defects listed in ``paper``. Their ids are versioned apart."""

    base_name: str
    prompt_file: str  # under halogen/prompts/
    response_dir: str  # under halogen/responses/ and halogen/recorded/

    def __init__(self, rules: RuleSet = "paper") -> None:
        self.rules = rules
        self.name = self.base_name if rules == "paper" else f"{self.base_name}@corrected"
        self.abstention_rule = f"halogen-phrases-{rules}-v2"
        # (item id, prompt) -> (the item's fields, its replay keys): see ``_joins``
        self._joins_memo: dict[tuple[str, str], tuple[Mapping[str, Any], tuple[str, ...]]] = {}

    def responded(self, text: str, item: Item, replies=()) -> bool:
        return not abstained(text, self.rules)

    @property
    def verdict_format(self) -> AnswerFormat | None:
        """Yes or No for a live judge's verdict under the corrected rules, which read its leading
        yes/no; the paper rules keep the authors' free-text answer (no format)."""
        return VERDICT if self.rules == "corrected" else None

    def recorded_call(self, role: str, step: str, prompts: list[str], template: str, text: str, item: Item,
                      units: list[str] | None = None, answer_format: AnswerFormat | None = None) -> RoleCall:
        """A role call whose prompts carry content keys, so a recorded role model answers it from
        the authors' pipeline (a live one reads the prompt). A key names the step, the item (by
        each of its replay keys, as a recorded row is joined to it), the response and the unit."""
        keys = content_keys(self.response_dir, step, self._joins(item), text,
                            tuple(units) if units is not None else ("",))
        return RoleCall(role, tuple(prompts), template, keys,  # type: ignore[arg-type]
                        answer_format=answer_format)

    def _joins(self, item: Item) -> tuple[str, ...]:
        """The item's replay keys, worked out once per item rather than once per call: every
        phase of every model's row of an item asks for them. The rows of an item share one
        fields object (a batch parses each item's fields once); the memo holds it and answers
        only for that very object, so an item with other fields is never given its keys."""
        memo = self._joins_memo
        found = memo.get((item.item_id, item.prompt))
        if found is not None and found[0] is item.fields:
            return found[1]
        joins = tuple(self.replay_keys({**item.fields, "prompt": item.prompt}))
        if len(memo) >= _MEMO_ITEMS:
            memo.clear()
        memo[(item.item_id, item.prompt)] = (item.fields, joins)
        return joins

    def replay_file(self, model_name: str, which: Literal["released", "recorded"]) -> str | None:
        if which == "recorded":  # the authors' recorded pipeline file of a released model
            self.released_file(model_name)  # an unknown model is an error, named
            return recorded_path(self.response_dir, model_name)
        return self.released_file(model_name)

    def item_fields(self, row: Mapping[str, str], where: str) -> dict[str, Any]:
        """Task fields kept from a prompt-file row (raises ValueError for a bad row)."""
        return {}

    def load_items(self, resolver: DataResolver, testsets=(), options=None) -> LoadedItems:
        rel = f"halogen/prompts/{self.prompt_file}"
        path = resolver.resolve(rel)
        items: list[Item] = []
        seen: Counter[str] = Counter()
        for i, row, problem in read_csv_rows(path):
            where = f"{rel} row {i + 2}"  # +1 for the header, +1 for 1-based line numbers
            if row is None:
                raise DataError(f"{where}: {problem}")
            if not row.get("prompt", "").strip():
                raise DataError(f"{where}: empty prompt")
            try:
                fields = self.item_fields(row, where)
            except ValueError as err:
                raise DataError(str(err)) from None
            prompt = normalize_prompt(row["prompt"])
            occurrence = seen[prompt]
            seen[prompt] += 1
            fields["occurrence"] = occurrence
            items.append(Item(self.name, stable_id(self.name, prompt, occurrence), row["prompt"].strip(),
                              fields, source_row=i))
        return LoadedItems(items, {rel: sha256_file(path)})

    def replay_keys(self, record: Mapping[str, Any]) -> list[str]:
        occurrence = record.get("occurrence", 0)
        return [f"prompt:{normalize_prompt(str(record.get('prompt', '')))}#{occurrence}"]

    def released_file(self, model_name: str) -> str | None:
        """The model's released response file for this task; None for a released model the
        authors did not run on it (summarization has four), whose items then count as missing."""
        files = RELEASED["responses"].get(self.response_dir, {})
        if model_name not in RELEASED["models"]:
            raise DataError(f"HALOGEN released no responses for model '{model_name}'; "
                            f"released models: {', '.join(RELEASED['models'])}")
        rel = files.get(model_name)
        return f"halogen/responses/{self.response_dir}/{rel}" if rel else None

