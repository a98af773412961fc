"""A run that went through but has nothing to stand on fails (status failed, non-zero exit)."""

import pyarrow as pa

from halluscope.pipeline.aggregate import RowCounts
from halluscope.pipeline.workset import MISSING


def _scores(*rows: tuple[str, str | None]) -> pa.Table:
    return pa.Table.from_pylist([{"model": m, "task": "t", "error": e} for m, e in rows],
                                schema=pa.schema([("model", pa.string()), ("task", pa.string()), ("error", pa.string())]))


def run_failure(scores: pa.Table, max_error_fraction: float, parts: int = 1) -> str | None:
    """What RowCounts says of ``scores`` counted in ``parts`` slices, as the aggregation counts parts."""
    counts = RowCounts()
    step = -(-scores.num_rows // parts) or 1
    for start in range(0, scores.num_rows, step):
        counts.add(scores.slice(start, step))
    return counts.failure(max_error_fraction)


def test_a_model_with_nothing_scored_fails_the_run():
    assert run_failure(_scores(("mine", MISSING), ("mine", MISSING), ("ok", None)), 0.1) == \
        "no generation could be scored for model 'mine' (0 failed, 2 with no recorded response)"
    assert run_failure(_scores(*[("api", "timeout after 5 attempts")] * 3, ("api", "HTTP 401: no key")), 1.0) == \
        ("no generation could be scored for model 'api' (4 failed, 0 with no recorded response); "
         "most common error: 'timeout after 5 attempts'")


def test_failed_share_against_max_error_fraction_missing_items_aside():
    ok = [("m", None)] * 17
    assert run_failure(_scores(*ok, ("m", "HTTP 500"), *[("m", MISSING)] * 50), 0.1) is None
    assert run_failure(_scores(*ok, *[("m", "HTTP 500")] * 3), 0.1) == \
        "3 of 20 generations failed (15%, more than max_error_fraction 0.1); most common error: 'HTTP 500'"
    assert run_failure(_scores(*ok, *[("m", "HTTP 500")] * 3), 0.2) is None
    assert run_failure(_scores(), 0.1) is None


def test_counted_part_by_part_as_at_once():
    rows = [("m", None)] * 17 + [("m", "HTTP 500")] * 2 + [("m", "timeout")] * 3 + [("m", MISSING)] * 5
    for fraction in (0.1, 0.5):
        assert run_failure(_scores(*rows), fraction, parts=4) == run_failure(_scores(*rows), fraction)
    counts = RowCounts()
    counts.add(_scores(*rows[:20]))
    counts.add(_scores(*rows[20:]))
    assert counts.missing == {"m/t": 5} and counts.errors == {"HTTP 500": 2, "timeout": 3}
