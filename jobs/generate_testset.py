"""Ray job entrypoint for HalluLens test sets:
`ray job submit --working-dir . -- python jobs/generate_testset.py --job s3://bucket/jobs/pwqa.yaml`.

Builds one test set per trial seed (reusing any built before from the same spec) and prints
their URIs, which a run config lists under ``testsets``.
"""

from __future__ import annotations

import argparse
import sys

from halluscope.cli import main as cli_main


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--job", required=True, help="test-set job YAML: path or URL")
    return cli_main(["testset", p.parse_args().job])


if __name__ == "__main__":
    sys.exit(main())
