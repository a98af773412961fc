"""OpenAI-compatible HTTP routes shared by every Serve deployment of this package.

``build_openai_app`` is handed to ``serve.ingress`` as a builder, so each replica builds its own
FastAPI app at start-up (nothing FastAPI is pickled). The routes call the replica's own
``complete_batch``, the same method the handle API uses, so an answer is identical whichever way
it was asked for. Only what halluscope's clients need is implemented: non-streaming chat and text
completions, sampling fields, token usage; unknown request fields are accepted and ignored, as
OpenAI clients send many.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Protocol

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field


class CompletionServer(Protocol):
    """What a deployment class offers to these routes (and to ``ServeHandleProvider``)."""

    model_id: str

    async def complete_batch(self, prompts: list[str], sampling: dict, *, chat: bool = True) -> list[dict]:
        """One result dict per prompt: ``text``, ``input_tokens``, ``output_tokens``, ``error``."""
        ...


class _SamplingRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, gt=0)
    stop: str | list[str] | None = None
    stream: bool = False

    def sampling(self) -> dict[str, Any]:
        """Only the fields the client set: the deployment's configured sampling fills the rest."""
        out: dict[str, Any] = {k: getattr(self, k) for k in ("temperature", "top_p", "max_tokens")
                               if getattr(self, k) is not None}
        if self.stop is not None:
            out["stop"] = [self.stop] if isinstance(self.stop, str) else list(self.stop)
        return out


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        """Plain string content, or the text parts of multi-part content joined by newlines."""
        if isinstance(self.content, list):
            return "\n".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")
        return self.content or ""


class ChatCompletionRequest(_SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)


class CompletionRequest(_SamplingRequest):
    prompt: str | list[str]


def error_response(status: int, message: str, kind: str = "server_error") -> JSONResponse:
    """OpenAI's error shape, which OpenAI clients know how to show."""
    return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind, "code": status}})


def chat_prompt(messages: list[ChatMessage]) -> str | None:
    """The last user message: halluscope sends each prompt as a single user turn."""
    for message in reversed(messages):
        if message.role == "user":
            return message.text()
    return None


def finish_reason(result: dict, max_tokens: int | None) -> str:
    """"length" when the answer used the whole token budget, else "stop"."""
    if max_tokens is not None and (result.get("output_tokens") or 0) >= max_tokens:
        return "length"
    return "stop"


def usage(results: list[dict]) -> dict[str, int]:
    prompt = sum(r.get("input_tokens") or 0 for r in results)
    completion = sum(r.get("output_tokens") or 0 for r in results)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def chat_completion_body(model: str, result: dict, max_tokens: int | None) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": result["text"]},
                     "finish_reason": finish_reason(result, max_tokens)}],
        "usage": usage([result]),
    }


def completion_body(model: str, results: list[dict], max_tokens: int | None) -> dict[str, Any]:
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": i, "text": r["text"], "logprobs": None, "finish_reason": finish_reason(r, max_tokens)}
                    for i, r in enumerate(results)],
        "usage": usage(results),
    }


def models_body(model: str) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "halluscope"}]}


def _failed(results: list[dict]) -> JSONResponse | None:
    """503 for any failed prompt: OpenAI clients retry it, as they should an overloaded server."""
    errors = [r["error"] for r in results if r.get("error")]
    return error_response(503, "; ".join(errors)) if errors else None


def _server() -> CompletionServer:
    from ray import serve

    return serve.get_replica_context().servable_object


def build_openai_app() -> FastAPI:
    """The FastAPI app of one replica: /v1/models, /v1/chat/completions, /v1/completions."""
    app = FastAPI(title="halluscope model server", docs_url=None, redoc_url=None)

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        return models_body(_server().model_id)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(request: ChatCompletionRequest) -> dict[str, Any] | JSONResponse:
        if request.stream:
            return error_response(400, "streaming is not supported", "invalid_request_error")
        prompt = chat_prompt(request.messages)
        if prompt is None:
            return error_response(400, "messages contain no user message", "invalid_request_error")
        server = _server()
        results = await server.complete_batch([prompt], request.sampling(), chat=True)
        return _failed(results) or chat_completion_body(server.model_id, results[0], request.max_tokens)

    @app.post("/v1/completions", response_model=None)
    async def completions(request: CompletionRequest) -> dict[str, Any] | JSONResponse:
        if request.stream:
            return error_response(400, "streaming is not supported", "invalid_request_error")
        prompts = [request.prompt] if isinstance(request.prompt, str) else request.prompt
        if not prompts:
            return error_response(400, "prompt is empty", "invalid_request_error")
        server = _server()
        results = await server.complete_batch(prompts, request.sampling(), chat=False)
        return _failed(results) or completion_body(server.model_id, results, request.max_tokens)

    return app
