"""The call cache reads back only parts it wrote: a planted, altered, linked or foreign file in
``<storage.root>/_cache/calls/<model>/`` is skipped with a warning naming it, counted, never fatal,
and its calls are made again (the fake backend answers, never the poisoned part)."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import fsspec
import pyarrow as pa
import pytest

from halluscope.config.schema import OpenAIModel
from halluscope.contract.completion import Completion
from halluscope.contract.task import Item
from halluscope.models.base import GenerationRequest
from halluscope.models.cache import GENERATION_TEMPLATE, CachedBackend, call_key
from halluscope.pipeline.estimate import _cached_items
from halluscope.records import CALL_CACHE
from halluscope.storage.fs import Location
from halluscope.storage.parquet import table_to_bytes

MODEL = "org/model-x"
FOLDER = "org__model-x"
SAMPLING = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 64, "stop": []}  # sampling_of(_spec())
PROMPTS = ["Who wrote Hamlet?", "What is the capital of Peru?"]
POISON = "POISONED answer"
NOBODY = 65534


class Fake:
    """A backend that answers every prompt with "real: <prompt>" and counts its calls."""

    model_id = MODEL

    def __init__(self) -> None:
        self.calls: list[str] = []

    def generate_batch(self, requests):
        self.calls.extend(r.prompt for r in requests)
        return [Completion(f"real: {r.prompt}", 3, 4, 0.5) for r in requests]


def _requests(prompts=PROMPTS):
    return [GenerationRequest("t", f"i{n}", p) for n, p in enumerate(prompts)]


def _cached(cache: Location, prompts=PROMPTS):
    """A new CachedBackend (a later run): its answers, the fake's calls, the backend."""
    fake = Fake()
    backend = CachedBackend(fake, cache, None, GENERATION_TEMPLATE, SAMPLING)
    return [c.text for c in backend.generate_batch(_requests(prompts))], fake.calls, backend


def _poisoned_bytes(prompts=PROMPTS) -> bytes:
    rows = [{"key": call_key(MODEL, None, GENERATION_TEMPLATE, p, SAMPLING), "text": POISON, "input_tokens": 1,
             "output_tokens": 1, "latency_s": 0.0} for p in prompts]
    return table_to_bytes(pa.Table.from_pylist(rows, schema=CALL_CACHE))


def _named(data: bytes) -> str:
    """The name the new code gives these bytes: only the check under test can reject the part."""
    return f"part-{hashlib.sha256(data).hexdigest()}.parquet"


@pytest.fixture()
def cache(tmp_path):
    """A local call cache under a storage root, with both prompts answered and written once."""
    root = Location.from_url(f"file://{tmp_path / 'root'}").child("_cache", "calls")
    texts, calls, _ = _cached(root)
    assert texts == [f"real: {p}" for p in PROMPTS] and calls == PROMPTS
    texts, calls, _ = _cached(root)
    assert texts == [f"real: {p}" for p in PROMPTS] and calls == []  # all hits
    return root


def _folder(cache: Location) -> Path:
    return Path(cache.path) / FOLDER


def _parts(cache: Location) -> list[Path]:
    return sorted(_folder(cache).iterdir())


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def _assert_called_again(cache, caplog, name, reason):
    with caplog.at_level(logging.WARNING, logger="halluscope.models.cache"):
        texts, calls, backend = _cached(cache)
    assert texts == [f"real: {p}" for p in PROMPTS]
    assert POISON not in texts and calls == PROMPTS
    assert any(name in w and reason in w for w in _warnings(caplog)), _warnings(caplog)
    assert any(name in url and reason in why for url, why in backend.skipped.items()), backend.skipped
    return backend


# -- finding 1: a planted part became the model's generations -----------------------------------

def test_symlinked_part_outside_the_root_is_not_used(cache, tmp_path, caplog):
    data = _poisoned_bytes()
    outside = tmp_path / "elsewhere" / "poison.parquet"
    outside.parent.mkdir()
    outside.write_bytes(data)
    os.chmod(outside, 0o666)
    if os.getuid() == 0:
        os.chown(outside, NOBODY, NOBODY)
    for part in _parts(cache):
        part.unlink()
    (_folder(cache) / _named(data)).symlink_to(outside)
    _assert_called_again(cache, caplog, _named(data), "symbolic link")


def test_symlinked_model_folder_is_not_read_nor_written(tmp_path, caplog):
    cache = Location.from_url(f"file://{tmp_path / 'root'}").child("_cache", "calls")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    data = _poisoned_bytes()
    (outside / _named(data)).write_bytes(data)  # ours, 0644, right name: only the link is wrong
    os.chmod(outside / _named(data), 0o644)
    Path(cache.path).mkdir(parents=True)
    _folder(cache).symlink_to(outside, target_is_directory=True)
    backend = _assert_called_again(cache, caplog, FOLDER, "symbolic link")
    assert len(backend.skipped) == 1
    assert sorted(os.listdir(outside)) == [_named(data)]  # no new part written through the link
    # the plan's reader of the cache sees no cached item either
    items = [Item("t", f"i{n}", p) for n, p in enumerate(PROMPTS)]
    assert _cached_items(_spec(), items, cache) == set()


def test_part_writable_by_others_is_not_used(cache, caplog):
    data = _poisoned_bytes()
    for part in _parts(cache):
        part.unlink()
    planted = _folder(cache) / _named(data)
    planted.write_bytes(data)
    os.chmod(planted, 0o666)
    _assert_called_again(cache, caplog, _named(data), "writable by others (mode 0666)")


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_part_of_another_user_is_not_used(cache, caplog):
    data = _poisoned_bytes()
    for part in _parts(cache):
        part.unlink()
    planted = _folder(cache) / _named(data)
    planted.write_bytes(data)
    os.chmod(planted, 0o644)
    os.chown(planted, NOBODY, NOBODY)
    _assert_called_again(cache, caplog, _named(data), f"owned by uid {NOBODY}")


def test_part_altered_after_writing_is_not_used(cache, caplog):
    [part] = _parts(cache)
    part.write_bytes(_poisoned_bytes())  # same name, same owner and mode, other bytes
    os.chmod(part, 0o644)
    _assert_called_again(cache, caplog, part.name, "does not hash to the sha256 in its name")


def test_parts_are_named_by_their_digest_and_private_whatever_the_umask(tmp_path):
    cache = Location.from_url(f"file://{tmp_path}").child("calls")
    old = os.umask(0o000)
    try:
        _cached(cache)
    finally:
        os.umask(old)
    [part] = _parts(cache)
    assert part.name == _named(part.read_bytes())
    assert part.stat().st_mode & 0o777 == 0o644
    texts, calls, backend = _cached(cache)
    assert calls == [] and backend.skipped == {} and texts == [f"real: {p}" for p in PROMPTS]


def test_altered_part_on_an_object_store_is_not_used(caplog):
    """No owners or links on S3-like filesystems: the digest check still applies."""
    root = f"memory://halluscope-cache-integrity-{os.getpid()}"
    cache = Location.from_url(root).child("calls")
    try:
        _cached(cache)
        [name] = cache.child(FOLDER).list_names()
        cache.child(FOLDER, name).write_bytes_atomic(_poisoned_bytes())
        texts, calls, backend = _cached(cache)
        assert calls == PROMPTS and POISON not in texts  # the altered part is skipped: the calls are made again
        assert [url.rsplit("/", 1)[-1] for url in backend.skipped] == [name]
        # the same answers are the same bytes, so the same name: the altered part was replaced
        texts, calls, backend = _cached(cache)
        assert calls == [] and texts == [f"real: {p}" for p in PROMPTS] and backend.skipped == {}
    finally:
        fsspec.filesystem("memory").rm(root.removeprefix("memory://"), recursive=True)


# -- finding 2: one foreign file failed every later run with a raw ArrowInvalid ----------------

def test_foreign_files_are_skipped_with_a_warning_never_fatal(cache, caplog):
    (_folder(cache) / "evil.pkl").write_bytes(b"\x80\x04 not a cache part")
    (_folder(cache) / "part-x.parquet").write_bytes(b"not parquet at all")
    with caplog.at_level(logging.WARNING, logger="halluscope.models.cache"):
        texts, calls, backend = _cached(cache, PROMPTS + ["A new prompt?"])
    # the genuine part still answers; only the new prompt is called
    assert texts == [f"real: {p}" for p in PROMPTS + ["A new prompt?"]] and calls == ["A new prompt?"]
    warned = _warnings(caplog)
    assert any("evil.pkl" in w and "is not a part this cache wrote" in w for w in warned), warned
    assert any("part-x.parquet" in w and "is not a part this cache wrote" in w for w in warned), warned
    assert sorted(url.rsplit("/", 1)[-1] for url in backend.skipped) == ["evil.pkl", "part-x.parquet"]
    # logged once per part per process: a later reader counts them again but does not repeat the warning
    from halluscope.models.cache import read_calls  # the one reader of the call cache

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="halluscope.models.cache"):
        again = read_calls(cache, MODEL)
    assert len(again.skipped) == 2 and _warnings(caplog) == []


def test_non_parquet_part_with_a_digest_name_is_skipped(cache, caplog):
    """A file that hashes to its name but is not Parquet (anyone may compute a sha256)."""
    junk = b"PAR1 not really parquet"
    (_folder(cache) / _named(junk)).write_bytes(junk)
    os.chmod(_folder(cache) / _named(junk), 0o644)
    with caplog.at_level(logging.WARNING, logger="halluscope.models.cache"):
        texts, calls, backend = _cached(cache)
    assert calls == [] and texts == [f"real: {p}" for p in PROMPTS]
    assert any(_named(junk) in w and "not a readable Parquet file" in w for w in _warnings(caplog))
    assert len(backend.skipped) == 1


def test_only_foreign_files_mean_every_call_is_made_again(tmp_path, caplog):
    cache = Location.from_url(f"file://{tmp_path}").child("_cache", "calls")
    _folder(cache).mkdir(parents=True)
    (_folder(cache) / "evil.pkl").write_bytes(b"junk")
    (_folder(cache) / "part-x.parquet").write_bytes(b"junk")
    with caplog.at_level(logging.WARNING, logger="halluscope.models.cache"):
        texts, calls, backend = _cached(cache)
    assert calls == PROMPTS and texts == [f"real: {p}" for p in PROMPTS] and len(backend.skipped) == 2
    assert _cached(cache)[1] == []  # the answers were cached beside the foreign files


def test_part_of_the_old_layout_is_treated_as_foreign(tmp_path, caplog):
    """``part-<16 hex>.parquet`` (named by its keys) cannot be verified: skipped, calls made again."""
    cache = Location.from_url(f"file://{tmp_path}").child("_cache", "calls")
    _folder(cache).mkdir(parents=True)
    (_folder(cache) / "part-0123456789abcdef.parquet").write_bytes(_poisoned_bytes())
    with caplog.at_level(logging.WARNING, logger="halluscope.models.cache"):
        texts, calls, _ = _cached(cache)
    assert calls == PROMPTS and POISON not in texts
    assert any("part-0123456789abcdef.parquet" in w and "older halluscope" in w for w in _warnings(caplog))


def _spec() -> OpenAIModel:
    return OpenAIModel(id=MODEL, backend="openai",
                       params={"base_url": "http://127.0.0.1:1/v1",
                               "sampling": {"temperature": 0.0, "top_p": 1.0, "max_tokens": 64}})


def test_plan_reads_the_cache_through_the_same_checks(cache):
    """``halluscope plan`` counts an item as cached only if the checked reader has its answer."""
    spec = _spec()
    from halluscope.models.registry import sampling_of

    assert sampling_of(spec).as_dict() == SAMPLING
    items = [Item("t", f"i{n}", p) for n, p in enumerate(PROMPTS)]
    assert _cached_items(spec, items, cache) == {"i0", "i1"}
    (_folder(cache) / "evil.pkl").write_bytes(b"junk")  # raised ArrowInvalid before
    assert _cached_items(spec, items, cache) == {"i0", "i1"}
    [part] = [p for p in _parts(cache) if p.name.startswith("part-")]
    part.write_bytes(_poisoned_bytes())
    assert _cached_items(spec, items, cache) == set()
