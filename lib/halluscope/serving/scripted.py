"""A deterministic stand-in model served by Ray Serve, for tests, load simulation and fault drills.

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
without both parts is not a judge prompt and gets ``default``.

Faults are drawn per attempt from a hash of (seed, attempt number, prompt), where the replica
counts the attempts it has seen of each prompt. A retry of a failed prompt is a new attempt and
can succeed, and a run against one replica is reproducible. With several replicas each keeps its
own counts, so a retry routed elsewhere may repeat the same draw, which only costs a retry.
Every call sleeps ``latency_s`` with ``asyncio.sleep``, so a replica overlaps up to
``max_ongoing_requests`` calls as a real batched server would; a drawn timeout sleeps an hour,
and is cancelled when the client cancels the request. Token counts are whitespace-separated words.

As a stand-in for a GPU engine (``tokens_per_s``): a replica produces that many output tokens a
second over all its requests, in arrival order, as a saturated engine under continuous batching
does; an answer is ready once its tokens are produced, so its latency grows with the load, and
the replica's total time is its total tokens over its throughput. ``load_s`` is the replica's
start (the weights load): Serve reports the deployment healthy only after it.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections import defaultdict
from typing import Literal

from ray import serve

from halluscope.config.schema import ScriptedParams, ServeOptions
from halluscope.serving.openai_api import build_openai_app
from halluscope.task_registry import stand_ins

# Far beyond any sane client timeout; the sleep is cancelled with the request.
HANG_S = 3600.0
INJECTED_ERROR = "injected fault: service unavailable (scripted error_rate)"

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
        """Error for draws below ``error_rate``, timeout for the next ``timeout_rate``, else none."""
        draw = fault_draw(self.params.seed, prompt, attempt)
        if draw < self.params.error_rate:
            return "error"
        if draw < self.params.error_rate + self.params.timeout_rate:
            return "timeout"
        return None

    @property
    def injects_faults(self) -> bool:
        return self.params.error_rate > 0 or self.params.timeout_rate > 0


def client_concurrency(options: ServeOptions) -> int:
    """Chunks a client may keep in flight: a replica overlaps all its ongoing requests."""
    return options.num_replicas * options.max_ongoing_requests


@serve.deployment(name="scripted", graceful_shutdown_timeout_s=2.0)
@serve.ingress(build_openai_app)
class ScriptedDeployment:
    """Serves a ``ScriptedResponder`` over the handle API (``complete_batch``) and OpenAI HTTP."""

    def __init__(self, model_id: str, params: dict) -> None:
        self.model_id = model_id
        self._responder = ScriptedResponder(ScriptedParams.model_validate(params))
        self._attempts: defaultdict[str, int] = defaultdict(int)
        capacity = self._responder.params.capacity
        # at most `capacity` prompts in progress: a known ceiling of replicas x capacity / latency
        self._slots = asyncio.Semaphore(capacity) if capacity else None
        self._engine_free_at = 0.0  # when the modelled engine has produced every token asked of it so far
        time.sleep(self._responder.params.load_s)  # the weights load: the replica is not healthy before

    async def _produce(self, tokens: int) -> None:
        """Wait until the modelled engine has produced ``tokens`` more output tokens after those
        already asked of it (``tokens_per_s``)."""
        rate = self._responder.params.tokens_per_s
        if rate is None or tokens <= 0:
            return
        now = time.monotonic()
        self._engine_free_at = max(now, self._engine_free_at) + tokens / rate
        await asyncio.sleep(self._engine_free_at - now)

    async def complete_batch(self, prompts: list[str], sampling: dict, *, chat: bool = True) -> list[dict]:
        """Answers in order, all prompts concurrently. Sampling and ``chat`` do not change a script."""
        return list(await asyncio.gather(*(self._complete(p) for p in prompts)))

    def _next_fault(self, prompt: str) -> Fault | None:
        if not self._responder.injects_faults:
            return None  # keep no per-prompt state when there is nothing to vary
        attempt = self._attempts[prompt]
        self._attempts[prompt] += 1
        return self._responder.fault(prompt, attempt)

    async def _complete(self, prompt: str) -> dict:
        fault = self._next_fault(prompt)
        delay = self._responder.params.latency_s + (HANG_S if fault == "timeout" else 0.0)
        if delay:
            if self._slots is None:
                await asyncio.sleep(delay)
            else:
                async with self._slots:
                    await asyncio.sleep(delay)
        input_tokens = len(prompt.split())
        if fault == "error":
            return {"text": None, "input_tokens": input_tokens, "output_tokens": 0, "error": INJECTED_ERROR}
        text = self._responder.answer(prompt)
        output_tokens = len(text.split())
        await self._produce(output_tokens)
        return {"text": text, "input_tokens": input_tokens, "output_tokens": output_tokens, "error": None}
