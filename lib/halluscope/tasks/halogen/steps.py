"""What identifies a recorded LLM step of HALOGEN's pipeline: where a released model's recorded
file lies, and the content key a role call carries so a recorded role model can find the answer
(``recorded.py`` builds the answers; the tasks build the keys)."""

from __future__ import annotations

import csv
import hashlib
import json
import sys
from functools import lru_cache
from pathlib import Path

from halluscope.sources import open_text

csv.field_size_limit(sys.maxsize)

RECORDED_FILES = json.loads((Path(__file__).parent / "released_files.json").read_text())["recorded"]

# steps: what a role model was asked (the key's first part)
PARSE, FACTS, FACT_VERDICT, TITLES, TITLE_FOUND, MEETING = (
    "parse", "facts", "fact-verdict", "titles", "title-found", "meeting")


def step_key(domain: str, step: str, join: str, response: str, unit: str = "") -> str:
    """Content key of one step's call: ``<domain>:<digest>`` of the step, the item (one of its
    replay keys), the whitespace-normalised response and the unit. A model may give one response
    to several prompts and the authors' sampled steps may differ between them, so the item is
    part of it; the domain prefix lets the answers be loaded one domain at a time."""
    body = "\x1f".join([step, join, " ".join(response.split()), " ".join(unit.split())])
    return f"{domain}:{hashlib.blake2b(body.encode(), digest_size=16).hexdigest()}"


def recorded_path(domain: str, model: str) -> str | None:
    name = RECORDED_FILES.get(domain, {}).get(model)
    return f"halogen/recorded/{domain}/{name}" if name else None


@lru_cache(maxsize=256)
def read_rows(path: Path) -> tuple[dict[str, str], ...]:
    with open_text(path) as f:
        return tuple(csv.DictReader(f))
