"""The K nearest questions of a question in its benchmark, for FEWL's laziness penalty (§2.2).

Questions are embedded (the paper names no model: we use the same Embedder as the similarity,
by default all-MiniLM-L6-v2) and searched by inner product of unit vectors in a faiss
``IndexFlatIP``, i.e. cosine. A neighbour must not be too close: above ``max_similarity`` two
questions may share their answer (App. C.6), so those are skipped and the search goes deeper.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from halluscope.errors import DataError
from halluscope.fewl.similarity import Embedder


@dataclass(frozen=True)
class Neighbour:
    question_id: str
    similarity: float


class QuestionIndex:
    def __init__(self, question_ids: Sequence[str], vectors: np.ndarray, embedder_name: str) -> None:
        import faiss

        if len(set(question_ids)) != len(question_ids):
            raise DataError("question ids are not unique, so neighbours cannot be told apart")
        self.question_ids = list(question_ids)
        self.embedder_name = embedder_name
        self._row = {qid: i for i, qid in enumerate(self.question_ids)}
        self._vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self._index = faiss.IndexFlatIP(self._vectors.shape[1])
        self._index.add(self._vectors)
        self._memo: dict[tuple[str, int, float], list[Neighbour]] = {}

    @classmethod
    def build(cls, question_ids: Sequence[str], texts: Sequence[str], embedder: Embedder) -> QuestionIndex:
        return cls(question_ids, embedder.embed(list(texts)), embedder.name)

    def __len__(self) -> int:
        return len(self.question_ids)

    def neighbours(self, question_id: str, k: int, max_similarity: float) -> list[Neighbour]:
        """The ``k`` most similar other questions with similarity <= ``max_similarity``, nearest first
        (fewer when the benchmark has fewer such questions)."""
        memo_key = (question_id, k, max_similarity)
        if memo_key in self._memo:
            return self._memo[memo_key]
        row = self._row.get(question_id)
        if row is None:
            raise DataError(f"question {question_id!r} is not in the neighbour index")
        found: list[Neighbour] = []
        depth = min(len(self), k + 1)
        while k > 0:
            scores, rows = self._index.search(self._vectors[row:row + 1], depth)
            found = [Neighbour(self.question_ids[r], float(s)) for s, r in zip(scores[0], rows[0])
                     if r >= 0 and r != row and s <= max_similarity][:k]
            if len(found) == k or depth == len(self):
                break
            depth = min(len(self), depth * 4)
        self._memo[memo_key] = found
        return found
