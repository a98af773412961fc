"""Ray job entrypoint for RAGTruth:
`ray job submit --runtime-env cluster/runtime_env.yaml -- python jobs/ragtruth.py --config URI [--run-id ID]`.

Inside a Ray job RAY_ADDRESS points at the cluster: the detector batches run there as Ray Data
actors, and served detector or generator models are deployed there with Ray Serve.
"""

from __future__ import annotations

import argparse
import sys

from halluscope.cli import main as cli_main


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", required=True, help="RAGTruth run config: path or URL (s3://bucket/configs/x.yaml)")
    p.add_argument("--run-id", help="the same id continues a killed run")
    args = p.parse_args()
    return cli_main(["ragtruth", args.config, *(["--run-id", args.run_id] if args.run_id else [])])


if __name__ == "__main__":
    sys.exit(main())
