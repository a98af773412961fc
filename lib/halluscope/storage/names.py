"""Which run ids, model ids and storage roots are allowed.

A run id is a folder name directly under the storage root and a model id names the folder of its
call cache, so either could otherwise reach outside its place (``..``, ``/``) or into a shared one
(``_cache``, ``testsets``). Both are checked where they enter (the config schema, the CLI) and where
they become paths (``RunStore``)."""

from __future__ import annotations

import re
from collections.abc import Callable

from halluscope.errors import ConfigError

MAX_ID_CHARS = 128
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# a model id may name a hub model ("meta-llama/Llama-3.1-8B-Instruct"): segments joined by "/"
_MODEL_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+ -]*")
# folders under the storage root that runs share (a run id cannot start with "_")
CALL_CACHE = "_cache/calls"
INDEX_CACHE = "_cache/indexes"
TESTSETS = "testsets"
SUBMITTED_CONFIGS = "_configs"  # configs `halluscope submit` uploaded, named by their sha256
RESERVED = frozenset({TESTSETS})
ROOT_SCHEMES = ("file://", "s3://")
RUN_ID_RULE = (f"1-{MAX_ID_CHARS} characters of A-Z a-z 0-9 . _ -, starting with a letter or digit, "
               f"not {', '.join(sorted(RESERVED))}")


def run_id_problem(value: str) -> str | None:
    """Why ``value`` cannot be a run id, or None when it can."""
    if len(value) > MAX_ID_CHARS:
        return f"run id is {len(value)} characters long, at most {MAX_ID_CHARS} are allowed"
    if not _RUN_ID.fullmatch(value) or value in RESERVED:
        return f"run id {value!r} is not allowed: use {RUN_ID_RULE}"
    return None


def checked(value: str, problem: Callable[[str], str | None], error: type[Exception] = ConfigError) -> str:
    """``value`` itself, or ``error`` saying what ``problem`` finds wrong with it."""
    why = problem(value)
    if why:
        raise error(why)
    return value


def check_run_id(value: str) -> str:
    return checked(value, run_id_problem)


def model_id_problem(value: str) -> str | None:
    """Why ``value`` cannot be a model id, or None when it can."""
    if len(value) > MAX_ID_CHARS:
        return f"model id is {len(value)} characters long, at most {MAX_ID_CHARS} are allowed"
    if not all(_MODEL_SEGMENT.fullmatch(s) and s == s.strip() for s in value.split("/")):
        return (f"model id {value!r} is not allowed: use letters, digits and . _ - : @ + or space, in "
                "parts joined by /, each starting with a letter or digit")
    return None


def root_problem(root: str) -> str | None:
    """Why ``root`` cannot be a storage root (only local paths and S3 are written to)."""
    if "://" in root and not root.startswith(ROOT_SCHEMES):
        return f"storage root {root!r} is not supported: use a local path, file://... or s3://..."
    return None


def shared_url(root: str, folder: str) -> str:
    """The URL of a folder every run under the storage root ``root`` shares (CALL_CACHE, ...), so
    runs and test-set jobs find each other's caches."""
    return f"{root.rstrip('/')}/{folder}"
