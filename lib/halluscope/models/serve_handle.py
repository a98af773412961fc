"""Provider for models served by this package's Ray Serve apps, called through a DeploymentHandle.

Prompts travel several to a call (``complete_batch``, ``limits.prompts_per_call`` of them): one
prompt per Serve call tops out near 320 calls/s on two cores, CPU-bound in Serve itself, while a
chunk of prompts costs about the same as one. A prompt the replica answered with an error is
answered again (``Retry``); a call that raised (replica dead, app deleted) or brought a malformed
answer back is ``Unanswered``. A call the model cancels (its timeout) is cancelled on the replica,
which then stops working on it. The handle is looked up once per process, on first use.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any, ClassVar

from halluscope.contract.completion import Completion
from halluscope.models.base import GenerationRequest, SamplingParams
from halluscope.models.model import describe_error
from halluscope.models.provider import CallLimits, RemoteProvider, Retry, Unanswered


class ServeHandleProvider(RemoteProvider):
    """The ``complete_batch`` method of a Serve deployment."""

    LIVE: ClassVar[tuple[str, ...]] = ("_handle",)

    def __init__(self, model_id: str, app_name: str, deployment_name: str, *, limits: CallLimits,
                 sampling: SamplingParams = SamplingParams()) -> None:
        self.model_id = model_id
        self.app_name = app_name
        self.deployment_name = deployment_name
        self.limits = limits
        self.sampling = sampling
        self._handle: Any = None

    def __repr__(self) -> str:
        return (f"ServeHandleProvider(model_id={self.model_id!r}, app_name={self.app_name!r}, "
                f"deployment_name={self.deployment_name!r}, limits={self.limits})")

    def where(self) -> str:
        return f"of model '{self.model_id}' (Serve app '{self.app_name}', deployment '{self.deployment_name}')"

    async def open(self) -> None:
        if self._handle is None:
            self._handle = deployment_handle(self, self.app_name, self.deployment_name)

    async def call(self, requests: Sequence[GenerationRequest]) -> list[Completion | Retry]:
        response = self._handle.complete_batch.remote([r.prompt for r in requests], self.sampling.as_dict())
        try:
            items = await answer_of(response)
        except Exception as exc:  # noqa: BLE001 - every transport failure counts the same
            raise Unanswered(describe_error(exc)) from None
        if not isinstance(items, list) or len(items) != len(requests):
            raise Unanswered(f"malformed answer: expected {len(requests)} results, got {type(items).__name__}"
                             f"{f' of {len(items)}' if isinstance(items, list) else ''}")
        return [Retry(str(item["error"])) if item.get("error") else
                Completion(text=item["text"], input_tokens=item.get("input_tokens"),
                           output_tokens=item.get("output_tokens"))
                for item in items]


async def answer_of(response: Any, answer: Awaitable[Any] | None = None) -> Any:
    """What a handle call (``response``) brings back, through ``answer`` when the response is read
    another way (streamed); the call is cancelled on the replica when its waiter is cancelled (the
    model's timeout), so the replica stops working on a call nobody waits for."""
    try:
        return await (response if answer is None else answer)
    except asyncio.CancelledError:
        response.cancel()
        raise


def deployment_handle(provider: RemoteProvider, app_name: str, deployment_name: str) -> Any:
    """The handle of the deployment ``provider`` calls; the provider's ModelDown when there is
    none. A reused worker may hold the client of a Serve stopped since (``serve.shutdown`` and a
    new Serve in the same Ray, as between tests): that client is dropped once and the name looked
    up again."""
    from ray import serve

    try:
        try:
            return serve.get_deployment_handle(deployment_name, app_name=app_name)
        except Exception:  # noqa: BLE001 - the cached client may be the dead one
            if not forget_serve_client():
                raise
            return serve.get_deployment_handle(deployment_name, app_name=app_name)
    except Exception as exc:  # noqa: BLE001 - any lookup failure means nothing to call
        raise provider.down(f"no such deployment ({type(exc).__name__}: {exc})") from exc


def forget_serve_client() -> bool:
    """Drop this process's cached Serve client (Ray has no public call for it); False when this
    Ray has no such private function, and nothing was dropped."""
    from ray.serve import context

    disconnect = getattr(context, "_disconnect", None)
    if disconnect is None:
        return False
    disconnect()
    return True
