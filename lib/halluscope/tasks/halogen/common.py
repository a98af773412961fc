"""What HALOGEN's program-verified tasks share: released files, the abstention rule, CSV reading."""

from __future__ import annotations

import ast
import csv
import json
import re
import sys
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any, Iterator, Mapping

from halluscope.errors import DataError
from halluscope.records import stable_id
from halluscope.sources import DataResolver, open_text, sha256_file
from halluscope.tasks.base import Item, LoadedItems, Task

csv.field_size_limit(sys.maxsize)

RELEASED = json.loads(resources.files(__package__).joinpath("released_files.json").read_text())

# Phrases whose presence marks a response as an abstention. The list is the one HALOGEN's
# released scorers use, with one difference: their list loses "I am sorry" and "Sorry" to a
# missing comma (the two strings concatenate); both are kept here as separate phrases.
ABSTENTION_PHRASES: tuple[str, ...] = (
    "I could not find any information", "The search results do not provide",
    "There is no information", "There are no search results",
    "there are no provided search results", "not provided in the search results",
    "is not mentioned in the provided search results", "There seems to be a mistake in the question",
    "Not sources found", "No sources found", "Try a more general question", "Unfortunately,",
    "There doesn't seem to be", "There does not seem to be", "I do not", "I don't", "**No relevant",
    "I'm afraid", "I am afraid", "I apologize,", "I'm sorry", "I am sorry", "Sorry", "provide more",
    "I am not familiar with", "I'm not familiar with",
)
ABSTENTION_RULE = "halogen-phrases-v1"
_ABSTENTION = re.compile("|".join(re.escape(p) for p in ABSTENTION_PHRASES))


def abstained(text: str) -> bool:
    """Empty responses and responses containing an abstention phrase (case-sensitive)."""
    return not text.strip() or _ABSTENTION.search(text) is not None


def parse_list_field(value: str, where: str) -> list[str]:
    """HALOGEN stores lists as Python literals: "['mercury', 'venus']"."""
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
            reader = csv.DictReader(f)
            if not reader.fieldnames:
                raise DataError(f"{path}: empty file or no header row")
            for i, row in enumerate(reader):
                if None in row:
                    yield i, None, f"{len(row[None])} more field(s) than the header"
                elif any(v is None for v in row.values()):
                    missing = [k for k, v in row.items() if v is None]
                    yield i, None, f"missing field(s) {missing}"
                else:
                    yield i, row, ""
    except (OSError, EOFError, csv.Error, UnicodeDecodeError) as err:
        raise DataError(f"cannot read {path}: {err}") from None


def normalize_prompt(prompt: str) -> str:
    return " ".join(prompt.split())


class HalogenTask(Task):
    """A HALOGEN task backed by its released prompt file and recorded responses."""

    prompt_file: str  # under halogen/prompts/
    response_dir: str  # under halogen/responses/

    def item_fields(self, row: Mapping[str, str], where: str) -> dict[str, Any]:
        """Task fields kept from a prompt-file row (raises ValueError for a bad row)."""
        return {}

    def load_items(self, resolver: DataResolver, testsets=()) -> LoadedItems:
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


def word_tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())
