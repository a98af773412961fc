"""`halluscope kueue CONFIG [--namespace NS] [--check]`: the Kueue objects of a config's cluster
description, or (``--check``) how the checkout's k8s/kueue and RayService differ from them."""

from __future__ import annotations

import argparse
import sys

RAYSERVICE = "k8s/service/rayservice.yaml"
KUEUE_FILES = ("k8s/kueue/resourceflavors.yaml", "k8s/kueue/clusterqueue.yaml")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "kueue", help="the Kueue ResourceFlavors and ClusterQueue a config's cluster description gives (the runs' "
                      "GPU quota: what the nodes leave once the RayService holds its maximum replicas)")
    p.add_argument("config", help="run config (YAML path or URL) with cluster.nodes, cluster.pod_gpus, cluster.service")
    p.add_argument("--namespace", default="halluscope", help="the namespace whose LocalQueue may use the quota")
    p.add_argument("--check", action="store_true",
                   help=f"instead, compare with {' and '.join(KUEUE_FILES)} and {RAYSERVICE}'s GPU group bounds "
                        "in the checkout; exit 2 naming each difference")
    p.set_defaults(fn=main)
    return p


def main(args: argparse.Namespace) -> int:
    import yaml

    from halluscope.config.load import load_config
    from halluscope.errors import ConfigError
    from halluscope.kuberay import find_checkout
    from halluscope.kueue import differences, picture, rayservice_bounds

    root = find_checkout()
    if root is None:
        raise ConfigError("halluscope kueue reads k8s/base from a checkout of halluscope: run it in one")
    cfg = load_config(args.config)
    drawn = picture(cfg.cluster, root, args.namespace)
    least, most = drawn.service_pods
    summary = (f"the RayService: {least} to {most} GPU pods; the runs: {drawn.run_gpus} GPUs, "
               f"{drawn.runs} run(s) at once")
    if not args.check:
        print(f"# {summary}\n" + yaml.safe_dump_all(drawn.objects, sort_keys=False), end="")
        return 0
    def named(objects: list[dict]) -> dict[str, dict]:
        return {f"{o.get('kind')} {(o.get('metadata') or {}).get('name')}": o for o in objects}

    shipped = named([d for f in KUEUE_FILES for d in yaml.safe_load_all((root / f).read_text()) if d])
    rendered = named(drawn.objects)
    found = [f"{k}: in {' or '.join(KUEUE_FILES)}, not in the description" for k in shipped if k not in rendered]
    found += [d for k, o in rendered.items()
              for d in (differences(o, shipped[k], k) if k in shipped else [f"{k}: missing from the checkout"])]
    found += rayservice_bounds(yaml.safe_load((root / RAYSERVICE).read_text()), drawn.service_pods)
    if found:
        print(f"{args.config}: {summary}; the checkout differs:\n  " + "\n  ".join(found), file=sys.stderr)
        return 2
    print(f"{args.config}: {summary}; the checkout agrees")
    return 0
