"""A served model's staged generations are read back as the call cache is (storage.verified):
a planted, altered or linked part changes no answer; its rows are generated again."""

from __future__ import annotations

import os

import pyarrow as pa

from halluscope.models.base import GenerationRequest
from halluscope.models.staged import StagedProvider, read_staged
from halluscope.records import NOT_STAGED, STAGED, generation_id
from halluscope.storage.fs import Location
from halluscope.storage.parquet import table_to_bytes
from halluscope.storage.verified import digest_name, skipped_parts, write_part


def _part(gen_ids: list[str], text: str) -> bytes:
    rows = [{"gen_id": g, "text": text, "input_tokens": 1, "output_tokens": 1, "latency_s": 0.1, "attempts": 1,
             "cached": False, "error": None} for g in gen_ids]
    return table_to_bytes(pa.Table.from_pylist(rows, schema=STAGED))


def test_only_parts_the_run_wrote_answer(tmp_path):
    loc = Location.from_url(f"file://{tmp_path / 'staged' / 'm'}")
    ids = [generation_id("t", str(i), "m") for i in range(4)]
    write_part(loc, _part(ids[:2], "ours"))
    forged = _part(ids[2:], "forged")
    (tmp_path / "outside.parquet").write_bytes(forged)
    os.symlink(tmp_path / "outside.parquet", tmp_path / "staged" / "m" / digest_name(forged))  # linked in
    altered = _part(ids[2:], "ours")
    (tmp_path / "staged" / "m" / digest_name(altered)).write_bytes(_part(ids[2:], "altered"))  # edited after
    (tmp_path / "staged" / "m" / "part-0001.parquet").write_bytes(forged)  # not named by its digest
    open_to_all = _part(ids[3:], "anyone's")
    (tmp_path / "staged" / "m" / digest_name(open_to_all)).write_bytes(open_to_all)
    os.chmod(tmp_path / "staged" / "m" / digest_name(open_to_all), 0o666)

    assert sorted(read_staged(loc, ["gen_id"]).column("gen_id").to_pylist()) == sorted(ids[:2])
    answers = StagedProvider("m", loc).answer([GenerationRequest("t", str(i), "p") for i in range(4)])
    assert [a.text for a in answers] == ["ours", "ours", None, None] and answers[2].error == NOT_STAGED
    reasons = {url.rsplit("/", 1)[-1]: why for url, why in skipped_parts().items() if "/staged/m/" in url}
    assert reasons[digest_name(forged)].startswith("is a symbolic link")
    assert "does not hash to the sha256 in its name" in reasons[digest_name(altered)]
    assert "is not a part written here" in reasons["part-0001.parquet"]
    assert "writable by others" in reasons[digest_name(open_to_all)]
