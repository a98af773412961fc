"""Knowledge loaded lazily, once per worker process, and shared by every task there.

It names no benchmark: a task reads its benchmark's options (``options_for``) and asks for the
sources they name (a package index, a title index, an article store), each loaded once per spec."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from halluscope.knowledge.pypi import SNAPSHOT, PackageIndex, normalize
from halluscope.sources import DataResolver, open_text, sha256_file
from halluscope.storage.fs import Location

if TYPE_CHECKING:
    from pydantic import BaseModel

    from halluscope.knowledge.retrieval import DenseRetriever
    from halluscope.knowledge.specs import TitleIndexSpec, WikiSpec
    from halluscope.knowledge.titles import TitleIndex

T = TypeVar("T")


class WikiEvidence:
    """The top-k passages of a person's article for each of their facts (FActScore-style)."""

    def __init__(self, retriever: DenseRetriever, top_k: int) -> None:
        self.retriever = retriever
        self.top_k = top_k

    def evidence(self, title: str, facts: list[str]) -> list[list[str]] | None:
        """Passages per fact, or None when the article is missing (the facts stay unverified)."""
        if not self.retriever.has_article(title):
            return None
        # the query names the person, as FActScore's retrieval does
        found = self.retriever.search_many([f"{title} {f}" for f in facts], self.top_k, title=title)
        return [[p for p, _ in passages] for passages in found]

    def describe(self) -> dict:
        """The manifest's entry: the article store and index, and the passages per fact."""
        return {**self.retriever.describe(), "top_k": self.top_k}


def extra_names(path: Path) -> set[str]:
    """PEP 503-normalised names of a one-name-per-line file (blank lines and # comments skipped)."""
    with open_text(path) as f:
        return {normalize(line.strip()) for line in f if line.strip() and not line.lstrip().startswith("#")}


class Knowledge:
    def __init__(self, resolver: DataResolver, index_root: Location | None = None, clients: int = 1,
                 options: Mapping[str, BaseModel] | None = None) -> None:
        self.resolver = resolver
        self.clients = clients  # processes holding a Knowledge at once: they share API rate limits
        self.index_root = index_root
        self._options = dict(options or {})  # benchmark name -> its validated section of the run
        self._loaded: dict[tuple, Any] = {}
        self._derived: dict[str, Any] = {}

    @property
    def cache_dir(self) -> Path:
        """Where the package and title indexes built from data files persist."""
        return Path(self.resolver.cache_dir).expanduser() / "indexes"

    def options_for(self, benchmark: str) -> BaseModel:
        """The run's ``benchmarks.<benchmark>`` section, validated; its defaults when the run
        handed none (a task built outside a run)."""
        if benchmark not in self._options:
            from halluscope.task_registry import benchmarks

            self._options[benchmark] = benchmarks()[benchmark].parse_options(None)
        return self._options[benchmark]

    def _once(self, key: tuple, load: Callable[[], T]) -> T:
        if key not in self._loaded:
            self._loaded[key] = load()
        return self._loaded[key]

    def packages(self, snapshot: str = SNAPSHOT, extra: str | None = None) -> PackageIndex:
        """A package index: the names of ``snapshot`` (a data name, path or URL of a one-name-per-line
        list) and of ``extra``, a list of names accepted beside it, with the standard library."""
        def load() -> PackageIndex:
            index = PackageIndex.cached(self.resolver.resolve_any(snapshot), self.cache_dir)
            if extra is None:
                return index
            names = extra_names(self.resolver.resolve_any(extra))
            return PackageIndex(index.names | names, index.stdlib, f"{index.source} + {extra}", index.sha256,
                                index.skipped_lines)

        return self._once(("packages", snapshot, extra), load)

    def titles(self, spec: TitleIndexSpec) -> TitleIndex:
        """The title index a spec names: an offline dump, or Semantic Scholar's API (its rate limit
        shared by the ``clients``)."""
        def load() -> TitleIndex:
            if spec.source == "semantic_scholar":
                from halluscope.knowledge.semantic_scholar import SemanticScholarIndex

                return SemanticScholarIndex(base_url=spec.base_url, api_key_env=spec.api_key_env,
                                            rate_limit_per_s=spec.rate_limit_per_s / self.clients,
                                            fuzzy_threshold=spec.fuzzy_threshold,
                                            cache_dir=self.cache_dir / "semantic-scholar")
            from halluscope.knowledge.titles import OfflineTitleIndex

            assert spec.dump is not None  # the spec's validator requires it offline
            return OfflineTitleIndex.cached(self.resolver.resolve_any(spec.dump), self.cache_dir,
                                            spec.fuzzy_threshold)

        return self._once(("titles", spec.model_dump_json()), load)

    def wiki(self, spec: WikiSpec) -> WikiEvidence:
        """Passages of the articles a spec names, by dense retrieval; the index persists under
        ``index_root`` (the data cache without one)."""
        def load() -> WikiEvidence:
            from halluscope.knowledge.passages import ArticleStore
            from halluscope.knowledge.retrieval import DenseRetriever, Encoder

            source = spec.articles if "://" in spec.articles else str(self.resolver.resolve_any(spec.articles))
            store = ArticleStore.load(source, max_words=spec.passage_words)
            root = self.index_root or Location.from_url(f"file://{self.cache_dir}")
            return WikiEvidence(DenseRetriever.cached(store, Encoder(spec.encoder), root), spec.top_k)

        return self._once(("wiki", spec.model_dump_json()), load)

    def derived(self, name: str, build: Callable[[Knowledge], T]) -> T:
        """A source a benchmark builds from the loaded ones (LongWiki's evidence finder over its
        article store), built once per worker like them: knowledge/ sits below the benchmarks and
        names none."""
        if name not in self._derived:
            self._derived[name] = build(self)
        return self._derived[name]

    def package_provenance(self, snapshot: str = SNAPSHOT, extra: str | None = None) -> dict[str, dict]:
        """The manifest's entries of a package index: ``pypi`` (the snapshot) and, with extra
        names, ``pypi_extra_names``."""
        out: dict[str, dict] = {"pypi": {"source": snapshot, "sha256": sha256_file(self.resolver.resolve_any(snapshot)),
                                         "normalisation": "PEP 503", "stdlib": PackageIndex.stdlib_description()}}
        if extra:
            path = self.resolver.resolve_any(extra)
            out["pypi_extra_names"] = {"source": extra, "sha256": sha256_file(path), "names": len(extra_names(path))}
        return out
