"""A served model under test generates apart from its evaluation, so its GPUs go back as soon as
its last answer is written, not when the last judge call of its rows returns.

One Ray task per deployed model expands the model's units, leaves out the rows an earlier
attempt committed or staged, and sends the rest to the deployment in batches of
``concurrency.generate_batch_size`` distinct prompts (tasks asking the same prompt share its
answer, generated once): the client keeps the deployment's capacity,
replicas x max_ongoing_requests, in flight (a second batch in flight would double it). Each
batch is written as a staged part (``<run>/staged/<model>/``) through the call cache; the
evaluation reads them with ``models.staged.StagedProvider``. A resumed run generates only what no part holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import ray

from halluscope.config.schema import ModelSpec
from halluscope.models.base import GenerationRequest
from halluscope.models.cache import GENERATION_TEMPLATE
from halluscope.models.registry import Context, client
from halluscope.models.staged import read_staged, settled
from halluscope.pipeline.workset import Expansion, expand_unit
from halluscope.records import STAGED, GenerationIds, transient_error
from halluscope.storage.fs import Location
from halluscope.storage.parquet import table_to_bytes
from halluscope.storage.verified import is_part_name, write_part

if TYPE_CHECKING:
    from halluscope.serving.app import ServedEndpoint


def staged_location(run_loc: Location, model_id: str) -> Location:
    return run_loc.child("staged", model_id.replace("/", "__"))


class StagedRows:
    """The rows each model has staged so far in a run, read from the footers of parts not seen
    before: what ``progress.json`` shows of a wave that only generates (a count on display, so
    parts are taken by their names; what answers is read through ``storage.verified``)."""

    def __init__(self, run_loc: Location) -> None:
        self.run_loc = run_loc
        self._rows: dict[str, int] = {}  # part url -> rows

    def of(self, model_id: str) -> int:
        loc = staged_location(self.run_loc, model_id)
        names = [n for n in loc.list_names() if is_part_name(n)]
        for name in names:
            part = loc.child(name)
            if part.url not in self._rows:
                with part.fs.open(part.path, "rb") as f:
                    self._rows[part.url] = pq.ParquetFile(f).metadata.num_rows
        return sum(self._rows[loc.child(n).url] for n in names)


def staged_ids(loc: Location) -> set[str]:
    """The generations of one model staged so far by any attempt of the run, but for those that
    failed transiently: a resubmitted run generates them again."""
    rows = settled(read_staged(loc, ["gen_id", "error"]).to_pylist())
    return {g for g, r in rows.items() if not transient_error(r["error"])}


def left_to_generate(blocks: list[pa.Table], ctx: Expansion, done: GenerationIds, loc: Location) -> bool:
    """Whether a row of these blocks is neither committed nor staged at ``loc``: a model with none
    left is evaluated from its staged parts, and not deployed again."""
    return next(_rows(blocks, ctx, done, staged_ids(loc)), None) is not None


def _rows(blocks: list[pa.Table], ctx: Expansion, done: GenerationIds, staged: set[str]) -> Iterator[dict]:
    for block in blocks:
        for table in expand_unit(block, ctx, done):
            for row in table.select(["gen_id", "task", "item_id", "prompt"]).to_pylist():
                if row["gen_id"] not in staged:
                    yield row


def _by_prompt(rows: Iterator[dict], size: int) -> Iterator[list[dict]]:
    """The rows in batches of ``size`` distinct prompts, each with every row asking it: tasks that
    ask a model the same prompt (a rule set's twins) share one call (``Model`` sends a batch's
    equal requests once), whatever the order of their units."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["prompt"], []).append(row)
    prompts = list(groups)
    for start in range(0, len(prompts), size):
        yield [r for p in prompts[start:start + size] for r in groups[p]]


@ray.remote(num_cpus=0.1, max_retries=2)
def generate_model(spec: ModelSpec, endpoint: ServedEndpoint, blocks: list[pa.Table], ctx: Expansion,
                   done: GenerationIds, cache: Location | None, out: Location, batch_size: int) -> int:
    """Generate every row of ``blocks`` not yet committed or staged; returns the rows generated."""
    backend = client(spec, Context(endpoint), cache, GENERATION_TEMPLATE)
    staged = staged_ids(out)

    def one(chunk: list[dict]) -> int:
        answers = backend.generate_batch([GenerationRequest(r["task"], r["item_id"], r["prompt"]) for r in chunk])
        rows: list[dict[str, Any]] = [
            {"gen_id": r["gen_id"], "text": c.text, "input_tokens": c.input_tokens, "output_tokens": c.output_tokens,
             "latency_s": c.latency_s, "attempts": c.attempts, "cached": bool(c.extra.get("cached")),
             "error": c.error} for r, c in zip(chunk, answers)]
        write_part(out, table_to_bytes(pa.Table.from_pylist(rows, schema=STAGED)))  # named by its digest
        return len(rows)

    return sum(one(chunk) for chunk in _by_prompt(_rows(blocks, ctx, done, staged), batch_size))
