"""Ray job entrypoint: `ray job submit --working-dir . -- python jobs/evaluate.py --config URI`.

Inside a Ray job RAY_ADDRESS points at the cluster, so the pipeline runs there. Without
--config it runs the embedded demo. The KubeRay RayJob (k8s/base/rayjob.yaml) passes its own
name as --run-id, so each of its attempts resumes the same run.
"""

from __future__ import annotations

import argparse
import re
import sys

from halluscope.cli import main as cli_main
from halluscope.quiet import native_lines_to_log

# What Kubernetes leaves in a command when the variable a $(NAME) reference names is unset.
_UNEXPANDED = re.compile(r"\$\([A-Za-z_][A-Za-z0-9_]*\)")


def _expanded(value: str) -> str:
    """Refuse a value Kubernetes did not substitute: as a run id, the literal text would be
    one id shared by every run."""
    if _UNEXPANDED.search(value):
        raise argparse.ArgumentTypeError(f"{value!r} was not substituted: the submitter's env lacks that variable")
    return value


def cli_argv(argv: list[str] | None = None) -> list[str]:
    """The `halluscope run` arguments for this entrypoint's arguments."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", type=_expanded, help="run config: path or URL (s3://bucket/configs/x.yaml)")
    p.add_argument("--run-id", type=_expanded, help="the same id resumes a killed run")
    p.add_argument("--storage-root", help="override storage.root")
    args = p.parse_args(argv)
    out = ["run", *([args.config] if args.config else []), "--quiet"]
    if args.run_id:
        out += ["--run-id", args.run_id]
    if args.storage_root:
        out += ["--storage-root", args.storage_root]
    return out


def main(argv: list[str] | None = None) -> int:
    return cli_main(cli_argv(argv))


if __name__ == "__main__":
    native_lines_to_log()  # a process of its own: Ray's C++ lines to the log file, as the command does
    sys.exit(main())
