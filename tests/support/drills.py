"""Fault drills against a Ray head: find a run's processes, kill them mid-batch, resubmit a driver,
and compare the tables of a faulty run with a clean one. Shared by tests/integration/test_faults.py
and the scale benchmark (bench/scale.py), which drills a 140k-generation run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from halluscope.storage.run import RunStore

REPO = Path(__file__).resolve().parents[2]
KEYS = {"generations": "gen_id", "atoms": "atom_id", "verdicts": "atom_id", "scores": "gen_id"}
# what differs between two runs of the same answers: the run, and how the calls went
RUN_SPECIFIC = ("run_id", "latency_s", "attempts", "cached")


def comparable_tables(store: RunStore) -> dict[str, pa.Table]:
    """Every committed row of the id-keyed tables, sorted by id, without the run-specific columns."""
    out = {}
    for table, key in KEYS.items():
        t = store.read_table(table)
        t = t.drop_columns([c for c in RUN_SPECIFIC if c in t.column_names])
        out[table] = t.sort_by(key).combine_chunks()
    return out


def id_problems(tables: dict[str, pa.Table], generations: int) -> list[str]:
    """What breaks "every id exactly once": duplicates, and rows missing from a table."""
    problems = []
    for table, key in KEYS.items():
        ids = tables[table].column(key)
        if (dup := len(ids) - len(ids.unique())) > 0:
            problems.append(f"{table}: {dup} duplicate {key}s")
    if not len(tables["generations"]) == len(tables["scores"]) == generations:
        problems.append(f"{len(tables['generations'])} generations and {len(tables['scores'])} scores, "
                        f"not {generations}")
    atoms = pc.sum(tables["scores"].column("n_atoms")).as_py() or 0
    if not len(tables["atoms"]) == len(tables["verdicts"]) == atoms:
        problems.append(f"{len(tables['atoms'])} atoms and {len(tables['verdicts'])} verdicts, not {atoms}")
    return problems


def table_differences(got: dict[str, pa.Table], want: dict[str, pa.Table]) -> list[str]:
    """The tables whose rows differ (row counts, or the first differing column)."""
    out = []
    for table in KEYS:
        a, b = got[table], want[table]
        if a.equals(b):
            continue
        if a.num_rows != b.num_rows or a.column_names != b.column_names:
            out.append(f"{table}: {a.num_rows} rows {a.column_names} vs {b.num_rows} rows {b.column_names}")
        else:
            col = next(c for c in a.column_names if not a.column(c).equals(b.column(c)))
            out.append(f"{table}: column {col} differs")
    return out


# --- finding a run's processes -------------------------------------------------------------------

def actors(dashboard: str, class_name: str, alive: bool = True) -> list:
    """Actors whose class name ends with ``class_name`` on the head behind ``dashboard`` (alive
    ones by default)."""
    from ray.util.state import list_actors

    filters = [("state", "=", "ALIVE")] if alive else []
    return [a for a in list_actors(address=dashboard, filters=filters, detail=True, limit=10_000,
                                   raise_on_missing_output=False) if a.class_name.endswith(class_name)]


def stage_class(stage: str) -> str:
    """How the class of a Ray Data stage's actors (``Evaluate``, ``Generate``) ends: Ray Data names
    it ``MapWorker(MapBatches(Evaluate))``, or ``MapWorker(MapBatches(expand_unit)->MapBatches(Evaluate))``
    when it fuses the stage before into the actors."""
    return f"MapBatches({stage}))"


def wait_until_gone(dashboard: str, class_names: list[str], why: str, timeout_s: float = 60) -> None:
    deadline = time.time() + timeout_s
    while any(actors(dashboard, c) for c in class_names):
        if time.time() > deadline:
            raise AssertionError(f"{class_names} still alive {timeout_s} s after {why}")
        time.sleep(0.2)


def _worker_title(pid: int, head_address: str) -> bytes:
    """The title of a Ray worker process started by this head's raylet (never another cluster's
    on this machine), b"" for any other process: ``ray::<actor>.<method>`` while an actor runs a
    method, ``ray::<function>`` while a task runs."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        if not title.startswith(b"ray::"):
            return b""
        ppid = int(next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                        if line.startswith("PPid:")).split()[1])
        parent = Path(f"/proc/{ppid}/cmdline").read_bytes()
    except (OSError, StopIteration, ValueError):
        return b""
    # the head may advertise another address of this machine than 127.0.0.1: its port identifies it
    port = head_address.rsplit(":", 1)[1]
    ours = any(a.startswith(b"--gcs-address=") and a.endswith(f":{port}".encode()) for a in parent.split(b"\0"))
    return title if ours else b""


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def kill_busy_worker(head: dict[str, str], stage: str, driver: subprocess.Popen,
                     armed: Callable[[], bool] = lambda: True, timeout_s: float = 300) -> int:
    """SIGKILL the worker of an actor of the stage running a batch (Ray Data's map workers run it in
    ``submit``), the first moment one does once ``armed()`` holds; returns its pid. The workers
    are found by their titles every 20 ms, not through the dashboard's actor list, which takes
    seconds on a loaded machine: a run's last pass of batches took less, and was over before the
    drill saw its actors."""
    deadline = time.time() + timeout_s
    busy = f"{stage_class(stage)}.submit".encode()
    ready = False
    while time.time() < deadline and driver.poll() is None:
        ready = ready or armed()
        for pid in _pids() if ready else ():
            if _worker_title(pid, head["address"]).endswith(busy):
                os.kill(pid, signal.SIGKILL)
                return pid
        time.sleep(0.02)
    raise AssertionError(f"no busy {stage} worker of this run to kill (driver exit code {driver.poll()})")


def kill_running_task(head: dict[str, str], function: str, driver: subprocess.Popen, timeout_s: float = 300) -> int:
    """SIGKILL the worker of this head that is running the remote function ``function``; returns its pid."""
    deadline = time.time() + timeout_s
    title = f"ray::{function}".encode()
    while time.time() < deadline and driver.poll() is None:
        for pid in _pids():
            if _worker_title(pid, head["address"]) == title:
                os.kill(pid, signal.SIGKILL)
                return pid
        time.sleep(0.02)
    raise AssertionError(f"no {function} task of this run running to kill (driver exit code {driver.poll()})")


def restarts(dashboard: str, stages: tuple[str, ...] = ("Generate", "Evaluate")) -> dict[str, int]:
    """How often each actor of the stages was restarted, by actor id."""
    return {a.actor_id: a.num_restarts for s in stages for a in actors(dashboard, stage_class(s), alive=False)}


class Driver:
    """`halluscope run` in its own process group, as `ray job submit` would start it."""

    def __init__(self, cfg_path: Path, run_id: str, log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "halluscope.cli", "run", str(cfg_path),
                                          "--run-id", run_id, "--quiet"], cwd=REPO, env=os.environ.copy(),
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        """SIGKILL the driver and its group: no cleanup runs, as when a pod is lost."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def wait_for_commits(self, store: RunStore, at_least: int, timeout_s: float = 300, poll_s: float = 0.05) -> int:
        """The number of committed batches once there are ``at_least``. A driver's first commit
        follows its Ray connection, plan, Serve apps and actor start-ups: minutes on a loaded
        2-core machine."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            n = len(store.committed_keys())
            if n >= at_least:
                return n
            if self.proc.poll() is not None:
                raise AssertionError(f"the driver ended before {at_least} commits:\n{self.tail()}")
            time.sleep(poll_s)
        raise AssertionError(f"fewer than {at_least} commits after {timeout_s} s")
