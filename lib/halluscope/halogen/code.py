"""HALOGEN code packages: every imported top-level package must exist (stdlib or PyPI)."""

from __future__ import annotations

import re

from halluscope.contract.task import Item, Verdict
from halluscope.halogen.common import HalogenTask
from halluscope.halogen.options import options_of, packages
from halluscope.halogen.paper import paper_imports, stdlib_module
from halluscope.knowledge.pypi import normalize

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
    """Paper: the authors' two import regexes; a name exists when PyPI has it (the run's
    snapshot) or the standard library documents it on a page of its own. Corrected: every
    import statement form (``import a, b``, dotted, ``;``-joined, inline code) and the whole
    standard library; ``benchmarks.halogen.import_name_aliases`` also accepts cv2 -> opencv-python etc."""

    base_name = "halogen/code"
    kind = "response"
    knowledge = ("pypi",)
    prompt_file = "prompts_code.csv.gz"
    response_dir = "code"

    def __init__(self, rules="paper") -> None:
        super().__init__(rules)
        self.decomposer = f"python-imports-{rules}-v2"
        self.verifier = f"stdlib+pypi-snapshot-{rules}-v2"

    def decompose(self, text: str, item: Item, replies=()) -> list[str]:
        return paper_imports(text) if self.rules == "paper" else extract_imports(text)

    def verify(self, atoms, text, item, kb, replies=()) -> list[Verdict]:
        index = packages(kb)
        if self.rules == "corrected":
            aliases = options_of(kb).import_name_aliases
            return [Verdict(*index.lookup(a, aliases)) for a in atoms]
        out = []
        for a in atoms:
            if normalize(a) in index.names:
                out.append(Verdict(True, "pypi"))
            elif stdlib_module(a, "paper"):
                out.append(Verdict(True, "stdlib, documented on its own page"))
            else:
                out.append(Verdict(False, "not in the PyPI snapshot nor a documented stdlib page"))
        return out
