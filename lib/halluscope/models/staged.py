"""Generations made earlier in the run, while their model was deployed: the evaluation reads
them here after the deployment has given its GPUs back (``pipeline/generation.py`` writes them)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from halluscope.contract.completion import Completion
from halluscope.models.base import GenerationRequest
from halluscope.models.provider import LocalProvider
from halluscope.records import NOT_STAGED, STAGED, generation_id, transient_error
from halluscope.storage.fs import Location, UntrustedPath
from halluscope.storage.verified import read_parts, skip


def read_staged(loc: Location, columns: list[str] | None = None) -> pa.Table:
    """Every staged part of one model that its run wrote (``storage.verified``: named by the
    sha256 of its bytes, a file of this user no one else may write); a planted, altered or linked
    part is skipped with a warning, and its rows are generated again. Empty when none."""
    skipped: dict[str, str] = {}
    try:
        tables = [t.select(columns) if columns else t for t in read_parts(
            loc, STAGED, "staged generations", "its rows are generated again", skipped)]
    except UntrustedPath as err:
        skip(skipped, "staged generations", err.url, err.reason, "none of its rows is used")
        tables = []
    return pa.concat_tables(tables) if tables else STAGED.empty_table().select(columns or STAGED.names)


def settled(rows: list[dict]) -> dict[str, dict]:
    """gen_id -> its staged row; of a generation staged twice (failed transiently, then generated
    again by a resubmitted run), the row that did not fail transiently."""
    out: dict[str, dict] = {}
    for r in rows:
        if r["gen_id"] not in out or transient_error(out[r["gen_id"]]["error"]):
            out[r["gen_id"]] = r
    return out


class StagedProvider(LocalProvider):
    """A provider answering a model's requests with what its deployment generated: text,
    tokens, attempts and errors as they were, so the ledger counts the calls once."""

    cached = False  # generated (and cached) while the model was deployed

    def __init__(self, model_id: str, loc: Location) -> None:
        self.model_id = model_id
        self.loc = loc
        self._rows: dict[str, dict] | None = None

    def answer(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        if self._rows is None:
            self._rows = settled(read_staged(self.loc).to_pylist())
        out = []
        for req in requests:
            row = self._rows.get(generation_id(req.task, req.item_id, self.model_id))
            if row is None:
                out.append(Completion(None, error=NOT_STAGED, attempts=0))
                continue
            out.append(Completion(row["text"], row["input_tokens"], row["output_tokens"], row["latency_s"] or 0.0,
                                  error=row["error"], attempts=row["attempts"] or 0,
                                  cached=bool(row["cached"])))
        return out
