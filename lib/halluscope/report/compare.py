"""``halluscope compare RUN_A RUN_B``: a model across two runs (a new version of it, another judge,
another sampling), per task and figure: both runs' values and B minus A with its paired standard
error and 95% interval over the items both runs scored. The pairing is the benchmark's own
(``Benchmark.compare``), fed the two runs' rows as two models; the values are those its paired
record gives for the models asked about (else each run's metrics record of the model and task)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from halluscope.config.load import parse_config
from halluscope.contract.benchmark import MetricInputs
from halluscope.contract.metrics import PAIRED
from halluscope.errors import DataError
from halluscope.report.escape import terminal
from halluscope.report.sections import stored_records
from halluscope.storage.run import RunStore
from halluscope.task_registry import benchmarks

_A, _B = "1", "2"  # the two runs' rows as two models, run A's sorting first


def _scored_tasks(store: RunStore) -> set[str]:
    return set(store.read_table("scores", ["task"]).column("task").unique().to_pylist())


def _values(store: RunStore) -> dict[tuple[str, str], dict]:
    data = store.read_view("metrics.json")
    raw = json.loads(data) if data is not None else None
    if not isinstance(raw, list):
        raise DataError(f"{store.loc.child('metrics.json').url}: no metrics records (has the run finished?)")
    return {(r.model, r.task): r.as_json() for r in stored_records(raw, store.loc.child("metrics.json").url)}


def _labelled(stores: dict[str, RunStore]) -> Callable[..., pa.Table]:
    """``RunStore.read_table`` over both runs, their models labelled as in the compared rows: a
    hook that reads another table of a model (FEWL's verdicts) reads that model's run alone."""
    def read(table: str, columns: list[str] | None = None, filters: list[tuple[str, str, object]] | None = None
             ) -> pa.Table:
        out = []
        for label, store in stores.items():
            mine: list[tuple[str, str, object]] = []
            for column, op, value in filters or []:
                if column == "model":
                    if op not in ("==", "in") or not isinstance(value, (str, list, tuple)):
                        raise ValueError(f"compare reads a run's rows by model == or in, not {op} {value!r}")
                    given = [value] if isinstance(value, str) else value
                    op, value = "in", [str(v).split("\0", 1)[1] for v in given if str(v).startswith(label + "\0")]
                mine.append((column, op, value))
            t = store.read_table(table, columns, filters=mine or None)
            if "model" in t.column_names:
                labelled = pc.binary_join_element_wise(label, t.column("model"), "\0")
                t = t.set_column(t.schema.get_field_index("model"), "model", labelled)
            out.append(t)
        return pa.concat_tables(out)
    return read


def compare(a: RunStore, b: RunStore, models: Sequence[str] | None = None) -> list[dict]:
    """A row per (model, task, figure) both runs scored: ``a``, ``b``, ``n`` (items both scored),
    ``diff`` (b - a), ``stderr``, ``ci95``, the method's name, and ``favours``: the run whose figure is
    better by the benchmark's direction where the interval excludes 0 (``A``, ``B``), ``neither``
    where it does not, None where the figure has no better direction."""
    manifest = a.read_json("manifest.json") or {}
    cfg = parse_config(manifest["config"], a.loc.child("manifest.json").url, stored=True) \
        if "config" in manifest else None
    values = {_A: _values(a), _B: _values(b)}
    shared = sorted(_scored_tasks(a) & _scored_tasks(b))
    out = []
    for name, bench in benchmarks().items():
        tasks = [t for t in shared if t.split("/", 1)[0] == name]
        if bench.compare is None or not tasks:
            continue
        columns = ["model", "task", *bench.compare_columns]
        rows = []
        for label, store in ((_A, a), (_B, b)):
            t = store.read_table("scores", columns, filters=[("task", "in", tasks)])
            if models is not None:
                t = t.filter(pc.is_in(t.column("model"), pa.array(list(models), pa.string())))
            labelled = pc.binary_join_element_wise(label, t.column("model"), "\0")
            rows.append(t.set_column(t.schema.get_field_index("model"), "model", labelled))
        options = cfg.options_for(name) if cfg is not None else bench.parse_options(None)
        better = {f.key: f.better for f in bench.figures}
        both = pa.concat_tables(rows)
        asked = [(f"{_A}\0{m}", f"{_B}\0{m}") for m in sorted({str(x).split("\0", 1)[1]
                                                                for x in pc.unique(both.column("model")).to_pylist()})]
        inputs = MetricInputs(tasks, both, _labelled({_A: a, _B: b}), a.read_items, options, pairs=asked)
        for record in bench.compare(inputs):
            if record.values.get("table") != PAIRED:
                continue
            own = record.values.get("values") or {}  # each asked model's figures, where the hook gives them
            for pair in record.values.get("pairs", []):
                (la, ma), (lb, mb) = pair["a"].split("\0", 1), pair["b"].split("\0", 1)
                if (la, lb) != (_A, _B) or ma != mb:
                    continue  # two models of one run, or two different models
                for figure in record.values.get("figures", []):
                    d = pair[figure]
                    diff = None if d["diff"] is None else 0.0 - d["diff"]
                    ci = None if d["ci95"] is None else [0.0 - d["ci95"][1], 0.0 - d["ci95"][0]]
                    a_value, b_value = (own[p][figure] if figure in own.get(p, {}) else
                                        values[label].get((ma, record.task), {}).get(figure)
                                        for p, label in ((pair["a"], _A), (pair["b"], _B)))
                    out.append({"model": ma, "task": record.task, "figure": figure, "a": a_value, "b": b_value,
                                "n": pair["n"],
                                "diff": diff, "stderr": d["stderr"], "ci95": ci,
                                "method": record.values.get("method"), "favours": _favours(ci, better.get(figure))})
    return out


def _favours(ci: list[float] | None, better: str | None) -> str | None:
    """Which run a difference (B - A) with this interval favours, by the figure's better direction."""
    if better is None or ci is None:
        return None
    if ci[0] <= 0 <= ci[1]:
        return "neither"
    return "B" if (ci[0] > 0) == (better == "higher") else "A"


def _num(x: float | None, spec: str = ".4f") -> str:
    return "-" if x is None else format(x, spec)


def compare_text(rows: list[dict], run_a: str, run_b: str) -> str:
    if not rows:
        return (f"{run_a} and {run_b} share no model and task that a benchmark compares item by item "
                "(the same model id, scored in both)")
    lines = [f"B minus A: A = {run_a}, B = {run_b}; over the items both runs scored, with the paired 95% interval "
             "(* where it excludes 0); favours: the run that is better by the figure's direction", "",
             f"{'model':<28} {'task':<38} {'figure':<20} {'A':>7} {'B':>7} {'B-A':>8} {'s.e.':>7}  {'n':>6}  favours"]
    for r in rows:
        told = r["ci95"] is not None and (r["ci95"][0] > 0 or r["ci95"][1] < 0)
        lines.append(f"{r['model']:<28} {r['task']:<38} {r['figure']:<20} {_num(r['a'], '.3f'):>7} "
                     f"{_num(r['b'], '.3f'):>7} {_num(r['diff'], '+.4f'):>8} {_num(r['stderr']):>7}"
                     f"{'*' if told else ' '} {r['n']:>6}  {r['favours'] or '-'}")
    return terminal("\n".join(lines))
