"""`halluscope fewl CONFIG [--run-id ID]`: FEWL scores of a benchmark's answers and the paper's evaluation."""

from __future__ import annotations

import argparse


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> argparse.ArgumentParser:
    p = subparsers.add_parser("fewl", help="score a benchmark's labelled answers with FEWL (no gold answers) "
                                           "and compare with the paper's baselines")
    p.add_argument("config", help="FEWL run config: YAML path or URL (s3://...)")
    p.add_argument("--run-id", help="name the run (default: time and config fingerprint)")
    p.set_defaults(fn=main)
    return p


def main(args: argparse.Namespace) -> int:
    from halluscope.fewl.run import load_fewl_config, run_fewl

    result = run_fewl(load_fewl_config(args.config), run_id=args.run_id)
    print(result.report)
    print(f"run {result.run_id}: {result.seconds:.1f} s; results in {result.uri}")
    return 0
