"""Reading a config document: YAML without anchors or aliases, bounded in size, depth and string length."""

from __future__ import annotations

from typing import Any

import yaml

from halluscope.errors import ConfigError, clip

# What a config file may hold: a YAML alias bomb or a 100 MB value would otherwise be expanded,
# validated and echoed whole before anything could refuse it
MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_VALUE_CHARS = 4096  # of any string in a config, a key or a value
MAX_CONFIG_DEPTH = 32  # mappings and lists inside each other


def check_values(data: Any, prefix: str) -> None:
    """Every string of a config (keys too) at most MAX_VALUE_CHARS characters long, and mappings and
    lists at most MAX_CONFIG_DEPTH deep: a ConfigError naming the field otherwise."""
    todo: list[tuple[Any, tuple[str, ...]]] = [(data, ())]
    while todo:
        value, path = todo.pop()
        field = ".".join(path) or "(top level)"
        if len(path) > MAX_CONFIG_DEPTH:
            raise ConfigError(f"{prefix}: {clip(field)}: nested more than {MAX_CONFIG_DEPTH} levels deep")
        if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
            raise ConfigError(f"{prefix}: {clip(field)}: a string of {len(value):,} characters; at most "
                              f"{MAX_VALUE_CHARS:,} are allowed")
        if isinstance(value, dict):
            for k, v in value.items():
                if isinstance(k, str) and len(k) > MAX_VALUE_CHARS:
                    raise ConfigError(f"{prefix}: {clip(field)}: a key of {len(k):,} characters ({clip(k, 60)}); "
                                      f"at most {MAX_VALUE_CHARS:,} are allowed")
                todo.append((v, (*path, clip(k, 60))))
        elif isinstance(value, (list, tuple)):
            todo.extend((v, (*path, str(i))) for i, v in enumerate(value))


class _ConfigLoader(yaml.SafeLoader):
    """YAML's safe loader without anchors and aliases (``&a``, ``*a``, ``<<: *a``: a few lines of
    aliases expand to gigabytes), and with nesting bounded before the composer recurses into it."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Refused(event.start_mark, "YAML anchors and aliases (&name, *name) are not allowed in a "
                                             "config: write the value out where it is used")
        self._depth += 1
        try:
            if self._depth > MAX_CONFIG_DEPTH:
                raise _Refused(event.start_mark, f"nested more than {MAX_CONFIG_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        """A key given twice is refused: YAML would keep the last one silently."""
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise _Refused(key_node.start_mark, f"key {clip(str(key), 60)!r} is given twice in one mapping: "
                                                    "keep one")
            seen.add(key)
        return super().construct_mapping(node, deep)


class _Refused(yaml.YAMLError):
    def __init__(self, mark: Any, problem: str) -> None:
        super().__init__(problem)
        self.problem_mark, self.problem = mark, problem


def _yaml_problem(err: yaml.YAMLError) -> str:
    """A YAML error as one line: where, and what (PyYAML's text spans several, quoting the file)."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = " ".join(str(getattr(err, "problem", None) or getattr(err, "context", None) or err).split())
    return where + clip(what, 300)


def read_yaml(uri: str, what: str = "run config", storage_options: dict | None = None) -> Any:
    """A YAML document from a local path or any fsspec URL: at most MAX_CONFIG_BYTES, without
    anchors or aliases, strings at most MAX_VALUE_CHARS long; every refusal is one line."""
    return read_yaml_file(uri, what, storage_options)[0]


def read_yaml_file(uri: str, what: str = "run config", storage_options: dict | None = None) -> tuple[Any, bytes]:
    """``read_yaml``'s document and the file's bytes, read once: a run records their sha256, and
    ``submit`` uploads them under it."""
    import fsspec

    import halluscope.storage.fs  # noqa: F401 - its fsspec defaults bound every S3 request

    shown = clip(uri)
    if uri.split("://", 1)[0] in ("s3", "s3a"):
        # an endpoint that accepts and never answers held a read for 600 s and more (botocore's and
        # s3fs's retries stacked on a 120 s read timeout): ask it first, in seconds, once
        from halluscope.storage.fs import Location

        Location.from_url(uri.rsplit("/", 1)[0]).check_reachable(what)
    try:
        with fsspec.open(uri, "rb", **(storage_options or {})) as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{what} not found: {shown}") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {shown} is a folder; give the YAML file in it") from None
    except PermissionError:
        raise ConfigError(f"{what} {shown}: permission denied") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{what} {shown} is not a YAML text file (byte {err.start} is not UTF-8)") from None
    except (OSError, ValueError) as err:  # a name too long, a URL fsspec cannot open
        why = getattr(err, "strerror", None) or " ".join(str(err).split())
        raise ConfigError(f"{what} {shown} cannot be read: {clip(why, 300)}") from None
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{what} {shown} is larger than {MAX_CONFIG_BYTES // 2**20} MiB: a config is a few "
                          "kilobytes; put data in files it names")
    try:
        doc = yaml.load(text, Loader=_ConfigLoader)  # noqa: S506 - a SafeLoader
    except _Refused as err:  # valid YAML, refused all the same
        raise ConfigError(f"{what} {shown}: {_yaml_problem(err)}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{what} {shown} is not valid YAML: {_yaml_problem(err)}") from None
    except (ValueError, OverflowError) as err:  # an integer of thousands of digits
        raise ConfigError(f"{what} {shown} is not valid YAML: {clip(err, 300)}") from None
    check_values(doc, f"invalid {what} {shown}")
    return doc, data
