"""Knowledge loaded lazily, once per worker process, and shared by every task there."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from halluscope.config import VerifierOptions
from halluscope.knowledge.pypi import SNAPSHOT, PackageIndex, normalize
from halluscope.sources import DataResolver, open_text, sha256_file
from halluscope.storage.fs import Location

if TYPE_CHECKING:
    from halluscope.knowledge.retrieval import DenseRetriever
    from halluscope.knowledge.titles import TitleIndex

T = TypeVar("T")


class WikiEvidence:
    """The top-k passages of a person's article for each of their facts (FActScore-style)."""

    def __init__(self, retriever: "DenseRetriever", top_k: int) -> None:
        self.retriever = retriever
        self.top_k = top_k

    def evidence(self, title: str, facts: list[str]) -> list[list[str]] | None:
        """Passages per fact, or None when the article is missing (the facts stay unverified)."""
        if not self.retriever.has_article(title):
            return None
        # the query names the person, as FActScore's retrieval does
        return [[p for p, _ in self.retriever.search(f"{title} {f}", self.top_k, title=title)] for f in facts]


def extra_names(path: Path) -> set[str]:
    """PEP 503-normalised names of a one-name-per-line file (blank lines and # comments skipped)."""
    with open_text(path) as f:
        return {normalize(line.strip()) for line in f if line.strip() and not line.lstrip().startswith("#")}


class Knowledge:
    def __init__(self, resolver: DataResolver, pypi_snapshot: str = SNAPSHOT,
                 options: VerifierOptions | None = None, index_root: Location | None = None,
                 clients: int = 1) -> None:
        self.resolver = resolver
        self.clients = clients  # processes holding a Knowledge at once: they share API rate limits
        self.pypi_snapshot = pypi_snapshot
        self.options = options or VerifierOptions()
        self.index_root = index_root
        self._derived: dict[str, Any] = {}

    @property
    def _cache_dir(self) -> Path:
        return Path(self.resolver.cache_dir).expanduser() / "indexes"

    @cached_property
    def pypi(self) -> PackageIndex:
        index = PackageIndex.cached(self.resolver.resolve_any(self.pypi_snapshot), self._cache_dir)
        extra = self.options.pypi_extra_names
        if extra is None:
            return index
        names = extra_names(self.resolver.resolve_any(extra))
        return PackageIndex(index.names | names, index.stdlib, f"{index.source} + {extra}", index.sha256,
                            index.skipped_lines)

    @cached_property
    def titles(self) -> "TitleIndex":
        spec = self.options.titles
        if spec is None:
            raise ValueError("verifiers.titles is not configured")
        if spec.source == "semantic_scholar":
            from halluscope.knowledge.semantic_scholar import SemanticScholarIndex

            return SemanticScholarIndex(base_url=spec.base_url, api_key_env=spec.api_key_env,
                                        rate_limit_per_s=spec.rate_limit_per_s / self.clients,
                                        fuzzy_threshold=spec.fuzzy_threshold,
                                        cache_dir=self._cache_dir / "semantic-scholar")
        from halluscope.knowledge.titles import OfflineTitleIndex

        return OfflineTitleIndex.cached(self.resolver.resolve_any(spec.dump), self._cache_dir, spec.fuzzy_threshold)

    @cached_property
    def wiki(self) -> WikiEvidence:
        spec = self.options.wiki
        if spec is None:
            raise ValueError("verifiers.wiki is not configured")
        from halluscope.knowledge.passages import ArticleStore
        from halluscope.knowledge.retrieval import DenseRetriever, Encoder

        source = spec.articles if "://" in spec.articles else str(self.resolver.resolve_any(spec.articles))
        store = ArticleStore.load(source, max_words=spec.passage_words)
        root = self.index_root or Location.from_url(f"file://{self._cache_dir}")
        return WikiEvidence(DenseRetriever.cached(store, Encoder(spec.encoder), root), spec.top_k)

    def derived(self, name: str, build: Callable[["Knowledge"], T]) -> T:
        """A source a benchmark builds from the loaded ones (LongWiki's evidence finder over ``wiki``),
        built once per worker like them: knowledge/ sits below the benchmarks and names none."""
        if name not in self._derived:
            self._derived[name] = build(self)
        return self._derived[name]

    def describe(self, needed: set[str]) -> dict:
        """Provenance of the knowledge the run's tasks use, for the manifest. Loading it here,
        in the driver, fails a bad source before any model starts and builds shared indexes once."""
        out: dict = {}
        if "pypi" in needed:
            path = self.resolver.resolve_any(self.pypi_snapshot)
            out["pypi"] = {"source": self.pypi_snapshot, "sha256": sha256_file(path), "normalisation": "PEP 503",
                           "stdlib": PackageIndex.stdlib_description(),
                           "import_name_aliases": self.options.import_name_aliases}
            if self.options.pypi_extra_names:
                extra = self.resolver.resolve_any(self.options.pypi_extra_names)
                out["pypi_extra_names"] = {"source": self.options.pypi_extra_names, "sha256": sha256_file(extra),
                                           "names": len(extra_names(extra))}
        if "titles" in needed:
            out["titles"] = self.titles.describe()
        if "wiki" in needed:
            out["wiki"] = {**self.wiki.retriever.describe(), "top_k": self.wiki.top_k}
        return out
