"""A deterministic stand-in model: the answering and fault rules of ``ScriptedParams``, free of Ray
Serve, and the provider that answers with them in the calling process (``params.in_process``).

Answers follow ``ScriptedParams`` in this order:

1. the first rule whose ``pattern`` (a regular expression) is found in the prompt answers its ``response``;
2. else, if any ``abstain_patterns`` regex is found, ``abstain_text``;
3. else, in judge mode (``support_on_overlap`` set) and when the prompt follows the judge convention
   below, "Yes" if at least that share of the claim's distinct words occur in the evidence, else "No";
4. else, in extractor mode (``extract``), the first answer a registered benchmark's ``stand_in``
   gives the prompt (facts, titles or a parse a simple program finds);
5. else ``default``.

Judge prompt convention: a line beginning with ``Claim:`` or ``Hypothesis:`` holds the claim (the
rest of that line). The evidence starts after ``Evidence:`` or ``Premise:`` at the beginning of a
line and runs to the claim line if the claim comes later, else to the end of the prompt. Labels
are matched case-insensitively; words are lower-cased runs of letters and digits. A prompt
without both parts is not a judge prompt and gets ``default``. Token counts are
whitespace-separated words.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Sequence
from typing import Literal

from halluscope.config.schema import ScriptedModel, ScriptedParams
from halluscope.contract.completion import Completion
from halluscope.models.base import GenerationRequest
from halluscope.models.provider import LocalProvider
from halluscope.task_registry import stand_ins

Fault = Literal["error", "timeout"]

_CLAIM = re.compile(r"^[ \t]*(?:claim|hypothesis):(.*)$", re.IGNORECASE | re.MULTILINE)
_EVIDENCE = re.compile(r"^[ \t]*(?:evidence|premise):", re.IGNORECASE | re.MULTILINE)
_WORD = re.compile(r"[^\W_]+")


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def judge_parts(prompt: str) -> tuple[str, str] | None:
    """(claim, evidence) of a prompt that follows the judge convention, else None."""
    claim = _CLAIM.search(prompt)
    evidence = _EVIDENCE.search(prompt)
    if claim is None or evidence is None:
        return None
    end = claim.start() if claim.start() > evidence.end() else len(prompt)
    return claim.group(1).strip(), prompt[evidence.end():end]


def overlap_share(claim: str, evidence: str) -> float:
    """Share of the claim's distinct words found in the evidence (0 for an empty claim)."""
    claim_words = _words(claim)
    if not claim_words:
        return 0.0
    return len(claim_words & _words(evidence)) / len(claim_words)


def fault_draw(seed: int, prompt: str, attempt: int) -> float:
    """A uniform number in [0, 1) fixed by its inputs, the same in every process (unlike hash())."""
    digest = hashlib.sha256(f"{seed}\x00{attempt}\x00{prompt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64


class ScriptedResponder:
    """The answering and fault rules, free of Serve so they can be checked directly."""

    def __init__(self, params: ScriptedParams) -> None:
        self.params = params
        self._rules = [(re.compile(r.pattern), r.response) for r in params.rules]
        self._abstain = [re.compile(p) for p in params.abstain_patterns]

    def answer(self, prompt: str) -> str:
        for pattern, response in self._rules:
            if pattern.search(prompt):
                return response
        if any(p.search(prompt) for p in self._abstain):
            return self.params.abstain_text
        if self.params.support_on_overlap is not None:
            parts = judge_parts(prompt)
            if parts is not None:
                return "Yes" if overlap_share(*parts) >= self.params.support_on_overlap else "No"
        if self.params.extract:
            for answer in stand_ins():
                extracted = answer(prompt)
                if extracted is not None:
                    return extracted
        return self.params.default

    def fault(self, prompt: str, attempt: int) -> Fault | None:
        """Error for draws below ``error_rate``, timeout for the next ``timeout_rate``, else none;
        none at all once ``faults_until`` has passed."""
        until = self.params.faults_until
        if until is not None and time.time() >= until:
            return None
        draw = fault_draw(self.params.seed, prompt, attempt)
        if draw < self.params.error_rate:
            return "error"
        if draw < self.params.error_rate + self.params.timeout_rate:
            return "timeout"
        return None

    @property
    def injects_faults(self) -> bool:
        return self.params.error_rate > 0 or self.params.timeout_rate > 0


class ScriptedProvider(LocalProvider):
    """A stand-in answered where it is called (the driver, a pipeline actor): nothing is deployed,
    so a run or a test whose subject is not Ray Serve pays no Serve start-up for it. It models no
    server (no latency, throughput or faults: the config refuses those with ``in_process``)."""

    def __init__(self, spec: ScriptedModel) -> None:
        self.model_id = spec.id
        self._responder = ScriptedResponder(spec.params)

    def answer(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        out = []
        for r in requests:
            text = self._responder.answer(r.prompt)
            out.append(Completion(text=text, input_tokens=len(r.prompt.split()), output_tokens=len(text.split())))
        return out
