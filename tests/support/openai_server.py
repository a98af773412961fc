"""An OpenAI-compatible chat-completions server for tests, with fault injection.

It runs uvicorn in a background thread on 127.0.0.1 only (OS-assigned port), so backend tests
exercise real HTTP, retries and timeouts without any network access. It also records what it
saw (call count, peak concurrency, Authorization headers, bodies) so tests can assert on it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

_STARTUP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class FailPlan:
    """Which calls misbehave. Calls are numbered from 1 in order of arrival at the server."""

    first_n: int = 0                      # fail calls 1..first_n ...
    status: int = 503                     # ... with this HTTP status
    retry_after: str | None = None        # Retry-After header sent with those failures
    delay_s: float = 0.0                  # sleep before answering (to trigger client timeouts) ...
    delay_first_n: int | None = None      # ... on calls 1..delay_first_n only; None: every call
    prompt_status: Mapping[str, int] = field(default_factory=dict)  # these prompts always get this status
    malformed_prompts: frozenset[str] = frozenset()                 # 200 with a non-JSON body


def echo_responder(prompt: str) -> str:
    """Default answer: deterministic and tied to the prompt, so tests can check ordering."""
    return f"answer to: {prompt}"


class OpenAIStubServer:
    """Context manager: ``with OpenAIStubServer(...) as server: server.base_url``."""

    def __init__(self, responder: Callable[[str], str] = echo_responder,
                 fail_plan: FailPlan | None = None, include_usage: bool = True,
                 usage: dict[str, Any] | None = None) -> None:
        self.responder = responder
        self.fail_plan = fail_plan or FailPlan()
        self.include_usage = include_usage
        self.usage = usage or {}  # counts reported in place of the true ones (NaN sent as JSON's NaN)
        self._lock = threading.Lock()
        self._calls = 0
        self._in_flight = 0
        self._max_concurrent = 0
        self._auth_headers: list[str | None] = []
        self._headers: list[dict[str, str]] = []
        self._bodies: list[dict[str, Any]] = []
        self._port: int | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    # -- what the server saw -------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self._port is None:
            raise RuntimeError("server not started")
        return f"http://127.0.0.1:{self._port}/v1"

    @property
    def calls(self) -> int:
        with self._lock:
            return self._calls

    @property
    def max_concurrent(self) -> int:
        with self._lock:
            return self._max_concurrent

    @property
    def auth_headers(self) -> list[str | None]:
        with self._lock:
            return list(self._auth_headers)

    @property
    def headers(self) -> list[dict[str, str]]:
        """Every request's headers, names in lower case."""
        with self._lock:
            return list(self._headers)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._bodies)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> OpenAIStubServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        app = Starlette(routes=[Route("/v1/chat/completions", self._chat_completions,
                                      methods=["POST"])])
        config = uvicorn.Config(app, host="127.0.0.1", port=self._port, loop="asyncio",
                                lifespan="off", log_level="warning", access_log=False,
                                timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="openai-stub-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("OpenAI stub server failed to start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=_STARTUP_TIMEOUT_S)
        self._server = None
        self._thread = None

    def __enter__(self) -> OpenAIStubServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- the endpoint --------------------------------------------------------------------------

    async def _chat_completions(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self._calls += 1
            call_no = self._calls
            self._in_flight += 1
            self._max_concurrent = max(self._max_concurrent, self._in_flight)
            self._auth_headers.append(request.headers.get("authorization"))
            self._headers.append({k.lower(): v for k, v in request.headers.items()})
            self._bodies.append(body)
        try:
            return await self._answer(call_no, body)
        finally:
            with self._lock:
                self._in_flight -= 1

    async def _answer(self, call_no: int, body: dict[str, Any]) -> Response:
        plan = self.fail_plan
        prompt = body["messages"][-1]["content"]
        if plan.delay_s and (plan.delay_first_n is None or call_no <= plan.delay_first_n):
            await asyncio.sleep(plan.delay_s)
        if prompt in plan.prompt_status:
            return _error(plan.prompt_status[prompt], "rejected by stub for this prompt")
        if call_no <= plan.first_n:
            headers = {"Retry-After": plan.retry_after} if plan.retry_after is not None else None
            return _error(plan.status, f"injected failure on call {call_no}", headers)
        if prompt in plan.malformed_prompts:
            return PlainTextResponse("this is not json", media_type="application/json")
        answer = self.responder(prompt)
        payload: dict[str, Any] = {
            "id": f"chatcmpl-stub-{call_no}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": answer}}],
        }
        if self.include_usage:
            prompt_tokens, completion_tokens = len(prompt.split()), len(answer.split())
            payload["usage"] = {"prompt_tokens": prompt_tokens,
                                "completion_tokens": completion_tokens,
                                "total_tokens": prompt_tokens + completion_tokens, **self.usage}
        return Response(json.dumps(payload), media_type="application/json")  # json.dumps writes NaN as NaN


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """An error body in OpenAI's shape."""
    return JSONResponse({"error": {"message": message, "type": "stub_error", "code": status}},
                        status_code=status, headers=headers)
