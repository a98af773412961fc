"""Servers on 127.0.0.1 for the tests and the benchmarks: moto's S3 API and a Ray head. Each is a
context manager that stops what it started, and nothing else on the machine."""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                  "AWS_DEFAULT_REGION": "us-east-1"}


def use_token_auth() -> None:
    """Ray's token authentication on, with a token made for this process and its children. Ray
    reads these settings when it is first imported: call this before anything imports ray."""
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def moto_s3() -> Iterator[str]:
    """moto's S3 server with dummy credentials in the environment; yields the endpoint URL."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    with _environ(S3_CREDENTIALS):
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            yield f"http://{host}:{port}"
        finally:
            server.stop()


def s3_storage(endpoint: str, root: str) -> dict:
    """A run config's ``storage`` on that S3 API, credentials read from the environment moto_s3 sets."""
    return {"root": root, "endpoint_url": endpoint,
            "access_key_env": "AWS_ACCESS_KEY_ID", "secret_key_env": "AWS_SECRET_ACCESS_KEY"}


def create_bucket(endpoint: str, name: str) -> str:
    import boto3

    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=name)
    return name


@contextmanager
def ray_head(num_cpus: int = 6, num_gpus: int = 16, object_store_bytes: int = 400_000_000) -> Iterator[dict[str, str]]:
    """A Ray head with the dashboard and job API, and RAY_ADDRESS pointing at it while it lives;
    yields its ``address``, ``dashboard`` URL and ``temp_dir``."""
    ray_bin = str(Path(sys.executable).parent / "ray")
    port, dash = free_port(), free_port()
    # a temp dir of its own (short: Ray's socket paths have a length limit), so the teardown stops
    # this head's processes and nobody else's (`ray stop` would stop every Ray on the machine)
    temp_dir = tempfile.mkdtemp(prefix="hsray-", dir="/tmp")
    try:
        subprocess.run([ray_bin, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                        f"--temp-dir={temp_dir}", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
                        "--include-dashboard=true",
                        # ports of its own: the vLLM suite's Ray, running beside, would also try 52365,
                        # 10001 and the worker range 10002-19999 (0 and 0: ports the OS hands out)
                        f"--dashboard-agent-listen-port={free_port()}", f"--ray-client-server-port={free_port()}",
                        "--min-worker-port=0", "--max-worker-port=0",
                        f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}",  # logical: a simulated GPU cluster
                        f"--object-store-memory={object_store_bytes}",
                        "--disable-usage-stats"],
                       check=True, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}, capture_output=True,
                       timeout=180)
        address = f"127.0.0.1:{port}"
        with _environ({"RAY_ADDRESS": address}):
            yield {"address": address, "dashboard": f"http://127.0.0.1:{dash}", "temp_dir": temp_dir}
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        # the Ray client server names neither the temp dir nor a parent that lives: `ray start`
        # exits once the head is up, and its children go to init
        kill_tree(temp_dir, f"--address={address}")
        shutil.rmtree(temp_dir, ignore_errors=True)


def kill_tree(*marks: str) -> None:
    """SIGKILL the head's processes and every process they started (``process_tree``): a dashboard
    agent that had started a job outlived its head by a minute, at a whole core (its driver thread
    polls the gone GCS in a loop)."""
    for pid in process_tree(*marks) - {os.getpid()}:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def listening_addresses(pids: set[int]) -> set[str]:
    """The IP addresses these processes' TCP sockets listen on, read from /proc."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:  # gone
            continue
        for fd in fds:
            try:
                link = os.readlink(fd)
            except OSError:  # closed since
                continue
            if link.startswith("socket:["):
                inodes.add(link[len("socket:["):-1])
    found: set[str] = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(local.split(":")[0])
            # the kernel prints each 32-bit word of the address in host (little-endian) order
            packed = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            ip = ipaddress.ip_address(packed)
            mapped = getattr(ip, "ipv4_mapped", None)
            found.add(str(mapped or ip))
    return found


def process_tree(*marks: str) -> set[int]:
    """The processes whose command line names one of ``marks`` (a head's temp dir, its GCS
    address) whole, and every process they started: the raylet's children retitle themselves
    (``ray::DashboardAgent``, workers), so a match on the command line misses them. Whole: not
    followed by a letter, digit or ``_``, so that ``127.0.0.1:1`` is not the start of another
    head's ``127.0.0.1:15432``, nor one temp dir the start of a longer one."""
    wanted = [re.compile(re.escape(mark.encode()) + rb"(?!\w)") for mark in marks]
    parents: dict[int, int] = {}
    roots: set[int] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        pid = int(proc.name)
        parents[pid] = int(stat[stat.rfind(")") + 2:].split()[1])
        if any(mark.search(cmdline) for mark in wanted):
            roots.add(pid)
    tree, frontier = set(roots), set(roots)
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - tree
        tree |= frontier
    return tree
