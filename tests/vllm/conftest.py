"""A local Ray and a tiny random Llama for the vLLM tests; nothing is fetched from the network.

The environment is set at import, before any test imports ray or vllm: Ray's processes (and the
vLLM engines they start) inherit it from this process when ``ray.init`` starts them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.tiny_llama import build_tiny_llama

from halluscope.config.schema import SamplingSpec, ServeOptions, VLLMModel, VLLMParams

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["VLLM_NO_USAGE_STATS"] = "1"  # vLLM reports usage to its servers by default
os.environ["DO_NOT_TRACK"] = "1"
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's CPU default is far larger


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "vllm: needs vLLM (run in .venv-vllm: make test-vllm)")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_spec(tiny_model: Path) -> VLLMModel:
    """The tiny model as a run config names it, sized for a 2-core machine."""
    return VLLMModel(id="tiny-llama", backend="vllm", params=VLLMParams(
        model_source=str(tiny_model), max_model_len=256,
        # what a CPU engine needs: no CUDA graphs or torch.compile, and the weights' own float32
        engine_kwargs={"enforce_eager": True, "dtype": "float32"},
        sampling=SamplingSpec(max_tokens=16),
        serve=ServeOptions(max_ongoing_requests=8)))


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
