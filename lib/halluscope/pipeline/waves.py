"""The run's served models under test on a finite cluster: deployed in waves that fit the budget,
each given back the moment its generations are written, the next deployed in its place.

The driver follows every deployment through four phases, asking Serve (without blocking) where
each one is: requested (pending, weights loading) -> generating (a Ray task sends its rows to it)
-> releasing (its app deleted) -> released (Serve no longer lists the app and Ray reports its
resources free: ``schedule.Admission`` may hand them to the next model). A
deployment not healthy within its deadline, or that Serve reports failed, fails that model: the
reason is recorded, its resources go back, and the other models go on. A model whose generation
fails once it is running (its engine lost: a replica killed by an out-of-memory error, a lost node)
is given back and queued again, once: its next deployment generates only the rows no part holds
yet; a second failure fails it. Times are wall-clock seconds, so the ledger charges what the cloud
bills: pending and loading included, for each deployment.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import ray

from halluscope.config.schema import ModelSpec
from halluscope.errors import ModelDown
from halluscope.pipeline.schedule import Admission
from halluscope.resolve.cluster import Job
from halluscope.resolve.nodes import Layout
from halluscope.retry import GaveUp, RetryPolicy, Transient
from halluscope.serving.app import ServedEndpoint, deploy, shutdown, states

logger = logging.getLogger(__name__)

POLL_S = 0.25
DEPLOY_ATTEMPTS = 3
FREE_WAIT_S = 60.0  # how long a released deployment's resources may stay busy in Ray's view
# what a generation fails with when its engine is gone (the model's breaker opens on a deployment
# that stopped answering; Ray's errors when a process or node died), rather than on its input
ENGINE_LOST = (ModelDown, ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
               ray.exceptions.NodeDiedError, ray.exceptions.ObjectLostError)


@dataclass
class Deployment:
    """One model's time on the cluster (``time.time()`` seconds) and how it ended."""

    model: str
    resource: str
    units: float
    wave: int
    requested_at: float
    ready_at: float | None = None
    generated_at: float | None = None
    released_at: float | None = None
    generated: int = 0
    status: str = "deploying"  # deploying | generating | releasing | generated | requeued | failed
    reason: str | None = None  # why it failed, or why it was requeued

    @property
    def held_s(self) -> float:
        return (self.released_at or time.time()) - self.requested_at

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Active:
    job: Job
    record: Deployment
    endpoint: ServedEndpoint | None
    deadline: float
    task: Any = None  # the generation's ObjectRef
    requeue: bool = False  # once released, the model is queued again instead of failing
    gone_at: float | None = None  # when Serve stopped listing its app


class Waves:
    """Runs ``generate(spec, endpoint) -> ObjectRef[int]`` for every job as budget allows.

    ``finished(model, ok)`` is called once per model when its generations are written (``ok``)
    or it failed; ``allowed(job, deployments)`` may hold a model back (the dollar budget): when
    nothing runs and the next model is held back, the remaining models are recorded as not
    started, with the reason ``held_back`` gives."""

    def __init__(self, jobs: Sequence[Job], budget: dict[str, float], specs: dict[str, ModelSpec],
                 generate: Callable[[ModelSpec, ServedEndpoint], Any], finished: Callable[[str, bool], None], *,
                 scope: str | None = None, layout: Layout | None = None,
                 allowed: Callable[[Job, list[Deployment]], str | None] | None = None) -> None:
        self.admission = Admission(jobs, budget, layout)
        self.scope = scope  # the run id: its apps are its own on a shared cluster
        self.specs = specs
        self.generate = generate
        self.finished = finished
        self.allowed = allowed
        self.deployments: list[Deployment] = []
        self.requeued: set[str] = set()  # models queued again after their generation failed
        self.stop = threading.Event()
        self.last_event = time.time()
        self._wave = 0

    def waiting(self) -> list[str]:
        """What the schedule waits on now, for a stalled run's message."""
        return [f"{d.model}: {d.status} for {time.time() - d.requested_at:.0f} s" for d in self.deployments
                if d.status in ("deploying", "generating", "releasing")] + \
            [f"{j.model}: not started ({j.describe()} not free)" for j in self.admission.pending]

    def run(self) -> list[Deployment]:
        active: dict[str, _Active] = {}
        try:
            while (self.admission.pending or active) and not self.stop.is_set():
                held: list[str] = []
                started = self.admission.start(partial(self._allow, held=held))
                for job in started:
                    active[job.model] = self._deploy(job)
                self._wave += bool(started)
                if not active and self.admission.pending:
                    for job in self.admission.pending:
                        self._not_started(job, held[0] if held else "not admitted")
                    self.admission.pending.clear()
                    break
                self._advance(active)
                time.sleep(POLL_S)
        finally:
            if active:  # stopped (an error or Ctrl-C elsewhere): give everything back
                shutdown([a.endpoint for a in active.values() if a.endpoint is not None])
                now = time.time()
                for a in active.values():
                    if a.record.status != "failed":
                        a.record.status, a.record.reason = "failed", "the run stopped before it finished"
                    a.record.released_at = a.record.released_at or now
        return self.deployments

    def _allow(self, job: Job, held: list[str]) -> bool:
        reason = self.allowed(job, self.deployments) if self.allowed else None
        if reason:
            held.append(reason)
        return reason is None

    def _deploy(self, job: Job) -> _Active:
        spec = self.specs[job.model]
        record = Deployment(job.model, job.resource, job.units, self._wave, time.time())
        self.deployments.append(record)
        self.last_event = record.requested_at
        try:
            endpoint = self._deploy_app(spec)
        except Exception as err:  # noqa: BLE001 - a model that cannot deploy fails alone
            self._fail(record, f"deployment failed: {type(err).__name__}: {err}")
            record.status, record.released_at = "failed", time.time()
            self.admission.release(job)
            self.finished(job.model, False)
            return _Active(job, record, None, 0.0)
        logger.info("deploying %s (%s, wave %d)", job.model, job.describe(), record.wave)
        return _Active(job, record, endpoint, record.requested_at + spec.deploy_timeout_s)

    def _deploy_app(self, spec: ModelSpec) -> ServedEndpoint:
        """Serve's own actors (a proxy, the controller) can die on a loaded cluster while an app is
        submitted: such a failure is retried twice before it fails the model."""
        failures: list[ray.exceptions.RayActorError] = []

        def attempt(number: int) -> ServedEndpoint:
            try:
                return deploy([spec], wait=False, scope=self.scope)[spec.id]  # type: ignore[list-item]
            except ray.exceptions.RayActorError as err:
                failures.append(err)
                logger.warning("deploying %s (attempt %d of %d): %s", spec.id, number, DEPLOY_ATTEMPTS,
                               str(err).splitlines()[0])
                raise Transient(str(err)) from None

        try:
            return RetryPolicy(DEPLOY_ATTEMPTS - 1, 2.0, 6.0).run(attempt)
        except GaveUp:
            raise failures[-1] from None

    def _advance(self, active: dict[str, _Active]) -> None:
        now = time.time()
        listed = [a.endpoint for a in active.values() if a.endpoint is not None and a.task is None]
        status = states(listed) if listed else {}
        running = {a.task: a for a in active.values() if a.task is not None}
        if running:
            ready, _ = ray.wait(list(running), num_returns=len(running), timeout=0)
            for ref in ready:
                self._generated(running[ref], ref)
        for model, a in list(active.items()):
            r = a.record
            if a.endpoint is None:  # failed at deploy(): already released
                del active[model]
                continue
            state, message = status.get(model, ("", ""))
            if r.status == "deploying":
                if state == "RUNNING":
                    r.status, r.ready_at = "generating", now
                    self.last_event = now
                    a.task = self.generate(self.specs[model], a.endpoint)
                elif state == "DEPLOY_FAILED":
                    self._release(a, f"deployment failed: {message}")
                elif now > a.deadline:
                    self._release(a, f"deployment not healthy within {self.specs[model].deploy_timeout_s:g} s "
                                     f"(serve.deploy_timeout_s){f': {message}' if message else ''}")
            elif r.status == "releasing" and state == "GONE" and self._freed(a, now):
                r.released_at = now
                self.last_event = now
                self.admission.release(a.job)
                del active[model]
                if a.requeue:
                    r.status = "requeued"
                    self.admission.pending.insert(0, a.job)  # first in line for what is free
                    continue
                r.status = "generated" if r.reason is None else "failed"
                self.finished(model, r.reason is None)

    def _freed(self, a: _Active, now: float) -> bool:
        """Whether Ray has the resources of a deployment whose app is gone free again, so the next
        model is not admitted onto GPUs a replica's process still holds. Serve stops listing an
        app before Ray has taken back every actor's resources; after ``FREE_WAIT_S`` (another
        tenant's work may hold them) they are taken as given back, with a warning."""
        a.gone_at = a.gone_at or now
        free = ray.available_resources().get(a.job.resource, 0.0)
        if free >= a.job.units - 1e-9:
            return True
        if now - a.gone_at < FREE_WAIT_S:
            return False
        logger.warning("model %s: its app is gone, but Ray has %g of its %g %s free after %g s; admitting the "
                       "next model anyway", a.job.model, free, a.job.units, a.job.resource, FREE_WAIT_S)
        return True

    def _generated(self, a: _Active, ref: Any) -> None:
        try:
            a.record.generated = int(ray.get(ref))
        except Exception as err:  # noqa: BLE001 - the model fails, not the run
            reason = f"generation failed: {type(err).__name__}: {str(err).strip().splitlines()[0][:300]}"
            a.requeue = isinstance(err, ENGINE_LOST) and a.job.model not in self.requeued
            if a.requeue:
                self.requeued.add(a.job.model)
                a.record.reason = reason
                logger.warning("model %s: %s; deployed again once its resources are back", a.job.model, reason)
            self._release(a, None if a.requeue else reason)
            return
        a.record.generated_at = time.time()
        self._release(a, None)

    def _release(self, a: _Active, reason: str | None) -> None:
        if reason is not None:
            self._fail(a.record, reason)
        a.record.status = "releasing"
        a.task = None
        self.last_event = time.time()
        shutdown([a.endpoint], wait=False)  # type: ignore[list-item]

    def _fail(self, record: Deployment, reason: str) -> None:
        record.reason = reason
        logger.warning("model %s failed: %s", record.model, reason)

    def _not_started(self, job: Job, reason: str) -> None:
        now = time.time()
        self.deployments.append(Deployment(job.model, job.resource, job.units, self._wave, now, released_at=now,
                                           status="not started", reason=reason))
        self.finished(job.model, False)
