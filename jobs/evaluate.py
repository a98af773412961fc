"""Ray job entrypoint: `ray job submit --working-dir . -- python jobs/evaluate.py --config URI`.

Inside a Ray job RAY_ADDRESS points at the cluster, so the pipeline runs there. Without
--config it runs the embedded demo.
"""

from __future__ import annotations

import argparse
import sys

from halluscope.cli import main as cli_main


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", help="run config: path or URL (s3://bucket/configs/x.yaml)")
    p.add_argument("--run-id", help="the same id resumes a killed run")
    p.add_argument("--storage-root", help="override storage.root")
    args = p.parse_args()
    argv = ["run", *([args.config] if args.config else []), "--quiet"]
    if args.run_id:
        argv += ["--run-id", args.run_id]
    if args.storage_root:
        argv += ["--storage-root", args.storage_root]
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
