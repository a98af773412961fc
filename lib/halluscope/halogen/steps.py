"""What identifies a recorded LLM step of HALOGEN's pipeline: where a released model's recorded
file lies, and the content key a role call carries so a recorded role model can find the answer
(``recorded.py`` builds the answers; the tasks build the keys)."""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

from halluscope.models.replay import file_rows

RECORDED_FILES = json.loads((Path(__file__).parent / "released_files.json").read_text())["recorded"]

# steps: what a role model was asked (the key's first part)
PARSE, FACTS, FACT_VERDICT, TITLES, TITLE_FOUND, MEETING = (
    "parse", "facts", "fact-verdict", "titles", "title-found", "meeting")


def step_keys(domain: str, step: str, joins: list[str], response: str, units: list[str]) -> list[list[str]]:
    """Content keys of a step's calls, one list per unit (one key per way the item is joined):
    ``<domain>:<digest>`` of the step, the item (one of its replay keys), the
    whitespace-normalised response and the unit. A model may give one response to several
    prompts and the authors' sampled steps may differ between them, so the item is part of it;
    the domain prefix lets the answers be loaded one domain at a time."""
    body = _response_digest(response)
    head = [hashlib.blake2b(f"{step}\x1f{j}\x1f".encode() + body, digest_size=16) for j in joins]
    out = []
    for unit in units:
        tail = " ".join(unit.split()).encode()
        keys = []
        for h in head:
            h = h.copy()
            h.update(tail)
            keys.append(f"{domain}:{h.hexdigest()}")
        out.append(keys)
    return out


@lru_cache(maxsize=8192)
def _response_digest(response: str) -> bytes:
    """The whitespace-normalised response's digest, once per response rather than per call and
    join: each row's response is keyed in two phases, by its paper and corrected rule sets, and
    under each of its item's joins."""
    return hashlib.blake2b(" ".join(response.split()).encode(), digest_size=16).digest() + b"\x1f"


def recorded_path(domain: str, model: str) -> str | None:
    name = RECORDED_FILES.get(domain, {}).get(model)
    return f"halogen/recorded/{domain}/{name}" if name else None


def read_rows(path: Path) -> tuple[dict[str, str], ...]:
    """A recorded file's usable rows, as the replay join reads them: a model replayed from its
    recorded file (``source: recorded``) has it parsed once for both (what is derived
    from the rows is kept, not the rows)."""
    return tuple(row for _, row, _ in file_rows(path, "csv") if row is not None)
