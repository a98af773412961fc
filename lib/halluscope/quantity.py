"""Kubernetes quantities (``500m``, ``64Gi``, ``95491281146``, ``2k``) as numbers of units: what
the Kueue rendering, the preflight and submit's queue sizes compare."""

from __future__ import annotations

_SUFFIXES = (("Ki", 2.0**10), ("Mi", 2.0**20), ("Gi", 2.0**30), ("Ti", 2.0**40), ("Pi", 2.0**50),
             ("m", 1e-3), ("k", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12), ("P", 1e15))


def parse_quantity(value: object) -> float:
    """The number a quantity stands for; ValueError for anything else."""
    text = str(value).strip()
    for suffix, factor in _SUFFIXES:
        if text.endswith(suffix):
            return float(text[:-len(suffix)]) * factor
    return float(text)
