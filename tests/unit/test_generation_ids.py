"""What a resumed run holds of the ids committed before: compact, exact, and cheap to ship."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from halluscope.records import GenerationIds, generation_id

IDS = [generation_id("halogen/code", str(i), "m") for i in range(2000)]


def test_the_ids_of_a_chunked_sliced_column_with_repeats_are_found_and_no_others():
    column = pa.chunked_array([pa.array(IDS[:700]), pa.array(["x", *IDS[700:1000], *IDS[:10]]).slice(1)])
    done = GenerationIds(column)
    assert len(done) == 1000
    assert all(g in done for g in IDS[:1000]) and not any(g in done for g in IDS[1000:])
    assert done.unseen([IDS[5], IDS[1500], IDS[999], "0" * 16, "f" * 16]) == [False, True, False, True, True]
    assert GenerationIds().unseen(IDS[:3]) == [True] * 3 and IDS[0] not in GenerationIds()
    assert "not-an-id" not in done and 7 not in done


def test_eight_bytes_an_id_through_pickle():
    done = GenerationIds(pa.array(IDS))
    assert len(pickle.dumps(done, protocol=5)) < 8 * len(IDS) + 1000
    assert pickle.loads(pickle.dumps(done)).unseen(IDS[:2] + ["0" * 16]) == [False, False, True]


@pytest.mark.parametrize("bad", ["short", "0123456789ABCDEF", "0123456789abcdeg", None])
def test_an_id_of_another_scheme_is_an_error(bad):
    with pytest.raises(ValueError, match="16"):
        GenerationIds(pa.array([IDS[0], bad], pa.string()))
