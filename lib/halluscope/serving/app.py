"""Deploys the run config's served models as Ray Serve applications, one app per model.

Each model gets an app named after its id (sanitised); its handle is
``serve.get_deployment_handle(deployment_name, app_name)``. A run calls its models by handle
only, so it starts Serve without HTTP proxies (one per node by Serve's default, each an actor
holding memory on a GPU node) and deploys its apps without a route. ``halluscope serve`` deploys
them at route prefix ``/<name>`` instead, so that the OpenAI-compatible API is
``http://127.0.0.1:<port>/<name>/v1``: Serve's proxy is started on 127.0.0.1 only, as these
endpoints have no authentication.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray import serve
from ray.serve import Application
from ray.serve.config import ProxyLocation
from ray.serve.context import _get_global_client  # no public API: proxies, app statuses, bulk delete

from halluscope.config.schema import ServedModel
from halluscope.errors import HalluscopeError
from halluscope.quiet import quiet_ray
from halluscope.serving.served import placement, served_part

logger = logging.getLogger(__name__)

_HOST = "127.0.0.1"
_POLL_S = 0.25


@dataclass(frozen=True)
class ServedEndpoint:
    """Where one deployed model answers: by handle (app and deployment) and, when deployed over
    HTTP, at ``base_url``."""

    model_id: str
    app_name: str
    deployment_name: str
    base_url: str | None = None


def app_name_for(model_id: str, scope: str | None = None) -> str:
    """Serve app name and route segment for a model id (letters, digits, '_' and '-' only), under
    ``scope`` (a run id) when given: two runs on one Ray cluster that serve the same model id then
    deploy, and delete, apps of their own."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", model_id).strip("-") or "model"
    return f"{app_name_for(scope)}--{name}" if scope else name


def build_application(spec: ServedModel, over_http: bool = False) -> Application:
    """The Serve application of one model, as its backend's served part builds it."""
    return served_part(spec).build(spec, over_http)


def deploy(specs: Sequence[ServedModel], *, wait: bool = True, scope: str | None = None) -> dict[str, ServedEndpoint]:
    """Start Serve without HTTP proxies if it is not running, deploy every model as its own app,
    reached by handle only, and, with ``wait``, wait until all are running, each within its
    ``deploy_timeout_s`` (without it, ask ``states`` when they are). Returns endpoints by model id.
    If any app fails to deploy or misses its deadline, the apps of this call are deleted before
    the error is raised."""
    return _deploy(specs, wait, scope, over_http=False)


def deploy_over_http(specs: Sequence[ServedModel], http_port: int | None = None, *, scope: str | None = None
                     ) -> dict[str, ServedEndpoint]:
    """``deploy``, each app also at its route on Serve's HTTP proxy (started on 127.0.0.1,
    ``http_port``, default Serve's 8000, unless Serve runs), waiting until all are running."""
    return _deploy(specs, True, scope, over_http=True, http_port=http_port)


def _deploy(specs: Sequence[ServedModel], wait: bool, scope: str | None, *, over_http: bool,
            http_port: int | None = None) -> dict[str, ServedEndpoint]:
    if not specs:
        return {}
    # the largest GPU groups first: replicas are placed in the order the apps are submitted, and a
    # TP8 group needs a whole free node, which a TP4 one placed before it could take half of (a
    # resumed run's left-over model app holding half of another node, say)
    specs = sorted(specs, key=_gpus_per_replica, reverse=True)
    names = [app_name_for(s.id, scope) for s in specs]
    clashes = sorted({n for n in names if names.count(n) > 1})
    if clashes:
        raise ValueError(f"model ids map to the same Serve app name(s) {clashes}; rename the models")
    port = start_serve(http_port, over_http=over_http)
    targets = [serve.RunTarget(target=build_application(s, over_http), name=n,
                               route_prefix=None if port is None else f"/{n}")
               for s, n in zip(specs, names)]
    try:
        handles = serve.run_many(targets, wait_for_applications_running=False)
        endpoints = {s.id: ServedEndpoint(model_id=s.id, app_name=n, deployment_name=h.deployment_name,
                                          base_url=None if port is None else f"http://{_HOST}:{port}/{n}/v1")
                     for s, n, h in zip(specs, names, handles)}
        if wait:
            _wait_running(specs, endpoints)
    except BaseException:
        _delete_apps(names)
        raise
    return endpoints


def _gpus_per_replica(spec: ServedModel) -> float:
    resource, units = placement(spec)
    return 0.0 if resource == "CPU" else units


def _wait_running(specs: Sequence[ServedModel], endpoints: dict[str, ServedEndpoint]) -> None:
    """Until every app runs; a RuntimeError naming the model when one fails to deploy or is not
    running within its ``deploy_timeout_s`` (a replica pending for GPUs that never come, say)."""
    deadline = {s.id: time.monotonic() + s.deploy_timeout_s for s in specs}
    timeout = {s.id: s.deploy_timeout_s for s in specs}
    pending = set(deadline)
    while pending:
        for model, (status, message) in states([endpoints[m] for m in pending]).items():
            if status == "RUNNING":
                pending.discard(model)
            elif status in ("DEPLOY_FAILED", "UNHEALTHY", "GONE"):
                raise RuntimeError(f"model '{model}': deployment {status}{f': {message}' if message else ''}")
            elif time.monotonic() > deadline[model]:
                raise RuntimeError(f"model '{model}': deployment not running within {timeout[model]:g} s "
                                   f"(serve.deploy_timeout_s){f': {message}' if message else ''}")
        if pending:
            time.sleep(_POLL_S)


def shutdown(endpoints: Mapping[str, ServedEndpoint] | Iterable[ServedEndpoint], *, wait: bool = True) -> None:
    """Delete the apps of these endpoints (what ``deploy`` returned); Serve itself keeps running
    for any other apps, and ``serve.shutdown()`` stops it. Without ``wait``, ``states`` tells when
    an app is gone (its replicas have given their resources back)."""
    values = endpoints.values() if isinstance(endpoints, Mapping) else endpoints
    _delete_apps([e.app_name for e in values], wait=wait)


def states(endpoints: Iterable[ServedEndpoint]) -> dict[str, tuple[str, str]]:
    """Model id -> (Serve's application status, its message and its deployments'): RUNNING,
    DEPLOYING, DEPLOY_FAILED, DELETING, ..., or GONE once the app no longer exists."""
    apps = _app_statuses()
    out = {}
    for e in endpoints:
        app = apps.get(e.app_name)
        if app is None:
            out[e.model_id] = ("GONE", "")
            continue
        messages = [app.app_status.message] + [f"{d.name}: {d.message}" for d in app.deployment_statuses if d.message]
        out[e.model_id] = (str(app.app_status.status.value), "; ".join(m for m in messages if m))
    return out


def _app_statuses() -> dict[str, Any]:
    """App name -> its ``StatusOverview`` (the app's status and its deployments'), as the Serve
    controller sends them. ``serve.status()`` reports the same, but first rebuilds every
    deployment's full config, pickling its request router class: 10 ms of CPU per deployment in a
    driver that has imported torch, measured here, and the schedule reads statuses four times a
    second while a model deploys or is released; these take 0.6 ms for three apps."""
    client = _get_global_client(raise_if_no_controller_running=False)
    return {} if client is None else {s.name: s for s in client.list_serve_statuses()}


def start_serve(http_port: int | None = None, *, over_http: bool = False) -> int | None:
    """Start Serve unless it runs; its HTTP port. Without ``over_http`` it starts with no proxy
    (and None is returned), else with one on 127.0.0.1 (``http_port``, default Serve's 8000).
    A run starts it before its pipeline, so that the controller's start does not race the
    pipeline's actors for the cores."""
    http_options = {"host": _HOST, **({"port": http_port} if http_port is not None else {})}
    for attempt in range(3):  # a proxy that misses its start deadline on a loaded node is killed
        if _serve_running():
            break
        try:
            serve.start(proxy_location=None if over_http else "Disabled", http_options=http_options)
        except ray.exceptions.RayActorError as err:
            if attempt == 2:
                raise
            logger.warning("starting Serve: %s; trying again", str(err).splitlines()[0])
            time.sleep(5.0)
    quiet_ray()  # Serve's logger gets a terminal handler when it starts
    if not over_http:
        return None
    host, port = _http_address()
    if host != _HOST:
        logger.warning("Serve was already running, listening on %s rather than %s only", host, _HOST)
    if http_port is not None and port != http_port:
        logger.warning("Serve was already running with HTTP port %s; using it instead of %s", port, http_port)
    return port


def _serve_running() -> bool:
    try:
        _get_global_client()
    except Exception:  # noqa: BLE001 - Serve raises its own exception types when none runs
        return False
    return True


def _http_address() -> tuple[str, int]:
    """Where Serve's proxies really listen: a Serve that was already running keeps its options,
    which cannot change while it runs (one a run started has no proxy)."""
    client = _get_global_client()
    config = client.http_config
    if ray.get(client._controller.get_proxy_location.remote()) == ProxyLocation.Disabled:
        raise HalluscopeError("Serve already runs on this Ray cluster without HTTP proxies (a run started it: "
                              "runs call their models by handle); stop it with `serve shutdown` once no run "
                              "uses it, and serve again")
    return str(config.host), int(config.port)


def remove(model_ids: Iterable[str], scope: str | None = None) -> list[str]:
    """Delete the apps of these model ids (under ``scope``) where they run, e.g. those a killed
    driver of the run left behind on a long-lived cluster; returns the app names deleted."""
    return _delete_apps([app_name_for(m, scope) for m in model_ids])


def _delete_apps(names: Iterable[str], wait: bool = True) -> list[str]:
    """Delete in one request and wait once: ``serve.delete`` waits for each app in turn."""
    existing = set(_app_statuses())
    doomed = [n for n in names if n in existing]
    if doomed:
        _get_global_client().delete_apps(doomed, blocking=wait)
    return doomed
