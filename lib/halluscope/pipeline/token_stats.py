"""Sizes measured on earlier runs, for the estimate (``halluscope plan --stats``, and the run's own
committed rows when a budgeted run resumes): calls per generation and tokens per call, per task,
stage, role and model under test, and pooled over the models measured on the task; and the spread
of two models' per-item differences on each task, for the smallest difference a run can detect."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from halluscope.contract.metrics import PAIRED
from halluscope.errors import DataError
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore
from halluscope.storage.spec import StorageSpec

POOLED = "*"  # TokenStats model key: every model measured on the task


@dataclass(frozen=True)
class StageStats:
    """One stage's sizes per generation; token sizes are None when every call was cached."""

    calls_per_generation: float
    input_tokens_per_call: float | None
    output_tokens_per_call: float | None
    generations: int  # the sample they were measured on


@dataclass
class TokenStats:
    """Measured sizes by (task, stage, role, model under test); model ``*`` pools every model."""

    entries: dict[tuple[str, str, str, str], StageStats] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    # task -> figure -> the median over model pairs of the sd of their per-item differences
    # (paired stderr x sqrt(items)), from the runs' paired records (contract.metrics.PAIRED)
    spreads: dict[str, dict[str, float]] = field(default_factory=dict)

    def get(self, task: str, stage: str, role: str, model: str) -> tuple[StageStats, str] | None:
        """The model's own measurement, else the pooled one, with its basis label."""
        for key, basis in ((model, "measured"), (POOLED, "measured:*")):
            hit = self.entries.get((task, stage, role, key))
            if hit is not None:
                return hit, basis
        return None

    def stages(self, task: str) -> set[tuple[str, str]]:
        return {(s, r) for t, s, r, m in self.entries if t == task and s != "generate"}

    @classmethod
    def from_runs(cls, uris: Iterable[str], storage: StorageSpec | None = None) -> TokenStats:
        """``measure`` over run folders named by URL (``<root>/<run_id>``)."""
        stores = []
        for uri in uris:
            root, run_id = uri.rstrip("/").rsplit("/", 1)
            store = RunStore(Location.from_url(root, storage), run_id)
            if not store.loc.child("manifest.json").exists():
                raise DataError(f"{uri} is not a halluscope run folder (no manifest.json)")
            stores.append(store)
        return cls.measure(stores)

    @classmethod
    def measure(cls, stores: Iterable[RunStore]) -> TokenStats:
        """Sums over the committed rows of every store: generation tokens from ``generations``
        (rows with token counts), role calls per generation with text from ``role_calls``."""
        sums: dict[tuple, list[float]] = defaultdict(lambda: [0.0] * 5)  # gens, calls, token calls, in, out
        texts: dict[tuple[str, str], int] = defaultdict(int)
        runs = []
        for store in stores:
            runs.append(store.loc.url)
            gens = store.read_table("generations", ["model", "task", "text", "error", "input_tokens", "output_tokens"])
            for r in gens.to_pylist():
                if r["text"] is None or r["error"] is not None:
                    continue
                for m in (r["model"], POOLED):
                    texts[(r["task"], m)] += 1
                    if r["input_tokens"] is not None and r["output_tokens"] is not None:
                        _add(sums[(r["task"], "generate", "test", m)], 1, 1, 1, r["input_tokens"], r["output_tokens"])
            for r in store.read_table("role_calls").to_pylist():
                for m in (r["model"], POOLED):
                    _add(sums[(r["task"], r["stage"], r["role"], m)], 0, r["calls"] + r["cached_calls"], r["calls"],
                         r["input_tokens"], r["output_tokens"])
        # a model with generations on a task but no call in a stage measured 0 calls there
        for task, stage, role in {k[:3] for k in sums if k[1] != "generate"}:
            for t, m in texts:
                if t == task:
                    sums.setdefault((task, stage, role, m), [0.0] * 5)
        entries = {}
        for key, (n, calls, token_calls, tin, tout) in sums.items():
            gens = n if key[1] == "generate" else texts[(key[0], key[3])]
            if gens:
                entries[key] = StageStats(calls / gens, tin / token_calls if token_calls else None,
                                          tout / token_calls if token_calls else None, int(gens))
        return cls(entries, runs, paired_spreads(stores))


def paired_spreads(stores: Iterable[RunStore]) -> dict[str, dict[str, float]]:
    """Per task and figure, the median over the runs' model pairs of the sd of their per-item
    differences: what the items of a task let two models' difference vary by. A pair's ``n``
    counts the units a benchmark pairs over, which may each hold several items (a prompt asked in
    several trials): the sd per item is se x sqrt(n x items / units), units the most any pair of
    the task covered, items those the run wrote for the task (as many as units where it wrote none)."""
    sds: dict[tuple[str, str], list[float]] = defaultdict(list)
    for store in stores:
        records = store.read_json("metrics.json")
        listed: list = records if isinstance(records, list) else []
        for r in listed:
            if not isinstance(r, dict) or r.get("table") != PAIRED:
                continue
            pairs = [p for p in r.get("pairs", []) if p.get("n", 0) > 1]
            if not pairs:
                continue
            units = max(p["n"] for p in pairs)
            per_unit = _items(store, r["task"]) / units or 1.0
            for pair in pairs:
                for figure in r.get("figures", []):
                    se = (pair.get(figure) or {}).get("stderr")
                    if se is not None:
                        sds[(r["task"], figure)].append(se * math.sqrt(pair["n"] * per_unit))
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for (task, figure), values in sorted(sds.items()):
        out[task][figure] = statistics.median(values)
    return dict(out)


def _items(store: RunStore, task: str) -> int:
    """The items a run wrote for a task (0: none, as for a benchmark's record over several tasks)."""
    try:
        return pq.read_metadata(pa.BufferReader(store.items_location(task).read_bytes())).num_rows
    except FileNotFoundError:
        return 0


def _add(acc: list[float], *values: float) -> None:
    for i, v in enumerate(values):
        acc[i] += v
