"""Shared services' time, charged to the runs that used it.

A shared service (``costs.shared_services``: the RayService ``halluscope-serve`` that serves the
judge and extractor to every run) is billed by the hour whether one run calls it or ten. The
rule (docs/operations.md, "What runs, and what it costs"):

    a run pays  usd_per_hour / 3600 * integral over its usage intervals of dt / n(t)

where a usage interval is the run's pipeline time (from the start of its pipeline to its end,
per attempt) and n(t) is the number of runs whose usage intervals of the same service cover the
moment t, the run itself included. A run alone pays every hour it used the service; two runs
that overlap each pay half of the overlap. Hours in which no run used the service are charged
to no run.

Each run records its intervals as ``<storage root>/_shared/services/<service>/<run_id>.json``
(``{"service", "run_id", "intervals": [[start, end], ...]}``, Unix seconds; ``end`` null while
the run is in flight), at the start of its pipeline and again at its end, so a run that
aggregates while another is still running sees that one's open interval and splits with it.
An interval never closed (its attempt died) ends where the same run's next attempt starts, and
counts for at most ``MAX_OPEN_S`` after its start.

A record is read back only as what it claims to be: the run it bills is the one its file is named
after (the ``run_id`` and ``service`` inside must agree), that run exists under the storage root
(its ``manifest.json``), and every interval is a pair of finite times inside that run's lifetime
(from its manifest's ``created_at``, a minute of slack either side, to its ``finished_at``, or now
while it runs). On a local root the file must also be a regular file of this user that no one
else may write (``storage.fs.read_private``). Anything else is skipped and counted: a planted
record can neither bill a run for time it did not live nor cut another run's share.

With ``costs.usage_key_env`` every record carries an HMAC-SHA256 of its service, run and
intervals under that key, and a record whose signature does not verify is skipped too: on shared
storage anyone who can write the bucket can write a run folder and a manifest as well, and only
the key, which the runs' Secret holds, tells a run's record from a made-up one.

Calls to a model a shared service serves are then not priced by tokens: the ledger gives those
rows 0 and the service's row carries the run's share (``ledger(..., extra_rows=service_rows(...))``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence

from halluscope.config.schema import CostSpec, ModelSpec
from halluscope.cost.ledger import NO_PRICE_TABLE
from halluscope.cost.prices import PriceTable
from halluscope.errors import ConfigError
from halluscope.storage.fs import Location, UntrustedPath, read_private
from halluscope.storage.names import check_run_id, run_id_problem

SERVICES = "_shared/services"  # under the storage root; a run id cannot start with "_"
# an interval whose run never recorded its end counts this long at most: the RayJob's
# activeDeadlineSeconds (k8s/base/rayjob.yaml) stops an attempt after 24 hours
MAX_OPEN_S = 86400.0
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SLACK_S = 60.0  # clocks of the pods that write a run's records and its manifest may differ this much

Service = CostSpec.SharedService
Span = tuple[float, float | None]  # a run's time with the service: start, end (None: still going)


def usage_location(root: Location, service: str) -> Location:
    """The folder of a service's usage records under the storage root."""
    if not _NAME.fullmatch(service):
        raise ConfigError(f"shared service name {service!r} is not allowed: use A-Z a-z 0-9 . _ -")
    return root.child(*SERVICES.split("/"), service)


def signature(key: bytes, service: str, run_id: str, intervals: Sequence[Sequence[float | None]]) -> str:
    """The HMAC-SHA256 a record carries: its service, run and intervals under the runs' key."""
    body = json.dumps({"service": service, "run_id": run_id, "intervals": [list(iv) for iv in intervals]},
                      sort_keys=True)
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def _signed(doc: dict | None, key: bytes | None) -> dict | None:
    """``doc`` if no key is configured or its signature verifies, else None."""
    if doc is None or key is None:
        return doc
    want = signature(key, str(doc.get("service")), str(doc.get("run_id")), doc.get("intervals") or [])
    return doc if hmac.compare_digest(str(doc.get("signature", "")), want) else None


def record_usage(root: Location, service: str, run_id: str, start: float, end: float | None = None,
                 key: bytes | None = None) -> None:
    """Record that run ``run_id`` used ``service`` from ``start`` to ``end`` (Unix seconds).

    ``end`` None: the run is using it now (call at the start of the pipeline); call again with the
    same ``start`` and the end once the pipeline is over. An interval of the run's earlier attempt
    left open ends at ``start``."""
    if end is not None and end < start:
        raise ValueError(f"usage of {service!r} by {run_id!r} ends ({end}) before it starts ({start})")
    loc = usage_location(root, service).child(f"{check_run_id(run_id)}.json")
    kept: list[Span] = []
    for s, e in _intervals(_signed(_read(loc), key)):
        if s == start:
            continue  # this attempt's interval, recorded again below
        kept.append((s, start if e is None and s < start else e))
    kept.append((start, end))
    intervals = [list(iv) for iv in sorted(kept, key=lambda iv: iv[0])]
    doc: dict = {"service": service, "run_id": run_id, "intervals": intervals}
    if key is not None:
        doc["signature"] = signature(key, service, run_id, intervals)
    loc.write_bytes_atomic(json.dumps(doc).encode())


def record_run_usage(root: Location, shared_services: Sequence[Service], models: Sequence[ModelSpec],
                     run_id: str, start: float, end: float | None = None, key: bytes | None = None) -> list[str]:
    """``record_usage`` for each shared service that serves one of the run's models; their names."""
    names = [s.name for s in services_of(shared_services, models)]
    for name in names:
        record_usage(root, name, run_id, start, end, key)
    return names


def services_of(shared_services: Sequence[Service], models: Sequence[ModelSpec]) -> list[Service]:
    """The shared services that serve at least one of ``models``."""
    ids = {m.id for m in models}
    return [s for s in shared_services if ids.intersection(s.models)]


def check_services(shared_services: Sequence[Service], models: Sequence[ModelSpec]) -> None:
    """ConfigError when a shared service names a model the run does not have, or one that is not
    reached over HTTP (``backend: openai``): call before the run starts."""
    specs = {m.id: m for m in models}
    problems = []
    for s in shared_services:
        for m in s.models:
            if m not in specs:
                problems.append(f"'{s.name}' serves '{m}', which is not a model of this run")
            elif specs[m].billing != "tokens":
                problems.append(f"'{s.name}' serves '{m}', whose backend ({specs[m].backend}) is not an API billed "
                                "per token")
    if problems:
        raise ConfigError("costs.shared_services: " + "; ".join(problems))


def usage(root: Location, service: str, now: float | None = None,
          key: bytes | None = None) -> tuple[dict[str, list[Span]], int]:
    """Every run's recorded intervals of ``service``, and the number of records skipped (unreadable,
    unsigned under ``key``, or not what they claim: see the module's docstring)."""
    loc = usage_location(root, service)
    now = time.time() if now is None else now
    runs: dict[str, list[Span]] = {}
    bad = 0
    for name in loc.list_names():
        if not name.endswith(".json"):
            continue
        run_id = name[:-len(".json")]
        try:
            doc = _signed(json.loads(read_private(loc, name)), key)
            if doc is None:
                raise ValueError("carries no valid signature under costs.usage_key_env's key")
            if run_id_problem(run_id) or doc.get("run_id") != run_id or doc.get("service") != service:
                raise ValueError("names another run or service than its file")
            intervals = _intervals(doc)
            if not _lived(root, run_id, intervals, now):
                raise ValueError("lies outside its run's lifetime, or its run does not exist")
            runs[run_id] = intervals
        except (ValueError, TypeError, AttributeError, KeyError, OSError, UntrustedPath):
            bad += 1
    return runs, bad


def _lived(root: Location, run_id: str, intervals: list[Span], now: float) -> bool:
    """Whether every interval is finite, ordered and inside the run's lifetime (its manifest)."""
    try:
        manifest = json.loads(root.child(run_id, "manifest.json").read_bytes())
        born = dt.datetime.fromisoformat(manifest["created_at"]).timestamp() - _SLACK_S
        ended = manifest.get("finished_at")
        died = (dt.datetime.fromisoformat(ended).timestamp() if ended else now) + _SLACK_S
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return all(math.isfinite(s) and born <= s <= died
               and (e is None or (math.isfinite(e) and s <= e <= died)) for s, e in intervals)


def charged_seconds(own: Iterable[Span], others: Iterable[Iterable[Span]], now: float) -> float:
    """The integral over ``own`` of dt / n(t), n(t) = 1 + the number of ``others`` (one interval
    list per run) that cover t. Open intervals end at ``now``, at most MAX_OPEN_S after they begin."""
    mine = _union(own, now)
    theirs = [_union(o, now) for o in others]
    total = 0.0
    for a, b in mine:
        cuts = sorted({a, b} | {p for iv in theirs for s, e in iv for p in (s, e) if a < p < b})
        for x, y in zip(cuts, cuts[1:]):
            mid = (x + y) / 2
            total += (y - x) / (1 + sum(any(s <= mid < e for s, e in iv) for iv in theirs))
    return total


def service_gpus(service: Service, prices: PriceTable | None) -> float | None:
    """The GPUs the service holds: its ``gpus``, or its nodes' by the price table; None when unknown."""
    if service.gpus is not None:
        return float(service.gpus)
    per_node = prices.gpus_per_node(service.resource) if prices is not None and service.resource else None
    return None if service.nodes is None or per_node is None else float(service.nodes * per_node)


def service_rate(service: Service, prices: PriceTable | None) -> tuple[float | None, str | None]:
    """The service's dollars per hour, or None and why."""
    if service.usd_per_hour is not None:
        return service.usd_per_hour, None
    resource = service.resource
    assert resource is not None, "checked by the config: nodes and gpus come with a resource"
    if prices is None:
        return None, NO_PRICE_TABLE
    gpus = service_gpus(service, prices)
    if gpus is None:
        return None, f"the price table gives no gpus_per_node for '{resource}' (accelerators)"
    rate = prices.nodes_usd(resource, gpus, 3600.0)
    return rate, None if rate is not None else f"no price for resource '{resource}' in the price table"


def service_rows(models: Sequence[ModelSpec], shared_services: Sequence[Service], root: Location, run_id: str,
                 start: float | None, end: float | None, prices: PriceTable | None, now: float | None = None,
                 busy_s: Mapping[str, float] | None = None, key: bytes | None = None) -> list[dict]:
    """The run's ledger rows for the shared services it used (task "*", role "service", model =
    the service's name, resource_seconds = the run's share of the service's hours, in seconds),
    the first with ``covers``, the run's models it serves, for ``ledger(extra_rows=)``.

    A service in ``busy_s`` (seconds its engines worked for the run: its calls' tokens at their
    rates, estimated) gets two rows, as the plan has: stage "shared" for that much of the share
    and "idle" for the rest; any other one row, stage "shared", for the whole share.

    The run's intervals are those recorded for it plus [start, end] (this attempt's pipeline, when
    given). A service the run has no interval of gets no row (and covers nothing: calls to its
    models stay priced, or unpriced, by tokens)."""
    now = time.time() if now is None else now
    rows = []
    for service in services_of(shared_services, models):
        runs, bad = usage(root, service.name, now, key)
        own = [iv for iv in runs.pop(run_id, []) if start is None or iv[0] != start]
        if start is not None and end is not None:
            own.append((start, end))
        if not own:
            continue
        share = charged_seconds(own, runs.values(), now)
        rate, why = service_rate(service, prices)
        mine = _union(own, now)
        used = sum(e - s for s, e in mine)
        sharing = sum(_overlap(mine, _union(o, now)) for o in runs.values())
        basis = (f"{share:,.0f} s charged of {used:,.0f} s in use, shared with {sharing} other run(s)"
                 + (f" at ${rate:,.2f}/h" if rate is not None else "")
                 + (f"; {bad} usage record(s) skipped: unreadable, unsigned, or not what they claim" if bad else ""))
        busy = None if busy_s is None or service.name not in busy_s else min(busy_s[service.name], share)
        parts = [("shared", share, basis)] if busy is None else [
            ("shared", busy, f"its engines busy with the run's calls (estimated: their tokens at the engines' "
                             f"rates) of {basis}"),
            ("idle", share - busy, f"held idle for the run: the rest of {basis}")]
        for k, (stage, seconds, note) in enumerate(parts):
            rows.append({"model": service.name, "role": "service", "task": "*", "stage": stage, "calls": 0,
                         "cached_calls": 0, "failed_calls": 0, "input_tokens": 0, "output_tokens": 0,
                         "resource": service.resource, "resource_seconds": seconds,
                         "usd": None if rate is None else rate * seconds / 3600,
                         "note": note if why is None else f"{why}; {note}",
                         **({"covers": [m.id for m in models if m.id in service.models]} if k == 0 else {})})
    return rows


def _read(loc: Location) -> dict | None:
    try:
        doc = json.loads(loc.read_bytes())
    except FileNotFoundError:
        return None
    return doc if isinstance(doc, dict) else None


def _intervals(doc: dict | None) -> list[Span]:
    if doc is None:
        return []
    return [(float(s), None if e is None else float(e)) for s, e in doc.get("intervals", [])]


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> bool:
    return any(s < f and r < e for s, e in a for r, f in b)


def _union(intervals: Iterable[Span], now: float) -> list[tuple[float, float]]:
    """Closed, sorted, non-overlapping intervals (an open one ends at ``now``, MAX_OPEN_S at most)."""
    closed = sorted((s, min(now, s + MAX_OPEN_S) if e is None else e) for s, e in intervals)
    out: list[tuple[float, float]] = []
    for s, e in closed:
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out
