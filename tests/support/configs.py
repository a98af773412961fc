"""Run configs as YAML text for the tests and the benchmarks to write out.

A config built in Python shares sub-dicts between its parts, which PyYAML's dumper writes as
anchors and aliases; halluscope's config reader refuses those (an alias bomb expands to gigabytes),
so every shared value is written out in full here."""

from __future__ import annotations

from typing import Any

import yaml


class ConfigDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def config_yaml(doc: Any) -> str:
    return yaml.dump(doc, Dumper=ConfigDumper)
