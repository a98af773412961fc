"""Title lookups against the Semantic Scholar Graph API, as HALOGEN verifies generated references.

Each title goes to ``{base_url}/paper/search/match`` (Semantic Scholar's best title match; a 404
means no match). The returned title counts as the same paper when it equals the query after
``normalize_title`` (HALOGEN's released scorer compares lower-cased, punctuation-stripped titles),
or, with ``fuzzy_threshold``, when their ``title_similarity`` reaches it (rule ``FUZZY_RULE``).

Answers (a title, or "no match") are kept in an SQLite file under ``cache_dir`` keyed by the
normalised query, shared by processes and runs; failures are never cached. A lookup that fails
after its retries answers ``supported=None``; ``max_consecutive_failures`` of them in a row raise
``EndpointDown`` and every later lookup raises too, so a run stops instead of leaving thousands of
titles unverified.

The rate limit holds per instance (per process): verifier actors that each hold one share
Semantic Scholar's limit between them, so give each ``rate_limit_per_s`` divided by their number.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from halluscope.errors import ConfigError, DataError, EndpointDown
from halluscope.knowledge.titles import (
    NORMALISATION,
    TitleMatch,
    check_threshold,
    match_rule,
    normalize_title,
    title_similarity,
)
from halluscope.ratelimit import MinInterval
from halluscope.retry import GaveUp, RetryPolicy, Transient, retry_after_s

DEFAULT_BASE_URL = "https://api.semanticscholar.org/graph/v1"
ENDPOINT = "paper/search/match"
_SNIPPET_CHARS = 200


class _Unanswered(Exception):
    """A lookup got no definite answer (after its retries, where retrying made sense)."""


class SemanticScholarIndex:
    """TitleIndex backed by the Semantic Scholar Graph API; safe to share between threads."""

    def __init__(self, base_url: str = DEFAULT_BASE_URL, api_key_env: str | None = "S2_API_KEY",
                 rate_limit_per_s: float = 1.0, timeout_s: float = 30.0, max_retries: int = 4,
                 cache_dir: str | Path | None = None, fuzzy_threshold: float | None = None,
                 max_consecutive_failures: int = 5, backoff_s: float = 1.0, max_backoff_s: float = 60.0) -> None:
        """``api_key_env`` names the variable holding the key (sent as ``x-api-key``); None sends
        no key and shares Semantic Scholar's public, more tightly limited pool."""
        self._args = {k: v for k, v in locals().items() if k != "self"}  # the constructor's arguments
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"semantic scholar base_url must be an http(s) URL, got {base_url!r}")
        if rate_limit_per_s <= 0 or timeout_s <= 0 or max_retries < 0 or max_consecutive_failures < 1 \
                or backoff_s < 0 or max_backoff_s < 0:
            raise ConfigError("semantic scholar settings out of range: rate_limit_per_s and timeout_s must be "
                              "> 0, max_retries >= 0, max_consecutive_failures >= 1, backoffs >= 0")
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.rate_limit_per_s = rate_limit_per_s
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.fuzzy_threshold = check_threshold(fuzzy_threshold)
        self.max_consecutive_failures = max_consecutive_failures
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        headers = {"User-Agent": "halluscope"}
        if api_key_env is not None:
            key = os.environ.get(api_key_env)
            if not key:
                raise ConfigError(f"environment variable {api_key_env} (Semantic Scholar API key) is not set")
            headers["x-api-key"] = key
        # The cache file is per base URL: another deployment (e.g. an internal API) may answer differently.
        url_hash = hashlib.sha256(self.base_url.encode()).hexdigest()[:12]
        self.cache_path = None if cache_dir is None else \
            Path(cache_dir).expanduser() / f"semantic-scholar-{url_hash}.sqlite"
        self._client = httpx.Client(headers=headers, timeout=timeout_s)
        self._limiter = MinInterval(rate_limit_per_s)
        self._lock = threading.Lock()
        self._failures = 0
        self._db: sqlite3.Connection | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Only the settings travel (e.g. to a Ray worker); the key is read again from the environment there."""
        return dict(self._args)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def close(self) -> None:
        self._client.close()
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def describe(self) -> dict[str, Any]:
        return {"kind": "semantic-scholar", "base_url": self.base_url, "endpoint": ENDPOINT,
                "normalisation": NORMALISATION, "match": match_rule(self.fuzzy_threshold),
                "api_key_env": self.api_key_env, "rate_limit_per_s": self.rate_limit_per_s,
                "max_retries": self.max_retries,
                "cache": None if self.cache_path is None else str(self.cache_path)}

    def lookup(self, title: str) -> TitleMatch:
        query = normalize_title(title)
        if not query:
            return TitleMatch(False, "empty title after normalisation")
        with self._lock:
            if self._failures >= self.max_consecutive_failures:
                raise EndpointDown(f"semantic scholar at {self.base_url} is down: "
                                   f"{self._failures} title lookups in a row failed")
        cached, found = self._cache_get(query)
        if not cached:
            try:
                found = self._fetch(title.strip())
            except _Unanswered as err:
                return self._failed(str(err))
            with self._lock:
                self._failures = 0
            self._cache_put(query, found)
        return self._decide(query, found)

    def _decide(self, query: str, found: str | None) -> TitleMatch:
        if found is None:
            return TitleMatch(False, "no match in semantic scholar")
        norm = normalize_title(found)
        if norm == query:
            return TitleMatch(True, f"exact: {found}")
        ratio = title_similarity(norm, query)
        if self.fuzzy_threshold is not None and ratio >= self.fuzzy_threshold:
            return TitleMatch(True, f"fuzzy {ratio:.3f}: {found}")
        return TitleMatch(False, f"closest semantic scholar title differs ({ratio:.3f}): {found}")

    def _failed(self, reason: str) -> TitleMatch:
        with self._lock:
            self._failures += 1
            in_a_row = self._failures
        if in_a_row >= self.max_consecutive_failures:
            raise EndpointDown(f"semantic scholar at {self.base_url} is down: {in_a_row} title lookups "
                               f"in a row failed (last: {reason})")
        return TitleMatch(None, f"semantic scholar unreachable: {reason}")

    def _fetch(self, title: str) -> str | None:
        """The best-matching title, or None when Semantic Scholar has no match (404); retried under
        ``halluscope.retry``'s policy."""
        policy = RetryPolicy(self.max_retries, self.backoff_s, self.max_backoff_s)
        try:
            return policy.run(lambda attempt: self._fetch_once(title))
        except GaveUp as out:
            raise _Unanswered(str(out)) from None

    def _fetch_once(self, title: str) -> str | None:
        """One request in its rate-limit slot: the answer, ``_Unanswered``, or ``Transient``."""
        self._limiter.wait()
        try:
            response = self._client.get(f"{self.base_url}/{ENDPOINT}", params={"query": title, "fields": "title"})
        except httpx.TransportError as err:
            raise Transient(f"{type(err).__name__}: {err}") from None
        status = response.status_code
        if status == 200:
            return _matched_title(response)
        if status == 404:
            return None
        if status in (401, 403):
            raise ConfigError(f"semantic scholar at {self.base_url} refused the request (HTTP {status}); "
                              f"check the API key in {self.api_key_env or '(none configured)'}")
        if status != 429 and status < 500:
            raise _Unanswered(f"HTTP {status}: {response.text[:_SNIPPET_CHARS]}")
        raise Transient(f"HTTP {status}", retry_after_s(response.headers.get("Retry-After")))

    def _connection(self) -> sqlite3.Connection:
        """Opened on first use; callers hold ``self._lock``."""
        if self._db is None:
            assert self.cache_path is not None
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.cache_path, timeout=30.0, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")  # readers in other processes do not block writers
            db.execute("CREATE TABLE IF NOT EXISTS matches "
                       "(query TEXT PRIMARY KEY, title TEXT, fetched_at REAL NOT NULL)")
            db.commit()
            self._db = db
        return self._db

    def _cache_get(self, query: str) -> tuple[bool, str | None]:
        """(found in the cache, the answer: a title, or None for "no match")."""
        if self.cache_path is None:
            return False, None
        try:
            with self._lock:
                row = self._connection().execute("SELECT title FROM matches WHERE query = ?", (query,)).fetchone()
        except sqlite3.Error as err:
            raise DataError(f"cannot read the semantic scholar cache {self.cache_path}: {err}") from None
        return (False, None) if row is None else (True, row[0])

    def _cache_put(self, query: str, title: str | None) -> None:
        if self.cache_path is None:
            return
        try:
            with self._lock:
                db = self._connection()
                db.execute("INSERT OR REPLACE INTO matches VALUES (?, ?, ?)", (query, title, time.time()))
                db.commit()
        except sqlite3.Error as err:
            raise DataError(f"cannot write the semantic scholar cache {self.cache_path}: {err}") from None


def _matched_title(response: httpx.Response) -> str | None:
    """The title of the match in a 200 answer (None for an empty ``data`` list); a malformed answer
    is a failure, not retried."""
    try:
        data = response.json()["data"]
        if not data:
            return None
        title = data[0]["title"]
        if isinstance(title, str) and title:
            return title
    except (ValueError, KeyError, IndexError, TypeError):
        pass
    raise _Unanswered(f"unexpected answer: {response.text[:_SNIPPET_CHARS]}")
