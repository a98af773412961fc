"""A local Ray and a real small model for the vLLM tests: SmolLM2-135M-Instruct, from the wheel
PyPI serves (the package registry, the one network these machines reach), converted once.

The environment is set at import, before any test imports ray or vllm: Ray's processes (and the
vLLM engines they start) inherit it from this process when ``ray.init`` starts them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest
from tests.support.smollm2 import vllm_params

from halluscope.config.schema import VLLMModel

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["VLLM_NO_USAGE_STATS"] = "1"  # vLLM reports usage to its servers by default
os.environ["DO_NOT_TRACK"] = "1"
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's CPU default is far larger
# A CPU engine's model runs in its engine-core process (the uni executor), not in a worker that
# process spawns and that imports vLLM again: the offline engine of bench/live_engine.py runs whole
# in its process, Ray Data's processor in one process, not two. Measured here: 44 CPU-s and 36 s
# less for those two tests. Ray Serve LLM's engines keep their worker process (Ray sets the mp
# executor for a CPU accelerator), and so does `make bench`, which does not set this.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
# vLLM's CPU default pins each engine's model to the first core and keeps the other for the rest; on
# 2 cores shared with the other suites' lane that holds every engine to core 0 while core 1 may be
# idle. Unpinned, the OS places it: test_vllm_run.py beside a busy loop took 120 s, not 134 s.
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "vllm: needs vLLM (run in .venv-vllm: make test-vllm)")


@pytest.fixture(scope="session")
def smollm2() -> VLLMModel:
    """The model as a run config names it: short greedy answers, sized for a 2-core machine."""
    return VLLMModel.model_validate({"id": "smollm2", "backend": "vllm", "params": vllm_params(24, 8)})


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """A Ray of this session on 127.0.0.1. 8 logical CPUs on 2 cores: Ray Data's LLM stages,
    Serve's ingress and each engine want a CPU apiece, and fewer deadlocks the processor."""
    import ray

    # a short temp dir of its own: Ray's socket paths have a length limit
    temp_dir = tempfile.mkdtemp(prefix="hsvllm-", dir="/tmp")
    ray.init(address="local", num_cpus=8, object_store_memory=500 * 2**20, include_dashboard=False,
             _node_ip_address="127.0.0.1", _temp_dir=temp_dir)
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
