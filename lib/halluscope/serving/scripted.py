"""A deterministic stand-in model served by Ray Serve, for tests, load simulation and fault drills.

It answers by the rules of ``halluscope.models.scripted`` (which the same model follows when it is
answered in process, ``params.in_process``) and adds what a server does.

Faults are drawn per attempt from a hash of (seed, attempt number, prompt), where the replica
counts the attempts it has seen of each prompt. A retry of a failed prompt is a new attempt and
can succeed, and a run against one replica is reproducible. With several replicas each keeps its
own counts, so a retry routed elsewhere may repeat the same draw, which only costs a retry.
Every call sleeps ``latency_s`` with ``asyncio.sleep``, so a replica overlaps up to
``max_ongoing_requests`` calls as a real batched server would; a drawn timeout sleeps an hour,
and is cancelled when the client cancels the request.

As a stand-in for a GPU engine (``tokens_per_s``): a replica produces that many output tokens a
second over all its requests, in arrival order, as a saturated engine under continuous batching
does; an answer is ready once its tokens are produced, so its latency grows with the load, and
the replica's total time is its total tokens over its throughput. With ``prefill_tokens_per_s``
its prompts take their time in the same queue, as an engine's prefill does. ``cold_start_s`` and
``load_s`` are the replica's start (a fresh node's boot and downloads, then the weights load):
Serve reports the deployment healthy only after both.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

from ray import serve

from halluscope.config.schema import ScriptedParams
from halluscope.models.scripted import Fault, ScriptedResponder
from halluscope.serving.openai_api import build_openai_app

# Far beyond any sane client timeout; the sleep is cancelled with the request.
HANG_S = 3600.0
INJECTED_ERROR = "injected fault: service unavailable (scripted error_rate)"


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
        # the node's cold start, then the weights load: the replica is not healthy before
        time.sleep(self._responder.params.cold_start_s + self._responder.params.load_s)

    async def _produce(self, input_tokens: int, output_tokens: int) -> None:
        """Wait until the modelled engine has read ``input_tokens`` and produced ``output_tokens``
        more after the work already asked of it (``prefill_tokens_per_s``, ``tokens_per_s``)."""
        p = self._responder.params
        work = (input_tokens / p.prefill_tokens_per_s if p.prefill_tokens_per_s else 0.0) + (
            output_tokens / p.tokens_per_s if p.tokens_per_s else 0.0)
        if work <= 0:
            return
        now = time.monotonic()
        self._engine_free_at = max(now, self._engine_free_at) + work
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
        await self._produce(input_tokens, output_tokens)
        return {"text": text, "input_tokens": input_tokens, "output_tokens": output_tokens, "error": None}
