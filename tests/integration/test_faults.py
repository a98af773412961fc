"""Fault drills on a real Ray head: killed workers, a killed driver resubmitted under the same run
id, and an S3 API that fails transiently. Each faulty run must end with the tables of a clean one,
every generation and atom exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from halluscope.config import parse_config
from halluscope.pipeline.runner import run
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore
from tests.conftest import REPO, SHARED_DATA, free_port
from tests.support.flaky_s3 import FlakyS3Proxy

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")]

REPLAYED = ["gpt_4_0125_turbo", "llama_2_7b_chat", "redpajama_incite_7b_chat"]
TASKS = ["halogen/code", "halogen/rationalization_binary"]  # verified by programs, no judge model
LIMIT = 150
TOTAL = LIMIT * len(TASKS) * (len(REPLAYED) + 1)  # + the scripted model: 1200 generations
KEYS = {"generations": "gen_id", "atoms": "atom_id", "verdicts": "atom_id", "scores": "gen_id"}
# what differs between two runs of the same answers: the run, and how the calls went
RUN_SPECIFIC = ("run_id", "latency_s", "attempts", "cached")


def _config(root: str, serve_port: int) -> dict:
    """HALOGEN's recorded responses of three models plus a live scripted model that takes 0.2 s a
    prompt (so the run lasts long enough to be hit); small batches, so kills land between commits."""
    code = "```python\nimport numpy\nimport fakepkg_zz\n```"
    scripted = {"id": "scripted-slow", "backend": "scripted",
                "params": {"rules": [{"pattern": "Python", "response": code}], "default": "Yes, because it is so.",
                           "latency_s": 0.2, "serve": {"num_cpus": 0.25, "max_batch_prompts": 5}}}
    return {"storage": {"root": root}, "tasks": TASKS,
            "models": [{"id": m, "backend": "replay"} for m in REPLAYED] + [scripted],
            "limits": {"max_items_per_task": LIMIT}, "cache": {"enabled": False}, "costs": {"price_table": None},
            "serve_http_port": serve_port,
            "concurrency": {"batch_size": 10, "generate_batch_size": 10, "verify_actors": 2}}


def _rows(store: RunStore) -> dict[str, list[dict]]:
    """Every committed table, sorted by its id, without the run-specific columns."""
    out = {}
    for table, key in KEYS.items():
        t = store.read_table(table)
        t = t.drop_columns([c for c in RUN_SPECIFIC if c in t.column_names])
        out[table] = sorted(t.to_pylist(), key=lambda r: r[key])
    return out


def _assert_each_id_once(tables: dict[str, list[dict]]) -> None:
    for table, key in KEYS.items():
        ids = [r[key] for r in tables[table]]
        assert len(ids) == len(set(ids)), f"{table}: {len(ids) - len(set(ids))} duplicate {key}s"
    assert len(tables["generations"]) == len(tables["scores"]) == TOTAL
    assert len(tables["atoms"]) == len(tables["verdicts"]) == sum(r["n_atoms"] for r in tables["scores"])


@pytest.fixture(scope="module")
def uninterrupted(ray_head, tmp_path_factory) -> dict[str, list[dict]]:
    root = f"file://{tmp_path_factory.mktemp('clean')}"
    result = run(parse_config(_config(root, free_port())), run_id="clean", progress=False)
    assert result.processed == TOTAL
    tables = _rows(RunStore(Location.from_url(root), "clean"))
    _assert_each_id_once(tables)
    return tables


# --- finding this run's processes ----------------------------------------------------------------

def _actors(ray_head: dict, class_name: str, alive: bool = True) -> list:
    """Actors of a class on this test's Ray head (alive ones by default); only this session uses it."""
    from ray.util.state import list_actors

    filters = [("class_name", "=", class_name)] + ([("state", "=", "ALIVE")] if alive else [])
    return list_actors(address=ray_head["dashboard"], filters=filters, detail=True, limit=1000,
                       raise_on_missing_output=False)


def _stage_actors(ray_head: dict, stage: str, alive: bool = True) -> list:
    """The actors of a Ray Data stage (``Evaluate``, ``Generate``): Ray Data names their class so."""
    return _actors(ray_head, f"MapWorker(MapBatches({stage}))", alive)


def _wait_until_gone(ray_head: dict, class_names: list[str], why: str, timeout_s: float = 60) -> None:
    deadline = time.time() + timeout_s
    while any(_actors(ray_head, c) for c in class_names):
        assert time.time() < deadline, f"{class_names} still alive {timeout_s} s after {why}"
        time.sleep(0.2)


def _busy_worker_of(pid: int, ray_head: dict) -> bool:
    """A Ray worker process started by this head's raylet (never another cluster's on this
    machine) that is running a task: Ray titles it ``ray::<actor>.submit`` meanwhile."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        ppid = int(next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                        if line.startswith("PPid:")).split()[1])
        parent = Path(f"/proc/{ppid}/cmdline").read_bytes()
    except (OSError, StopIteration):
        return False
    # the head may advertise another address of this machine than 127.0.0.1: its port identifies it
    port = ray_head["address"].rsplit(":", 1)[1]
    return title.startswith(b"ray::") and title.endswith(b".submit") and any(
        a.startswith(b"--gcs-address=") and a.endswith(f":{port}".encode()) for a in parent.split(b"\0"))


def _kill_busy_worker(ray_head: dict, stage: str, driver: subprocess.Popen) -> str:
    """SIGKILL the process of an actor of the stage in the middle of a batch; returns the actor's id."""
    deadline = time.time() + 120
    while time.time() < deadline and driver.poll() is None:
        for actor in _stage_actors(ray_head, stage):
            if actor.pid and _busy_worker_of(actor.pid, ray_head):
                os.kill(actor.pid, signal.SIGKILL)
                return actor.actor_id
        time.sleep(0.05)
    raise AssertionError(f"no busy {stage} worker of this run to kill (driver exit code {driver.poll()})")


class _Driver:
    """`halluscope run` in its own process group, as `ray job submit` would start it; killed with
    its group when the test ends early."""

    def __init__(self, cfg_path: Path, run_id: str, log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "halluscope.cli", "run", str(cfg_path),
                                          "--run-id", run_id, "--quiet"], cwd=REPO, env=os.environ.copy(),
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def wait_for_commits(self, store: RunStore, at_least: int, timeout_s: float = 120) -> int:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            n = len(store.committed_keys())
            if n >= at_least:
                return n
            assert self.proc.poll() is None, f"the driver ended before {at_least} commits:\n{self.tail()}"
            time.sleep(0.05)
        raise AssertionError(f"fewer than {at_least} commits after {timeout_s} s")


@pytest.fixture()
def drivers():
    """The drivers a test starts; none outlives it."""
    started: list[_Driver] = []
    yield started
    for d in started:
        d.kill()


# --- the drills ----------------------------------------------------------------------------------

def test_killed_driver_resubmitted_and_killed_workers_equal_an_uninterrupted_run(ray_head, tmp_path, uninterrupted,
                                                                                 drivers):
    """One scenario for the issue's three process faults, to keep Ray start-ups few: a driver
    SIGKILLed after two commits, the same run id resubmitted, and during the resubmission one
    Generate and one Evaluate worker SIGKILLed while each is running a batch."""
    cfg_path = tmp_path / "run.yaml"
    cfg_path.write_text(yaml.safe_dump(_config(f"file://{tmp_path}", free_port())))
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "drill")

    def rows_committed() -> int:
        return store.read_table("scores", ["gen_id"]).num_rows

    # 1. the driver dies (SIGKILL, no cleanup) once two batches are committed
    drivers.append(first := _Driver(cfg_path, "drill", tmp_path / "first.log"))
    first.wait_for_commits(store, 2)
    first.kill()
    killed_at = len(store.committed_keys())
    assert 0 < rows_committed() < TOTAL
    # Ray ends the dead driver's actors within moments; the resubmission waits for that, because
    # one still writing would commit rows the new attempt also does (see the report)
    _wait_until_gone(ray_head, [f"MapWorker(MapBatches({s}))" for s in ("Generate", "Evaluate")], "the driver's kill")

    # 2. the same run id resubmitted; a worker of each actor pool is SIGKILLed in the middle of a batch
    drivers.append(second := _Driver(cfg_path, "drill", tmp_path / "second.log"))
    killed = [_kill_busy_worker(ray_head, "Generate", second.proc)]
    second.wait_for_commits(store, killed_at + 1)
    killed.append(_kill_busy_worker(ray_head, "Evaluate", second.proc))
    assert rows_committed() < TOTAL, "the kills came after the run's last batch"
    assert second.proc.wait(timeout=240) == 0, second.tail()

    # Ray restarted the killed actors and retried their batches (Ray Data's defaults for actor
    # pools: max_restarts=-1, max_task_retries=-1)
    restarts = {a.actor_id: a.num_restarts for stage in ("Generate", "Evaluate")
                for a in _stage_actors(ray_head, stage, alive=False)}
    assert all(restarts.get(a, 0) >= 1 for a in killed), restarts

    # the killed driver left its Serve app running (Serve apps outlive their driver); the
    # resubmission took it over and removed it when done
    _wait_until_gone(ray_head, ["ServeReplica:scripted-slow:scripted"], "the run", timeout_s=15)
    manifest = store.read_json("manifest.json")
    assert manifest["status"] == "complete"
    assert manifest["counts"]["done_before"] + manifest["counts"]["processed"] == TOTAL
    tables = _rows(store)
    _assert_each_id_once(tables)
    assert tables == uninterrupted


def test_transient_s3_failures_are_retried(ray_head, s3_endpoint, bucket, uninterrupted):
    """Every 4th PUT and every 7th GET/HEAD fail (503 SlowDown before the server sees them, 500
    InternalError after it did the work): the run's retries absorb them, and its tables are the
    clean run's rows for the same models and items."""
    from halluscope.sources import DataResolver
    from halluscope.tasks.registry import get_task

    task, limit = "halogen/code", 40
    with FlakyS3Proxy(s3_endpoint, every={"PUT": 4, "GET": 7, "HEAD": 7}) as proxy:
        cfg = parse_config({"storage": _s3_storage(bucket, proxy.url), "tasks": [task],
                            "limits": {"max_items_per_task": limit},
                            "models": [{"id": m, "backend": "replay"} for m in REPLAYED],
                            "concurrency": {"batch_size": 10}, "costs": {"price_table": None}})
        result = run(cfg, run_id="flaky", progress=False)
        store = RunStore(Location.from_url(cfg.storage.root, cfg.storage), "flaky")
        tables = _rows(store)
        manifest = store.read_json("manifest.json")
    assert proxy.injected_for("PUT") >= 2 and proxy.injected_for("GET") + proxy.injected_for("HEAD") > 0
    assert {code for code, _ in proxy.injected} == {"SlowDown", "InternalError"}
    assert result.processed == limit * len(REPLAYED) and manifest["status"] == "complete"
    first = {i.item_id for i in get_task(task).load_items(DataResolver(download=False)).items[:limit]}
    keep = {g["gen_id"] for g in uninterrupted["generations"]
            if g["task"] == task and g["model"] in REPLAYED and g["item_id"] in first}
    assert len(keep) == limit * len(REPLAYED)
    assert tables == {t: [r for r in rows if r["gen_id"] in keep] for t, rows in uninterrupted.items()}


def _s3_storage(bucket: str, endpoint_url: str) -> dict:
    return {"root": f"s3://{bucket}/runs", "endpoint_url": endpoint_url,
            "access_key_env": "AWS_ACCESS_KEY_ID", "secret_key_env": "AWS_SECRET_ACCESS_KEY"}


@pytest.mark.parametrize("retries, fails", [
    ({}, False),  # storage_options' botocore retries (8 attempts)
    ({"config_kwargs": {"retries": {"total_max_attempts": 1, "mode": "standard"}}}, True),  # botocore's off
])
def test_botocore_retries_are_what_absorbs_a_failed_write(s3_endpoint, bucket, retries, fails):
    """The control of the drill above, without Ray: every 2nd PUT fails. Writes 1-3 reach the
    server as PUTs 1, 2 (SlowDown) + 3 (retry), 4 (InternalError after the object was stored) + 5.
    s3fs retries SlowDown by itself but not InternalError, so without botocore's retries the
    third write fails although its object is there."""
    import fsspec

    from halluscope.config import StorageSpec
    from halluscope.storage.fs import storage_options

    with FlakyS3Proxy(s3_endpoint, every={"PUT": 2}) as proxy:
        opts = storage_options(StorageSpec.model_validate(_s3_storage(bucket, proxy.url))) | retries
        loc = Location(fsspec.filesystem("s3", skip_instance_cache=True, **opts), f"{bucket}/control")
        loc.child("a").write_bytes_atomic(b"first")
        loc.child("b").write_bytes_atomic(b"second")  # SlowDown: retried by s3fs itself if not by botocore
        if fails:
            with pytest.raises(OSError, match="injected transient fault"):
                loc.child("c").write_bytes_atomic(b"third")
        else:
            loc.child("c").write_bytes_atomic(b"third")
        assert [loc.child(n).read_bytes() for n in "abc"] == [b"first", b"second", b"third"]
    assert dict(proxy.injected) == {("SlowDown", "PUT"): 1, ("InternalError", "PUT"): 1}
    assert proxy.seen["PUT"] == (4 if fails else 5)
