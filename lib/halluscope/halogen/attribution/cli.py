"""`halluscope attribute RUN_URI --corpus PATH_OR_URL [--corpus-name NAME] [--models ...]`."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from halluscope.errors import ConfigError

if TYPE_CHECKING:
    from halluscope.storage.run import RunStore


def _json_object(text: str) -> dict:
    """--storage-options: a JSON object, so a typo is an argparse error, not an fsspec one."""
    try:
        value = json.loads(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not JSON: {err}") from err
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "attribute", help="trace a run's hallucinated code packages and historical meetings to a corpus "
                          "(HALOGEN §5 Type A/B/C)")
    p.add_argument("run_uri", help="the run folder, e.g. runs/<run_id> or s3://bucket/runs/<run_id>")
    p.add_argument("--corpus", required=True, nargs="+", metavar="PATH_OR_URL",
                   help="corpus files, folders or globs (.txt, .jsonl/.json, .parquet; local or fsspec URLs), "
                        "or one Elasticsearch-compatible index URL http(s)://host:port/<index>")
    p.add_argument("--corpus-name", help="name recorded with the results; default: the index or first path's name")
    p.add_argument("--models", nargs="+", help="models to attribute; default: every model in the run")
    p.add_argument("--storage-options", type=_json_object, default=None,
                   help='fsspec options for corpus URLs as JSON, e.g. \'{"anon": true}\'')
    p.add_argument("--api-key-env", help="environment variable holding the search service's API key")
    p.add_argument("--text-field", default="text", help="the search service's document text field")
    p.set_defaults(fn=main)
    return p


def _store(run_uri: str) -> RunStore:
    from halluscope.storage.fs import Location
    from halluscope.storage.run import RunStore

    loc = Location.from_url(run_uri.rstrip("/"))
    parent, _, run_id = loc.path.rpartition("/")
    if not run_id:
        raise ConfigError(f"{run_uri} does not name a run folder")
    return RunStore(Location(loc.fs, parent), run_id)


def _default_name(source: str) -> str:
    name = source.rstrip("/").rsplit("/", 1)[-1]
    return name.split(".", 1)[0] or name


def main(args: argparse.Namespace) -> int:
    from halluscope.halogen.attribution.corpus import SearchServiceCorpus, open_corpus
    from halluscope.halogen.attribution.run import SUMMARY, TABLE, attribute_run

    store = _store(args.run_uri)
    corpus = open_corpus(args.corpus, args.storage_options, args.api_key_env, args.text_field)
    name = args.corpus_name or (corpus.config.index if isinstance(corpus, SearchServiceCorpus)
                                else _default_name(args.corpus[0]))
    try:
        summary = attribute_run(store, corpus, name, args.models)
    finally:
        if isinstance(corpus, SearchServiceCorpus):
            corpus.close()
    print(f"{'model':32s} {'task':28s} {'halluc.':>7s} {'unique':>6s} {'A':>5s} {'B':>5s} {'C':>5s}  coverage")
    for s in summary:
        cov = "-" if s["coverage"] is None else f"{100 * s['coverage']:.2f}% ({s['found']}/{s['unique_units']})"
        print(f"{s['model']:32s} {s['task']:28s} {s['hallucinated_units']:7d} {s['unique_units']:6d} "
              f"{s['type_a']:5d} {s['type_b']:5d} {s['type_c']:5d}  {cov}")
    print(f"corpus {name}: results in {store.loc.child(TABLE).url} and {store.loc.child(SUMMARY).url}")
    return 0
