"""What `pip install examples/<name>` leaves behind that matters to halluscope: the package on the
path and a dist-info whose entry_points.txt names what it registers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CLI = str(Path(sys.executable).parent / "halluscope")


def install(site: Path, example: str, package: str, entry_points: str) -> None:
    """Copy ``examples/<example>/<package>`` into ``site`` with a dist-info carrying ``entry_points``."""
    shutil.copytree(EXAMPLES / example / package, site / package)
    info = site / f"{package}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(entry_points)


def env_with(site: Path) -> dict[str, str]:
    """The environment of a halluscope command that finds what ``install`` put in ``site``."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a Ray of its own sees the path
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def halluscope(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=300)


CAPITALS = ("capitals", "capitals_bench", "[halluscope.benchmarks]\ncapitals = capitals_bench:BENCHMARK\n")
CANNED = ("canned_provider", "canned_provider", "[halluscope.providers]\ncanned = canned_provider:KIND\n")


def run_capitals(env: dict[str, str], config: Path, run_id: str, runs: Path) -> tuple[Path, dict]:
    """``halluscope run CONFIG`` of a capitals config: the run's folder and its capitals record."""
    done = halluscope(env, "run", str(config), "--run-id", run_id, "--storage-root", f"file://{runs}", "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    # on Ray, its C++ lines (an "E" line for every actor pool) go to the log file, not the terminal
    assert "core_worker.cc" not in done.stderr, done.stderr[-3000:]
    run = runs / run_id
    (record,) = [r for r in json.loads((run / "metrics.json").read_text()) if r.get("benchmark") == "capitals"]
    return run, record
