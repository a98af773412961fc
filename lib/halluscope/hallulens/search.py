"""Web search behind one interface: checking that a generated entity name does not exist.

HalluLens keeps a generated name only if no top-3 web result of ``"{type} named {name}[ in {place}]"``
has the name in its title and the type in its snippet (the authors use the Brave Search API; the
paper allows any search API). ``BraveSearch`` is that client; ``FixtureSearchProvider`` answers
from a dict or JSON file, for tests and offline runs. A search that fails raises ``SearchError``:
the caller counts the name as unchecked and never treats it as nonexistent.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
from pydantic import BaseModel, ConfigDict, Field

from halluscope.errors import ConfigError, HalluscopeError
from halluscope.ratelimit import MinInterval
from halluscope.retry import GaveUp, RetryPolicy, Transient, retry_after_s

BRAVE_WEB_SEARCH = "https://api.search.brave.com/res/v1/web/search"
_TAG = re.compile(r"<[^>]+>")
_SNIPPET_CHARS = 200


class SearchError(HalluscopeError):
    """One query got no answer (after its retries)."""


@dataclass(frozen=True)
class SearchResult:
    title: str
    snippet: str
    url: str = ""


class SearchProvider(Protocol):
    def search(self, query: str, count: int = 3) -> list[SearchResult]:
        """The top ``count`` web results, best first; raises ``SearchError`` when it cannot answer."""
        ...

    def describe(self) -> dict[str, Any]: ...


def entity_query(kind: str, name: str, place: str | None = None) -> str:
    return f"{kind} named {name}" + (f" in {place}" if place else "")


def entity_exists(results: list[SearchResult], kind: str, name: str) -> bool:
    """A result names the entity: the name is in its title and the type in its snippet.

    Compared casefolded (the authors compare the title case-sensitively): a name that differs from
    a real one only in case counts as existing, which errs towards dropping names."""
    name_key, kind_key = name.casefold(), kind.casefold()
    return any(name_key in r.title.casefold() and kind_key in r.snippet.casefold() for r in results)


class BraveSearchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    api_key_env: str = Field(default="BRAVE_API_KEY", description="environment variable holding the key")
    base_url: str = BRAVE_WEB_SEARCH
    rate_limit_per_s: float = Field(default=1.0, gt=0, description="requests per second (Brave's free plan: 1)")
    max_retries: int = Field(default=4, ge=0)
    backoff_s: float = Field(default=1.0, ge=0, description="cap of the first (random) retry delay, doubled per retry")
    max_backoff_s: float = Field(default=30.0, ge=0)
    timeout_s: float = Field(default=20.0, gt=0)


def _text(value: Any) -> str:
    return html.unescape(_TAG.sub("", value)) if isinstance(value, str) else ""


class BraveSearch:
    """The Brave web search API (``X-Subscription-Token`` header); safe to share between threads.

    Every request, retries included, waits for a rate-limit slot. 429, 5xx, timeouts and dropped
    connections are retried under ``halluscope.retry``'s policy (a ``Retry-After`` header is
    honoured, up to ``max_backoff_s``); a rejected key (401/403) is a ``ConfigError``; other
    answers a ``SearchError``."""

    def __init__(self, config: BraveSearchConfig | None = None) -> None:
        self.config = config or BraveSearchConfig()
        if not self.config.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"brave search base_url must be an http(s) URL, got {self.config.base_url!r}")
        key = os.environ.get(self.config.api_key_env)
        if not key:
            raise ConfigError(f"environment variable {self.config.api_key_env} (Brave Search API key) is not set")
        self._client = httpx.Client(timeout=self.config.timeout_s,
                                    headers={"X-Subscription-Token": key, "Accept": "application/json",
                                             "User-Agent": "halluscope"})
        self._limiter = MinInterval(self.config.rate_limit_per_s)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> BraveSearch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def describe(self) -> dict[str, Any]:
        c = self.config
        return {"kind": "brave", "base_url": c.base_url, "api_key_env": c.api_key_env,
                "rate_limit_per_s": c.rate_limit_per_s, "max_retries": c.max_retries}

    def search(self, query: str, count: int = 3) -> list[SearchResult]:
        c = self.config
        try:
            response = RetryPolicy(c.max_retries, c.backoff_s, c.max_backoff_s).run(
                lambda attempt: self._get(query, count))
        except GaveUp as out:
            raise SearchError(f"Brave Search gave no answer for {query!r} after {out.attempts} tries: "
                              f"{out.reason}") from None
        return self._results(response, query)[:count]

    def _get(self, query: str, count: int) -> httpx.Response:
        """One request in its rate-limit slot: a 200 answer, ``Transient``, or a final error."""
        c = self.config
        self._limiter.wait()
        try:
            response = self._client.get(c.base_url, params={"q": query, "count": count})
        except httpx.TimeoutException:
            raise Transient("timeout") from None
        except httpx.TransportError as err:
            raise Transient(f"connection error ({type(err).__name__})") from None
        status = response.status_code
        if status in (401, 403):
            raise ConfigError(f"Brave Search rejected the API key in {c.api_key_env} (HTTP {status})")
        if status == 429 or status >= 500:
            raise Transient(f"HTTP {status}", retry_after_s(response.headers.get("Retry-After")))
        if status != 200:
            raise SearchError(f"Brave Search answered HTTP {status} for {query!r}: {response.text[:_SNIPPET_CHARS]}")
        return response

    @staticmethod
    def _results(response: httpx.Response, query: str) -> list[SearchResult]:
        try:
            doc = response.json()
        except ValueError:
            raise SearchError(f"Brave Search answered non-JSON for {query!r}: "
                              f"{response.text[:_SNIPPET_CHARS]}") from None
        web = doc.get("web") if isinstance(doc, dict) else None
        results = web.get("results") if isinstance(web, dict) else None
        if not isinstance(results, list):
            return []  # no web results for this query
        return [SearchResult(_text(r.get("title")), _text(r.get("description")), _text(r.get("url")))
                for r in results if isinstance(r, dict)]


class FixtureSearchProvider:
    """Canned results: query -> list of ``{title, snippet, url}``; an unknown query has no results,
    and ``{"error": "..."}`` as a query's value makes its search fail (e.g. ``"RATE_LIMITED"``)."""

    def __init__(self, results: Mapping[str, Any]) -> None:
        self.results = dict(results)
        self.queries: list[str] = []

    @classmethod
    def from_json(cls, path: str | Path) -> FixtureSearchProvider:
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise ConfigError(f"cannot read the search fixture {path}: {err}") from None
        if not isinstance(doc, dict):
            raise ConfigError(f"the search fixture {path} must be a JSON object of query -> results")
        return cls(doc)

    def describe(self) -> dict[str, Any]:
        return {"kind": "fixture", "queries": len(self.results)}

    def search(self, query: str, count: int = 3) -> list[SearchResult]:
        self.queries.append(query)
        entry = self.results.get(query, [])
        if isinstance(entry, dict) and "error" in entry:
            raise SearchError(f"fixture search for {query!r} fails: {entry['error']}")
        return [SearchResult(r.get("title", ""), r.get("snippet", ""), r.get("url", "")) for r in entry][:count]
