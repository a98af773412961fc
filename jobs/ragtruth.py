"""Ray job entrypoint for RAGTruth:
`ray job submit --runtime-env cluster/runtime_env.yaml -- python jobs/ragtruth.py --config URI [--run-id ID]`.

Inside a Ray job RAY_ADDRESS points at the cluster: the detector batches run there as Ray Data
actors, and served detector or generator models are deployed there with Ray Serve.
"""

from __future__ import annotations

import argparse
import sys

from halluscope.errors import HalluscopeError
from halluscope.ragtruth import cli


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", required=True, help="RAGTruth run config: path or URL (s3://bucket/configs/x.yaml)")
    p.add_argument("--run-id", help="the same id continues a killed run")
    args = p.parse_args()
    try:
        return cli.main(argparse.Namespace(config=args.config, run_id=args.run_id, progress=False))
    except HalluscopeError as err:
        print(f"halluscope: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
