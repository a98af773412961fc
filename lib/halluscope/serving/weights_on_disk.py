"""A ``ray.serve.llm`` node-initialization callback for weights already on the replica's disk.

Before its engine starts, each replica of Ray's LLM server runs a download task on every node of
its placement group (``initialize_node``): a Ray task, and so a worker process importing vLLM,
while the replica holds its GPUs. For a model source that is a folder on the node (what
``serving.weights`` converts a packaged file into, or a volume the image mounts) there is nothing
to download. ``serving.vllm.llm_config`` names this class, by its import path (only the replica imports
it), for a source that is an absolute path; every bundle of a replica is on its node
(STRICT_PACK), so the folder the replica sees is the one its engine workers load.
"""

from __future__ import annotations

from pathlib import Path

from ray.llm._internal.common.callbacks.base import CallbackBase  # LLMConfig.callback_config's base class


class WeightsOnDisk(CallbackBase):
    """Skips the download task when the model source is a folder on this node; any other source
    (a hub id, a cloud mirror, a folder this node lacks) is initialized as Ray does by default."""

    async def on_before_node_init(self) -> None:
        source = self.llm_config.model_loading_config.model_source
        self.ctx.run_init_node = not (isinstance(source, str) and Path(source).is_dir())
