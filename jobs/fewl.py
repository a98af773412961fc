"""Ray job entrypoint for FEWL:
`ray job submit --runtime-env cluster/runtime_env.yaml -- python jobs/fewl.py --config URI [--run-id ID]`.

Inside a Ray job RAY_ADDRESS points at the cluster, where served reference models are deployed;
models behind an OpenAI-compatible endpoint (such as the RayService judge) need no deployment.
"""

from __future__ import annotations

import argparse
import sys

from halluscope.cli import main as cli_main


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", required=True, help="FEWL run config: path or URL (s3://bucket/configs/x.yaml)")
    p.add_argument("--run-id", help="name the run (default: time and config fingerprint)")
    args = p.parse_args()
    return cli_main(["fewl", args.config, *(["--run-id", args.run_id] if args.run_id else [])])


if __name__ == "__main__":
    sys.exit(main())
