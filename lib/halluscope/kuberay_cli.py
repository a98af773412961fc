"""`halluscope submit --kuberay CONFIG [--namespace NS] [--name NAME] [--image IMAGE] [--queue NAME] ...`."""

from __future__ import annotations

import argparse


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "submit", help="run a config on Kubernetes as a KubeRay RayJob (k8s/base/rayjob.yaml) and follow it")
    p.add_argument("--kuberay", required=True, metavar="CONFIG",
                   help="run config: a URL the cluster can read (s3://...) or a file in this repository "
                        "(the image carries a copy, e.g. jobs/configs/x.yaml); validated here first")
    p.add_argument("--namespace", help="default: the manifest's, else the kubeconfig context's, else 'default'")
    p.add_argument("--name", help="RayJob name, which is also the run id (the same name resumes a run; a finished "
                                "RayJob of that name is deleted first); default: the config's run_id, else "
                                "halluscope-<fingerprint[:8]>-<UTC time>")
    p.add_argument("--image", help="image for every pod, by digest: "
                                   "ghcr.io/halluscope/halluscope@sha256:<the digest docker push printed>")
    p.add_argument("--allow-tag-image", action="store_true",
                   help="accept images named by tag only (a tag can move between a submission and a retry)")
    p.add_argument("--queue", metavar="NAME",
                   help="Kueue LocalQueue of the namespace (e.g. halluscope, k8s/components/kueue): the RayJob is "
                        "created suspended with fixed group sizes (cluster.gpus, cluster.cpus of the config) and "
                        "starts once the queue admits it")
    p.add_argument("--manifest", help="a file holding the RayJob to use, e.g. the output of "
                                      "`kubectl kustomize k8s/overlays/prod`; default: k8s/base/rayjob.yaml")
    creds = p.add_mutually_exclusive_group()
    creds.add_argument("--kubeconfig", help="kubeconfig file; default: $KUBECONFIG or ~/.kube/config")
    creds.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    p.add_argument("--context", help="kubeconfig context; default: the current one")
    p.add_argument("--check", action="store_true",
                   help="only ask the cluster what the RayJob needs (KubeRay and Kueue versions, the GPU nodes' "
                        "labels, GPUs and storage, the pods' ServiceAccount) and print what is missing with its "
                        "fix; create nothing (exit 2 when something is missing)")
    p.add_argument("--no-wait", dest="wait", action="store_false", help="return once the RayJob is created")
    p.add_argument("--poll", type=_positive, default=5.0, metavar="SECONDS", help="status poll interval")
    p.add_argument("--timeout", type=_positive, metavar="SECONDS",
                   help="stop following after this long (the RayJob keeps running); default: no limit")
    p.set_defaults(fn=main)
    return p


def main(args: argparse.Namespace) -> int:
    from halluscope.kuberay import submit

    result = submit(args.kuberay, namespace=args.namespace, name=args.name, image=args.image,
                    manifest=args.manifest, kubeconfig=args.kubeconfig, context=args.context,
                    in_cluster=args.in_cluster, wait=args.wait, poll_s=args.poll, timeout_s=args.timeout,
                    allow_tag_image=args.allow_tag_image, queue=args.queue, check_only=args.check)
    if args.check:
        missing = sum(f.startswith("missing") for f in result["findings"])
        print(f"RayJob {result['namespace']}/{result['name']}: "
              + (f"{missing} thing(s) missing, nothing created" if missing else "the cluster has what it needs"))
        return 2 if missing else 0
    status = result["status"]
    state = status.get("jobDeploymentStatus") or "created"
    print(f"RayJob {result['namespace']}/{result['name']}: {state}"
          + (f" (Ray job {status['jobStatus']})" if status.get("jobStatus") else ""))
    return 0
