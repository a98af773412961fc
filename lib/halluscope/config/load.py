"""A run config from a mapping, a YAML file at a path or fsspec URL, or the embedded demo."""

from __future__ import annotations

import hashlib
import os
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from halluscope.config.checks import (
    check_benchmark_options,
    check_data_dir,
    check_knowledge_sources,
    check_moved_keys,
    check_recorded_steps,
    check_replay_paths,
    check_task_names,
    check_task_needs,
    moved_forward,
    validation_message,
)
from halluscope.config.reader import check_values, read_yaml_file
from halluscope.config.schema import ReplayModel, RunConfig
from halluscope.errors import ConfigError, clip
from halluscope.sources import url_scheme


def parse_config(data: Any, source: str = "<config>", *, stored: bool = False) -> RunConfig:
    """Validate a mapping as a RunConfig; task names are checked against the task registry.
    ``stored``: a config read back from a run's manifest, whose keys that moved since the run
    started are moved to their new place instead of refused."""
    source = clip(source)
    if not isinstance(data, dict):
        raise ConfigError(f"invalid run config {source}: expected a mapping at the top level")
    check_values(data, f"invalid run config {source}")
    data = moved_forward(data) if stored else data
    check_moved_keys(data, source)
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(validation_message(err, source)) from None
    check_replay_paths(cfg, source)
    check_recorded_steps(cfg, source)
    check_task_names(cfg.tasks, source)
    check_benchmark_options(cfg, source)
    check_knowledge_sources(cfg, source)
    check_task_needs(cfg, source)
    return cfg


def load_config(uri: str, storage_options: dict | None = None) -> RunConfig:
    """Load a YAML run config from a local path or any fsspec URL."""
    doc, data = read_yaml_file(uri, "run config", storage_options)
    cfg = _paths_from_config_folder(parse_config(doc, uri), uri)
    check_data_dir(cfg, uri)
    cfg.read_from(uri, hashlib.sha256(data).hexdigest())
    return cfg


def _paths_from_config_folder(cfg: RunConfig, uri: str) -> RunConfig:
    """Relative replay file paths and test-set folders are taken from a local config file's folder,
    not the working directory, so a config works wherever it is run from; the manifest records the
    absolute path."""
    if "://" in uri and not uri.startswith("file://"):
        return cfg
    folder = Path(uri.removeprefix("file://")).expanduser().absolute().parent

    def here(path: str) -> str:
        return path if url_scheme(path) or Path(path).expanduser().is_absolute() else os.path.normpath(folder / path)

    for m in cfg.models:
        if isinstance(m, ReplayModel) and m.params.path:
            m.params.path = here(m.params.path)
    for task, entry in cfg.testsets.items():
        cfg.testsets[task] = ({model: [here(u) for u in uris] for model, uris in entry.items()}
                              if isinstance(entry, dict) else [here(u) for u in entry])
    return cfg


def default_config() -> RunConfig:
    """The embedded demo: HALOGEN's recorded generations of 14 models on the program-verified tasks."""
    text = resources.files("halluscope").joinpath("configs/demo.yaml").read_text()
    return parse_config(yaml.safe_load(text), "halluscope/configs/demo.yaml (embedded default)")
