"""Character spans in a response: the unit gold labels, detectors and metrics share.

Offsets are ``[start, end)`` into the response string. Sets of characters are kept as merged
interval lists, so overlapping or repeated spans never count a character twice.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from halluscope.ragtruth.taxonomy import LabelType


class Span(NamedTuple):
    start: int
    end: int  # exclusive
    label_type: LabelType | None = None  # detectors that do not type their spans give None


@dataclass(frozen=True)
class Prediction:
    """What a detector says about one response.

    ``unlocated`` holds listed strings that could not be found in the response: they still make
    the response a positive prediction and count as false-positive characters (spec §4.2).
    ``unreadable``: the detector's answer held no readable list and is scored as an empty one
    (spec §5.1), so it is counted apart."""

    spans: tuple[Span, ...] = ()
    unlocated: tuple[str, ...] = ()
    unreadable: bool = False

    @property
    def positive(self) -> bool:
        return bool(self.spans or self.unlocated)

    @property
    def n_spans(self) -> int:
        """Distinct detected spans: overlapping or touching located spans count once, each
        unlocated string once."""
        return len(merge((s.start, s.end) for s in self.spans)) + len(self.unlocated)


def merge(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, disjoint intervals covering the same characters (touching ones are joined)."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def size(merged: Sequence[tuple[int, int]]) -> int:
    return sum(end - start for start, end in merged)


def overlap(a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]]) -> int:
    """Characters in both of two merged interval lists."""
    i = j = total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


_QUOTES = str.maketrans({"‘": "'", "’": "'", "‛": "'", "“": '"', "”": '"', "„": '"'})


def _normalised(text: str) -> tuple[str, list[int]]:
    """Lower-cased text with whitespace runs collapsed and typographic quotes made plain, and
    for each of its characters the index of the original character it came from."""
    out: list[str] = []
    where: list[int] = []
    for i, ch in enumerate(text):
        if ch.isspace():
            if out and out[-1] != " ":
                out.append(" ")
                where.append(i)
            continue
        for low in ch.translate(_QUOTES).lower():
            out.append(low)
            where.append(i)
    return "".join(out), where


def locate(needles: Sequence[str], text: str) -> tuple[list[Span], list[str]]:
    """Offsets of span strings quoted from ``text``, in the order they were listed.

    Each string is searched exactly, first forward from the end of the previous match (a judge
    lists spans in reading order, so a repeated phrase maps to its next occurrence), then
    anywhere. Failing that, the same two searches run on whitespace-, case- and quote-normalised
    text. Only the first occurrence found is used: a judge quoting a phrase once flags one place.
    Strings found by neither search come back in the second list."""
    spans: list[Span] = []
    missing: list[str] = []
    norm: tuple[str, list[int]] | None = None
    cursor = 0
    for needle in needles:
        pos = text.find(needle, cursor) if needle else -1
        if pos < 0 and needle:
            pos = text.find(needle)
        if pos >= 0:
            spans.append(Span(pos, pos + len(needle)))
            cursor = pos + len(needle)
            continue
        if norm is None:
            norm = _normalised(text)
        hay, where = norm
        key = _normalised(needle)[0].strip()
        npos = -1
        if key:
            npos = hay.find(key, bisect.bisect_left(where, cursor))
            if npos < 0:
                npos = hay.find(key)
        if npos < 0:
            missing.append(needle)
            continue
        start, end = where[npos], where[npos + len(key) - 1] + 1
        spans.append(Span(start, end))
        cursor = end
    return spans, missing
