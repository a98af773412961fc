"""HALOGEN code packages: every imported top-level package must exist (stdlib or PyPI)."""

from __future__ import annotations

import re

from halluscope.tasks.base import Item, Verdict
from halluscope.tasks.halogen.common import ABSTENTION_RULE, HalogenTask, abstained

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED = rf"{_NAME}(?:\s*\.\s*{_NAME})*"
# `import a, b.c as d` and `from a.b import c` at the start of a statement; a prompt marker
# (">>> ") or a line number may come first.
_IMPORT = re.compile(rf"^(?:>>>\s*|\d+[.:)]?\s+)?import\s+({_DOTTED}(?:\s+as\s+{_NAME})?"
                     rf"(?:\s*,\s*{_DOTTED}(?:\s+as\s+{_NAME})?)*)")
_FROM = re.compile(rf"^(?:>>>\s*|\d+[.:)]?\s+)?from\s+({_DOTTED})\s+import\b")
_INLINE_CODE = re.compile(r"`([^`\n]+)`")


def _statements(text: str) -> list[str]:
    """Candidate statements: every line, its `;`-separated parts, and inline code spans in prose."""
    out: list[str] = []
    for line in text.splitlines():
        for part in line.split(";"):
            out.append(part.strip())
        for span in _INLINE_CODE.findall(line):
            out.extend(s.strip() for s in span.split(";"))
    return out


def extract_imports(text: str) -> list[str]:
    """Top-level package names imported by a response, in order of first appearance.

    Relative imports (``from . import x``) name no package and are skipped."""
    found: dict[str, None] = {}
    for stmt in _statements(text):
        m = _IMPORT.match(stmt)
        if m:
            for clause in m.group(1).split(","):
                found.setdefault(clause.split()[0].split(".")[0].strip(), None)
            continue
        m = _FROM.match(stmt)
        if m:
            found.setdefault(m.group(1).split(".")[0].strip(), None)
    return list(found)


class CodePackages(HalogenTask):
    name = "halogen/code"
    kind = "response"
    abstention_rule = ABSTENTION_RULE
    decomposer = "python-imports-v1"
    verifier = "stdlib+pypi-snapshot-v1"
    knowledge = ("pypi",)
    prompt_file = "prompts_code.csv.gz"
    response_dir = "code"

    def responded(self, text: str, item: Item, replies=()) -> bool:
        return not abstained(text)

    def decompose(self, text: str, item: Item, replies=()) -> list[str]:
        return extract_imports(text)

    def verify(self, atoms, text, item, kb, replies=()) -> list[Verdict]:
        return [Verdict(*kb.pypi.lookup(a, kb.options.import_name_aliases)) for a in atoms]
