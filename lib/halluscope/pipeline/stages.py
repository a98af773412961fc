"""The pipeline's stages as batch functions.

Stages take and return Arrow tables; the evaluation phases (abstain, decompose, verify) run on a
batch's rows converted to Python once (``Rows``). All are usable without Ray: the benchmark runs
the same functions in a plain loop as its single-process baseline. Ray Data runs them with
``map_batches``; stages that hold state (model clients, knowledge indexes) are classes run in
actor pools so the state is built once per worker.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from halluscope import records
from halluscope.config.schema import ModelSpec
from halluscope.contract.completion import Completion
from halluscope.contract.roles import Calls, RoleCall
from halluscope.contract.task import Item, Task, Verdict
from halluscope.knowledge.base import Knowledge
from halluscope.models.base import GenerationRequest, ModelBackend
from halluscope.models.cache import GENERATION_TEMPLATE
from halluscope.models.model import Model
from halluscope.models.registry import Context, client
from halluscope.models.staged import StagedProvider
from halluscope.pipeline.roles import RoleModels
from halluscope.records import atom_ids, stable_id
from halluscope.runkit import fewer_collections
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore
from halluscope.task_registry import get_task


def _usable(row: dict) -> bool:
    return row["error"] is None and row["text"] is not None


class Generate:
    """Fills ``text`` for rows of live models (replayed rows arrive with their text), through
    the call cache when the run has one; a model in ``staged`` was generated earlier in the run
    and answers from there. ``clients``: the Generate actors of the pool, each calling every
    endpoint at once, so each keeps its share of an endpoint's capacity in flight."""

    def __init__(self, models: Sequence[ModelSpec], endpoints: dict, cache: Location | None,
                 staged: Mapping[str, Location] | None = None, clients: int = 1) -> None:
        self.backends: dict[str, ModelBackend] = {}
        for m in models:
            if m.replayed:
                continue
            if staged and m.id in staged:
                self.backends[m.id] = Model(StagedProvider(m.id, staged[m.id]))
                continue
            self.backends[m.id] = client(m, Context(endpoints.get(m.id), clients), cache, GENERATION_TEMPLATE)

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.to_pylist()
        pending: dict[str, list[int]] = defaultdict(list)
        for i, row in enumerate(rows):
            if row["text"] is None and row["error"] is None and row["model"] in self.backends:
                pending[row["model"]].append(i)
        for model, idx in pending.items():
            reqs = [GenerationRequest(rows[i]["task"], rows[i]["item_id"], rows[i]["prompt"]) for i in idx]
            for i, c in zip(idx, self.backends[model].generate_batch(reqs)):
                rows[i].update(text=c.text, input_tokens=c.input_tokens, output_tokens=c.output_tokens,
                               latency_s=c.latency_s, attempts=c.attempts, error=c.error,
                               cached=c.cached)
        return pa.Table.from_pylist(rows, schema=batch.schema)


_ROW = ["gen_id", "model", "task", "item_id", "prompt", "text", "error"]
# the columns the phases add to a batch, with their Arrow types
_ADDED = {"responded": pa.bool_(), "atoms": pa.list_(pa.string()), "supported": pa.list_(pa.bool_()),
          "evidence": pa.list_(pa.string())}

RoleUsage = dict[str, list[dict]]  # gen_id -> role-model usage records of this batch
# (task, model, item id) -> the item: rows carry ids, the worker holds the run's items
# (resolve.items.ItemSource.item); tasks treat an item as read-only
ItemLookup = Callable[[str, str, str], Item]


class Rows:
    """A batch's rows as Python dicts with their items, converted once for every phase that
    runs on them (per phase, the conversions cost about a tenth of the demo's CPU); the phases
    set a row's ``error`` and add their columns to it, and ``table`` turns it back."""

    def __init__(self, batch: pa.Table, items: ItemLookup, subjects: Mapping[str, str] | None = None) -> None:
        """``subjects``: model id -> the model its recorded role answers belong to (an alias's
        source model); a model not in it is its own."""
        self.batch = batch
        self.subjects = subjects or {}
        self.rows = batch.select(_ROW).to_pylist()
        self.items = [items(r["task"], r["model"], r["item_id"]) for r in self.rows]
        self.added: list[str] = []  # columns the phases set on every row, in order

    def set(self, column: str, values: list) -> None:
        for r, v in zip(self.rows, values):
            r[column] = v
        self.added.append(column)

    def table(self) -> pa.Table:
        """The batch with each row's error (``row_error``: its generation's, or the first phase's that
        failed it) and the columns the phases added. ``error`` stays the generation's own: a row the
        judge failed still had its answer generated, and is billed as a call that answered."""
        out = self.batch.append_column("row_error", pa.array([r["error"] for r in self.rows], pa.string()))
        for name in self.added:
            out = out.append_column(name, pa.array([r[name] for r in self.rows], _ADDED[name]))
        return out


def _row_error(stage: str, err: Exception) -> str:
    return f"{stage} failed: {type(err).__name__}: {err}"[:500]


def _phase(rows: Rows, stage: str, call: Callable[[dict, Item], Calls],
           finish: Callable[[dict, Item, list[Completion]], Any], when: Callable[[dict], bool], skipped: Any,
           failed: Callable[[dict], Any], roles: RoleModels | None, usage: RoleUsage | None) -> list:
    """One phase for the rows ``when`` selects (``skipped`` for the others): ``call(row, item)`` may
    ask a role model; every row's prompts go out together; ``finish(row, item, replies)`` gives
    the row's value.

    A row whose task function raises gets ``failed(row)`` and the stage's error in its ``error``
    column: the row fails, not the run. A role model that is down stops the run (EndpointDown)."""
    values = [skipped] * len(rows.rows)
    active: list[int] = []
    calls: dict[str, tuple[RoleCall, ...]] = {}
    for i, (r, item) in enumerate(zip(rows.rows, rows.items)):
        if not when(r):
            continue
        try:
            c = call(r, item)
        except Exception as err:  # noqa: BLE001 - recorded per row, excluded from metrics, counted
            r["error"], values[i] = r["error"] or _row_error(stage, err), failed(r)
            continue
        active.append(i)
        if c is not None:
            calls[r["gen_id"]] = c if isinstance(c, tuple) else (c,)
    replies: dict[str, list[Completion]] = {}
    if calls:
        if roles is None:
            raise RuntimeError(f"{stage}: tasks call role models but the stage was built without them")
        replies = roles.answer(calls, stage, usage if usage is not None else defaultdict(list),
                               {r["gen_id"]: rows.subjects.get(r["model"], r["model"]) for r in rows.rows
                                if r["gen_id"] in calls})
    for i in active:
        r = rows.rows[i]
        try:
            values[i] = finish(r, rows.items[i], replies.get(r["gen_id"], []))
        except Exception as err:  # noqa: BLE001
            r["error"], values[i] = r["error"] or _row_error(stage, err), failed(r)
    return values


def abstain(rows: Rows, roles: RoleModels | None = None, usage: RoleUsage | None = None) -> None:
    """R(y) per generation; null where there is no usable generation."""
    rows.set("responded", _phase(
        rows, "abstain",
        lambda r, item: get_task(r["task"]).abstain_call(r["text"], item),
        lambda r, item, replies: get_task(r["task"]).responded(r["text"], item, replies),
        _usable, None, lambda r: None, roles, usage))


def decompose(rows: Rows, roles: RoleModels | None = None, usage: RoleUsage | None = None) -> None:
    """D(y) for responded generations; [] otherwise."""
    rows.set("atoms", _phase(
        rows, "decompose",
        lambda r, item: get_task(r["task"]).decompose_call(r["text"], item),
        lambda r, item, replies: get_task(r["task"]).decompose(r["text"], item, replies),
        lambda r: bool(r["responded"]) and r["error"] is None, [], lambda r: [], roles, usage))


class Verify:
    """V per atom; knowledge (e.g. the 880k-name PyPI index) is loaded once per actor."""

    def __init__(self, kb: Knowledge, roles: RoleModels | None = None) -> None:
        self.kb = kb
        self.roles = roles

    def __call__(self, rows: Rows, usage: RoleUsage | None = None) -> None:
        """Adds ``supported`` and ``evidence`` (one per atom) to rows that have ``atoms``."""
        kb = self.kb
        verdicts = _phase(
            rows, "verify",
            lambda r, item: get_task(r["task"]).verify_call(r["atoms"], r["text"], item, kb),
            lambda r, item, replies: _checked(r, get_task(r["task"]).verify(r["atoms"], r["text"], item, kb, replies)),
            lambda r: bool(r["atoms"]) and r["error"] is None, [],
            lambda r: [Verdict(None, "verifier failed")] * len(r["atoms"]), self.roles, usage)
        rows.set("supported", [[v.supported for v in vs] for vs in verdicts])
        rows.set("evidence", [[v.evidence for v in vs] for vs in verdicts])


def _checked(row: dict, verdicts: list[Verdict]) -> list[Verdict]:
    if len(verdicts) != len(row["atoms"]):
        raise ValueError(f"{len(verdicts)} verdicts for {len(row['atoms'])} atoms")
    return verdicts


def _tasks_of(tasks: pa.ChunkedArray) -> tuple[list[Task], pa.Array]:
    """The batch's distinct tasks and, per row, the index of its own: what a task decides is
    looked up once per task of the batch rather than per row."""
    encoded = tasks.combine_chunks().dictionary_encode()
    return [get_task(t) for t in encoded.dictionary.to_pylist()], encoded.indices


def _per_task(found: list[Task], at: pa.Array, **attributes: Callable[[Task], str]) -> dict[str, pa.Array]:
    """Task attributes on each row (name -> column), from ``_tasks_of``."""
    return {name: pa.array([value(t) for t in found], pa.string()).take(at) for name, value in attributes.items()}


def scores_table(batch: pa.Table) -> pa.Table:
    """Per-generation scores: f is the fraction of verified atoms that are unsupported. Counted
    over the batch's verdicts as flat arrays; only the task's utility g is a call per row."""
    n = batch.num_rows
    error = pc.coalesce(batch.column("row_error"),
                        pc.if_else(batch.column("text").is_null(), "no text", pa.scalar(None, pa.string())))
    ok = error.is_null().to_numpy(zero_copy_only=False)
    atoms, supported = batch.column("atoms").combine_chunks(), batch.column("supported").combine_chunks()
    owner = pc.list_parent_indices(supported).to_numpy()
    verdicts = pc.list_flatten(supported)
    unsupported = pc.fill_null(pc.invert(verdicts), False).to_numpy(zero_copy_only=False)
    n_unsupported = np.bincount(owner[unsupported], minlength=n)
    n_verified = np.bincount(owner[verdicts.is_valid().to_numpy(zero_copy_only=False)], minlength=n)
    n_atoms = pc.list_value_length(atoms).fill_null(0).to_numpy()
    found, at = _tasks_of(batch.column("task"))
    task_at = at.to_numpy()
    # a refusal task may count a response without atoms (e.g. no cited title) as an abstention
    empty_abstains = np.array([t.empty_is_abstention for t in found], bool)[task_at]
    responded = pc.fill_null(batch.column("responded"), False).to_numpy(zero_copy_only=False) \
        & ~(empty_abstains & (n_atoms == 0))
    share = np.divide(n_unsupported, n_verified, out=np.zeros(n), where=n_verified > 0)
    f = pa.array(share, pa.float64(), mask=~(responded & ok))
    g = [found[t].utility(bool(r), fi) if good else None
         for t, r, fi, good in zip(task_at.tolist(), responded.tolist(), f.to_pylist(), ok.tolist())]
    offsets = pa.array(np.concatenate([[0], np.cumsum(n_unsupported)]), pa.int32())
    return pa.Table.from_pydict({
        **{k: batch.column(k) for k in ("gen_id", "model", "task", "item_id", "prompt", "atoms")},
        "responded": pa.array(responded, pa.bool_(), mask=~ok), "n_atoms": pa.array(n_atoms, pa.int32()),
        "n_unsupported": pa.array(n_unsupported, pa.int32()),
        "n_unverified": pa.array(n_atoms - n_verified, pa.int32()), "f": f, "g": pa.array(g, pa.float64()),
        "unsupported_atoms": pa.ListArray.from_arrays(offsets, pc.list_flatten(atoms).filter(unsupported)),
        **_per_task(found, at, task_kind=lambda t: t.kind, abstention_rule=lambda t: t.abstention_rule),
        "error": error}, schema=records.SCORES)


def _atom_tables(batch: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The atoms and the verdicts of a verified batch, one row per atom, built column by column."""
    atoms = batch.column("atoms").combine_chunks()
    n_atoms = pc.list_value_length(atoms)
    if pc.any(pc.not_equal(n_atoms, pc.list_value_length(batch.column("supported")))).as_py():
        raise ValueError("a row's verdicts do not match its atoms one to one")
    row = pc.list_parent_indices(atoms)
    lengths = n_atoms.fill_null(0).to_numpy()
    idx = pa.array(np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths), pa.int32())
    gen_id = batch.column("gen_id").take(row)
    task = batch.column("task").take(row)
    common = {"atom_id": atom_ids(gen_id, idx), "gen_id": gen_id, "model": batch.column("model").take(row),
              "task": task}
    by_task = _per_task(*_tasks_of(task), decomposer=lambda t: t.decomposer, verifier=lambda t: t.verifier)
    atom_table = pa.Table.from_pydict({
        **common, "atom_idx": idx, "atom": pc.list_flatten(atoms), "decomposer": by_task["decomposer"]},
        schema=records.ATOMS)
    verdict_table = pa.Table.from_pydict({
        **common, "verifier": by_task["verifier"],
        "supported": pc.list_flatten(batch.column("supported")),
        "evidence": pc.list_flatten(batch.column("evidence"))}, schema=records.VERDICTS)
    return atom_table, verdict_table


def _role_calls(batch: pa.Table, run_id: str, usage: RoleUsage) -> pa.Table:
    """One row per usage record, the generation's columns taken by index."""
    at: list[int] = []  # per record, its row
    made: list[dict] = []
    for i, gen_id in enumerate(batch.column("gen_id").to_pylist() if usage else ()):
        for record in usage.get(gen_id, ()):
            at.append(i)
            made.append(record)
    counted = pa.Table.from_pylist(made, schema=_USAGE)
    rows = batch.select(["gen_id", "model", "task"]).take(pa.array(at, pa.int64()))
    return pa.Table.from_pydict({"run_id": pa.repeat(pa.scalar(run_id, pa.string()), len(at)),
                                 **{k: rows.column(k) for k in rows.column_names},
                                 **{k: counted.column(k) for k in _USAGE.names}}, schema=records.ROLE_CALLS)


_USAGE = pa.schema([f for f in records.ROLE_CALLS if f.name not in ("run_id", "gen_id", "model", "task")])


def split_tables(batch: pa.Table, run_id: str, usage: RoleUsage | None = None) -> dict[str, pa.Table]:
    """The result tables of one scored batch."""
    atoms, verdicts = _atom_tables(batch)
    generations = {k: batch.column(k) for k in records.GENERATIONS.names if k != "run_id"}
    return {
        "generations": pa.Table.from_pydict(
            {**generations, "run_id": pa.repeat(pa.scalar(run_id, pa.string()), batch.num_rows)},
            schema=records.GENERATIONS),
        "atoms": atoms,
        "verdicts": verdicts,
        "scores": scores_table(batch),
        "role_calls": _role_calls(batch, run_id, usage or {}),
    }


def scored_parts(batch: pa.Table, store: RunStore,
                 usage: RoleUsage | None = None) -> tuple[Callable[[], dict[str, str]], pa.Table]:
    """Scores a batch (of one row or more): the write of its parts, under a key derived from its
    generation ids (a retried task rewrites the same objects), and what it commits per (model,
    task): its rows, and those of them that failed (``_once_written`` adds the parts' names)."""
    key = stable_id(*sorted(batch.column("gen_id").to_pylist()))
    tables = split_tables(batch, store.run_id, usage)
    counts = tables["scores"].group_by(["model", "task"]).aggregate([("gen_id", "count"), ("error", "count")])
    return (lambda: store.write_batch(key, tables),
            pa.table({"key": [key] * counts.num_rows, "model": counts.column("model"),
                      "task": counts.column("task"), "rows": counts.column("gen_id_count").cast(pa.int64()),
                      "failed": counts.column("error_count").cast(pa.int64())}))


# a committed batch per (model, task); parts: JSON, table -> the name of the batch's part in it
COMMITTED = pa.schema([("key", pa.string()), ("model", pa.string()), ("task", pa.string()), ("rows", pa.int64()),
                       ("failed", pa.int64()), ("parts", pa.string())])


class Evaluate:
    """abstain -> decompose -> verify -> score -> write, in commits of ``chunk_rows`` rows, in one
    actor: the knowledge indexes and role-model clients are built once per actor, and a batch's
    rows never cross processes. Ray Data hands over whole blocks (a unit's rows, or the units
    that replay one file), so the cutting into committed parts happens here: per (model, task),
    so a run's parts, and the order its tables are read back in, do not depend on the blocks."""

    def __init__(self, kb: Knowledge, models: Sequence[ModelSpec], endpoints: dict, cache: Location | None,
                 store: RunStore, chunk_rows: int, items: ItemLookup, actors: int = 1) -> None:
        fewer_collections()
        self.items = items
        self.roles = RoleModels(models, endpoints, cache, kb.resolver, clients=actors)
        self.verify = Verify(kb, self.roles)
        self.store = store
        self.chunk_rows = chunk_rows
        self.subjects = {m.id: m.recorded_as for m in models}
        # Parquet encoding, compression and the file writes release the GIL: a part is written
        # on this thread while the next one is scored
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="parts")

    def __call__(self, batch: pa.Table) -> Iterator[pa.Table]:
        """Yields a part's commit once it is written, so what the driver counts is on storage;
        a part is in flight while the next is scored, and waited for if scoring stops."""
        pending: tuple[Future[dict[str, str]], pa.Table] | None = None
        try:
            for write, committed in self._scored(batch):
                previous, pending = pending, (self.writer.submit(write), committed)
                if previous is not None:
                    yield _once_written(*previous)
            if pending is not None:
                yield _once_written(*pending)
        finally:
            if pending is not None:  # stopped midway: the part in flight finishes (it commits last)
                wait([pending[0]])

    def _scored(self, batch: pa.Table) -> Iterator[tuple[Callable[[], dict[str, str]], pa.Table]]:
        """Each part's write and commit: per (model, task), ``chunk_rows`` rows at a time."""
        for start, stop in _unit_runs(batch):
            for chunk in range(start, stop, self.chunk_rows):
                usage: RoleUsage = defaultdict(list)
                rows = Rows(batch.slice(chunk, min(self.chunk_rows, stop - chunk)), self.items, self.subjects)
                abstain(rows, self.roles, usage)
                decompose(rows, self.roles, usage)
                self.verify(rows, usage)
                yield scored_parts(rows.table(), self.store, usage)


def _once_written(written: Future[dict[str, str]], counts: pa.Table) -> pa.Table:
    parts = json.dumps(written.result(), sort_keys=True)
    return counts.append_column("parts", pa.repeat(pa.scalar(parts, pa.string()), counts.num_rows)).cast(COMMITTED)


def _unit_runs(batch: pa.Table) -> list[tuple[int, int]]:
    """(start, stop) of each run of rows of one (model, task): expansion emits a unit's rows together."""
    units = list(zip(batch.column("model").to_pylist(), batch.column("task").to_pylist()))
    cuts = [i for i in range(1, len(units)) if units[i] != units[i - 1]]
    return list(zip([0, *cuts], [*cuts, len(units)]))
