"""A transformers causal LM served by Ray Serve: small models on CPU, or on a GPU replica.

The model and tokenizer load once per replica. Generation runs in a worker thread, one batch at a
time: the event loop stays free for health checks and queued requests, and one forward pass at a
time is what a CPU (or a small GPU share) can do anyway. Prompts go through the tokenizer's chat
template as a single user turn when it has one (the handle API and /v1/chat/completions), raw
otherwise and on /v1/completions. Temperature 0 is greedy decoding. Token counts come from the
tokenizer: prompt tokens without padding, generated tokens up to and including end-of-sequence.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ray import serve

from halluscope.config.schema import HFParams
from halluscope.serving.openai_api import build_openai_app


def generated_length(ids: list[int], eos_ids: set[int], pad_id: int | None) -> int:
    """Tokens the model produced in one row of a padded batch: up to the first end-of-sequence
    (included); without one, minus the padding ``generate`` adds after a row stops early."""
    for i, token in enumerate(ids):
        if token in eos_ids:
            return i + 1
    n = len(ids)
    while n and ids[n - 1] == pad_id:
        n -= 1
    return n


def cut_at_stop(text: str, stop: list[str]) -> str:
    """OpenAI semantics: the answer ends before the first stop string, which is not returned."""
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=len(text))
    return text[:cut]


@serve.deployment(name="hf")
@serve.ingress(build_openai_app)
class HFDeployment:
    """``AutoModelForCausalLM`` + ``AutoTokenizer`` behind ``complete_batch`` and OpenAI HTTP."""

    def __init__(self, model_id: str, params: dict) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        p = HFParams.model_validate(params)
        if p.model_source.startswith("s3://"):
            raise ValueError(f"model '{model_id}': the hf backend loads local directories or hub ids, "
                             f"not {p.model_source}; copy the model to a local directory first")
        self.model_id = model_id
        self._defaults: dict[str, Any] = {**p.sampling.model_dump(), "stop": []}
        device = p.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self._tokenizer = AutoTokenizer.from_pretrained(p.model_source, revision=p.revision)
        if self._tokenizer.pad_token is None:
            self._tokenizer.pad_token = self._tokenizer.eos_token
        self._tokenizer.padding_side = "left"  # decoder-only models continue from the right edge
        self._model = AutoModelForCausalLM.from_pretrained(p.model_source, revision=p.revision,
                                                           dtype=getattr(torch, p.dtype)).to(device).eval()
        eos = self._model.generation_config.eos_token_id
        if eos is None:
            eos = self._tokenizer.eos_token_id
        self._eos_ids: set[int] = set(eos) if isinstance(eos, list) else {eos}
        self._lock = asyncio.Lock()

    async def complete_batch(self, prompts: list[str], sampling: dict, *, chat: bool = True) -> list[dict]:
        """Generate for all prompts in one padded batch; a failing batch is retried prompt by
        prompt so that one bad prompt (say, longer than the context) fails alone."""
        merged = {**self._defaults, **{k: v for k, v in sampling.items() if v is not None}}
        async with self._lock:
            try:
                return await asyncio.to_thread(self._generate, prompts, merged, chat)
            except Exception as exc:  # noqa: BLE001 - turned into per-prompt errors below
                if len(prompts) == 1:
                    return [_error_item(exc)]
            results = []
            for prompt in prompts:
                try:
                    results.extend(await asyncio.to_thread(self._generate, [prompt], merged, chat))
                except Exception as exc:  # noqa: BLE001 - a per-prompt failure is data
                    results.append(_error_item(exc))
            return results

    def _render(self, prompt: str, chat: bool) -> str:
        if chat and self._tokenizer.chat_template:
            return self._tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                       tokenize=False, add_generation_prompt=True)
        return prompt

    def _generate(self, prompts: list[str], sampling: dict[str, Any], chat: bool) -> list[dict]:
        import torch

        templated = chat and bool(self._tokenizer.chat_template)
        # A chat template writes its own special tokens; a raw prompt gets the tokenizer's.
        enc = self._tokenizer([self._render(p, chat) for p in prompts], return_tensors="pt", padding=True,
                              add_special_tokens=not templated).to(self._model.device)
        kwargs: dict[str, Any] = {"max_new_tokens": int(sampling["max_tokens"]),
                                  "pad_token_id": self._tokenizer.pad_token_id}
        if sampling["temperature"] > 0:
            kwargs.update(do_sample=True, temperature=float(sampling["temperature"]),
                          top_p=float(sampling["top_p"]))
        else:
            kwargs["do_sample"] = False
        stop = list(sampling.get("stop") or [])
        if stop:
            kwargs.update(stop_strings=stop, tokenizer=self._tokenizer)
        with torch.inference_mode():
            out = self._model.generate(**enc, **kwargs)
        prompt_len = enc["input_ids"].shape[1]
        input_counts = enc["attention_mask"].sum(dim=1).tolist()
        results = []
        for row, n_in in zip(out[:, prompt_len:].tolist(), input_counts):
            n_out = generated_length(row, self._eos_ids, self._tokenizer.pad_token_id)
            text = self._tokenizer.decode(row[:n_out], skip_special_tokens=True)
            results.append({"text": cut_at_stop(text, stop), "input_tokens": int(n_in),
                            "output_tokens": n_out, "error": None})
        return results


def _error_item(exc: Exception) -> dict:
    return {"text": None, "input_tokens": 0, "output_tokens": 0,
            "error": f"generation failed: {type(exc).__name__}: {exc}"}
