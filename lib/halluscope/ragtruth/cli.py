"""`halluscope ragtruth CONFIG [--run-id ID]`: detector evaluation (and RAG generation) on RAGTruth."""

from __future__ import annotations

import argparse


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> argparse.ArgumentParser:
    p = subparsers.add_parser("ragtruth", help="evaluate a hallucination detector on the RAGTruth corpus, "
                                               "and the models under test on its prompts")
    p.add_argument("config", help="RAGTruth run config: YAML path or URL (s3://...)")
    p.add_argument("--run-id", help="name the run; the same id continues a killed run")
    p.add_argument("--progress", action="store_true", help="show Ray Data progress bars")
    p.set_defaults(fn=main)
    return p


def main(args: argparse.Namespace) -> int:
    from halluscope.ragtruth.run import load_ragtruth_config, run_ragtruth

    result = run_ragtruth(load_ragtruth_config(args.config), run_id=args.run_id,
                          progress=getattr(args, "progress", False))
    print(result.report)
    print(f"run {result.run_id}: {result.processed} processed, {result.skipped} already done, "
          f"{result.seconds:.1f} s; results in {result.uri}")
    return 0
