"""`halluscope run | plan | serve | tasks | report | testset | submit`, and the commands benchmarks add
(HALOGEN's `attribute`)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING

from halluscope.errors import (
    ConfigError,
    HalluscopeError,
    Interrupted,
    OverBudget,
    StorageError,
    StorageFull,
    error_summary,
    user_error,
)
from halluscope.kuberay_cli import add_parser as add_submit_parser
from halluscope.kueue_cli import add_parser as add_kueue_parser
from halluscope.quiet import native_lines_to_log
from halluscope.report.escape import terminal
from halluscope.service_logs_cli import add_parser as add_keep_logs_parser
from halluscope.storage.fs import Location
from halluscope.storage.names import RUN_ID_RULE, root_problem, run_id_problem
from halluscope.task_registry import benchmarks

if TYPE_CHECKING:
    from halluscope.resolve.run import ResolvedRun
    from halluscope.storage.run import RunStore


def _cmd_run(args: argparse.Namespace) -> int:
    from halluscope.config.load import default_config, load_config
    from halluscope.pipeline.calibration import calibrate
    from halluscope.pipeline.runner import default_run_id, run
    from halluscope.resolve.run import ResolvedRun

    cfg = load_config(args.config) if args.config else default_config()
    if args.storage_root:
        cfg.storage.root = args.storage_root
    if args.max_items_per_task:  # a pilot of the config: its own run, whose manifest records the limit
        cfg.limits.max_items_per_task = args.max_items_per_task
    resolved = ResolvedRun.of(cfg)
    run_id = args.run_id or cfg.run_id or default_run_id(resolved)
    try:
        agreement = calibrate(resolved, progress=not args.quiet) if cfg.calibration else []
        result = run(resolved, run_id=run_id, progress=not args.quiet, retry_failed=not args.keep_failed,
                     agreement=agreement)
    except StorageError as err:
        if isinstance(err, StorageFull):  # its manifest may be unwritable too: the command, whatever it says
            print(f"halluscope: once space is freed, resume run {run_id} (committed work is kept):\n"
                  f"  {_resume_command(args, run_id)}", file=sys.stderr)
        raise  # nothing was recorded where the storage does not answer, and asking it again takes as long
    except (Exception, KeyboardInterrupt) as err:
        setattr(err, _RESUME, _resume_hint(resolved, args, run_id))  # printed last, after the error (main)
        raise
    print(result.leaderboard)
    for note in _input_notes(resolved, result):
        print(note)
    print(f"run {result.run_id}: {result.processed} generations processed, {result.skipped} already done, "
          f"{result.seconds:.1f} s; results in {result.uri}")
    if result.failure:
        print(f"halluscope: error: run {result.run_id} FAILED: {terminal(result.failure)}\n"
              f"(manifest.json records status failed; max_error_fraction in the config sets how many "
              f"failed generations a run tolerates)", file=sys.stderr)
        return 1
    return 0


def _input_notes(resolved: ResolvedRun, result) -> list[str]:
    """Items with no recorded response and rows set aside in the run's quarantine, per model and
    task: a replay file that covers part of a task is no error of the run, but the user should know
    which items were left out, which rows could not be used, and where the quarantine is."""
    from halluscope.report.leaderboard import input_notes
    from halluscope.storage.run import RunStore

    # a "file" model without a path never gets this far (its replay is refused before the run)
    files = {m.id: m.replay_file for m in resolved.cfg.models if m.replay_file is not None}
    store = RunStore(resolved.root, result.run_id)
    return input_notes(result.missing, files, store.read_table("quarantine"), store.loc.child("quarantine").url)


def _resume_hint(resolved: ResolvedRun, args: argparse.Namespace, run_id: str) -> str | None:
    """The exact command that continues a run this command left failed or interrupted."""
    from halluscope.storage.run import RunStore

    try:
        manifest = RunStore(resolved.root, run_id).read_json("manifest.json")
    except (OSError, HalluscopeError):
        return None
    if not manifest or manifest.get("status") not in ("failed", "interrupted", "over_budget"):
        return None
    first = " raise costs.budget_usd in its config, then" if manifest["status"] == "over_budget" else ""
    return (f"halluscope: run {run_id} is recorded as {manifest['status']}; to resume it (committed work is "
            f"kept),{first}:\n  {_resume_command(args, run_id)}")


def _resume_command(args: argparse.Namespace, run_id: str) -> str:
    return shlex.join([_prog(), "run", *([args.config] if args.config else []), "--run-id", run_id,
                       *(["--storage-root", args.storage_root] if args.storage_root else []),
                       *(["--max-items-per-task", str(args.max_items_per_task)] if args.max_items_per_task else [])])


def _prog() -> str:
    """The command as it can be typed here: `halluscope` when that is on PATH, else its path
    (e.g. .venv/bin/halluscope)."""
    exe = sys.argv[0]
    if os.path.basename(exe) != "halluscope":  # python -m halluscope.cli, a job entrypoint
        return "halluscope"
    on_path = shutil.which("halluscope")
    if on_path and os.path.samefile(on_path, exe):
        return "halluscope"
    rel = os.path.relpath(exe)
    return exe if rel.startswith("..") else rel


def _cmd_plan(args: argparse.Namespace) -> int:
    from halluscope.config.load import load_config
    from halluscope.pipeline.estimate import check_budget, plan
    from halluscope.pipeline.token_stats import TokenStats
    from halluscope.resolve.run import ResolvedRun
    from halluscope.resolve.tables import cache_location

    cfg = load_config(args.config)
    stats = TokenStats.from_runs(args.stats, cfg.storage) if args.stats else None
    try:
        cache, skipped = cache_location(cfg), None
    except ConfigError as err:  # a plan writes nothing: storage credentials only let it look in the cache
        cache, skipped = None, f"the call cache was not looked in ({err}): every call is planned as new"
    estimate = plan(ResolvedRun.of(cfg, args.throughput, cache=cache), stats)
    if skipped and any(not m.replayed for m in cfg.models):
        estimate.notes.insert(0, skipped)
    print(json.dumps(estimate.as_dict(), indent=2) if args.json else estimate.table())
    if cfg.costs.budget_usd is not None:
        check_budget(estimate, cfg.costs.budget_usd)
        # on stderr with --json, so stdout stays one JSON document
        print(f"within costs.budget_usd ${cfg.costs.budget_usd:,.2f}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _cmd_testset(args: argparse.Namespace) -> int:
    builders = {name: b.testsets for name, b in benchmarks().items() if b.testsets is not None}
    name = args.benchmark or (next(iter(builders)) if len(builders) == 1 else None)
    if name not in builders:
        what = "name one" if name is None else f"'{name}' builds none"
        raise ConfigError(f"testset --benchmark: {what}; benchmarks that build test sets: "
                          f"{', '.join(sorted(builders)) or 'none'}")
    for uri, summary in builders[name](args.job):
        print(uri)
        print("  " + summary.replace("\n", "\n  "))
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    """Serve a run config's served models (scripted, hf, vllm) until interrupted, or with --down
    delete them (a killed driver leaves them running); a Ray Serve config file (with
    `applications:`, as in serve/) is handed to `serve run`."""
    import time

    from halluscope.config.load import parse_config
    from halluscope.config.reader import read_yaml

    doc = read_yaml(args.config, "config")
    if isinstance(doc, dict) and "applications" in doc:
        os.execvp("serve", ["serve", "run", args.config])
    from halluscope.runkit import init_ray, is_served
    from halluscope.serving.app import deploy_over_http, remove, shutdown

    cfg = parse_config(doc, args.config)
    served = [m for m in cfg.models if is_served(m)]
    if not served:
        raise HalluscopeError(f"{args.config} has no served models (backend hf, vllm, or scripted not in_process)")
    init_ray(cfg.ray)
    if args.down:
        deleted = remove(m.id for m in served)
        print(f"deleted Serve app(s): {', '.join(deleted)}" if deleted else "none of its models was being served")
        return 0
    endpoints = deploy_over_http(served, http_port=args.http_port or cfg.serve_http_port)
    for e in endpoints.values():
        print(f"{e.model_id}: {e.base_url} (Serve app {e.app_name})")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        shutdown(endpoints)
    return 0


def _cmd_tasks(args: argparse.Namespace) -> int:
    for bench in sorted(benchmarks().values(), key=lambda b: b.name):
        print(f"# {bench.name}" + (f": {bench.description}" if bench.description else ""))
        for task in sorted(bench.tasks, key=lambda t: t.name):
            d = task.describe()
            print(f"{task.name:40s} {d['kind']:9s} D={d['decomposer']}  V={d['verifier']}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:

    loc = Location.from_url(args.run_uri.rstrip("/"))
    loc.check_reachable("run")  # in seconds, not botocore's minute of retries
    board = loc.child("leaderboard.md")
    if not board.exists():
        if not loc.child("manifest.json").exists():
            raise HalluscopeError(f"no manifest.json in {args.run_uri}: is it a halluscope run folder?")
        print(terminal(_partial_report(loc)))
        return 0
    store = _store_at(loc)
    if args.json:  # JSON only, so that it can be piped; the run's dollars as the leaderboard and plan give them
        from halluscope.report.leaderboard import json_records

        print(json.dumps(json_records(store), indent=2, sort_keys=True))  # keys sorted as metrics.json has them
        return 0
    print(terminal((store.read_view("leaderboard.md") or b"").decode()))  # a stored file: its ids may carry escapes
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from halluscope.report.status import status_doc, status_text

    loc = Location.from_url(args.run_uri.rstrip("/"))
    loc.check_reachable("run")
    manifest = json.loads(loc.child("manifest.json").read_bytes()) if loc.child("manifest.json").exists() else None
    progress = json.loads(loc.child("progress.json").read_bytes()) if loc.child("progress.json").exists() else None
    if manifest is None and progress is None:
        raise HalluscopeError(f"no manifest.json in {args.run_uri}: is it a halluscope run folder?")
    doc = status_doc(loc.path.rstrip("/").rsplit("/", 1)[-1], manifest, progress)
    print(json.dumps(doc, indent=2, sort_keys=True) if args.json else status_text(doc))
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from halluscope.report.show import show

    print(show(_run_store(args.run_uri), args.model, args.task, args.item, args.hallucinated))
    return 0


def _run_store(uri: str) -> RunStore:
    """The run folder a URI names, checked to be one."""
    loc = Location.from_url(uri.rstrip("/"))
    loc.check_reachable("run")
    if not loc.child("manifest.json").exists():
        raise HalluscopeError(f"no manifest.json in {uri}: is it a halluscope run folder?")
    return _store_at(loc)


def _store_at(loc: Location) -> RunStore:
    from halluscope.storage.run import RunStore

    path = loc.path.rstrip("/")
    return RunStore(Location(loc.fs, path.rsplit("/", 1)[0]), path.rsplit("/", 1)[-1])


def _cmd_compare(args: argparse.Namespace) -> int:
    from halluscope.report.compare import compare, compare_text

    rows = compare(_run_store(args.run_a), _run_store(args.run_b), args.model)
    print(json.dumps(rows, indent=2) if args.json else compare_text(rows, args.run_a, args.run_b))
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from halluscope.config.load import load_config
    from halluscope.config.schema import CalibrationSpec
    from halluscope.contract.metrics import MetricRecord
    from halluscope.pipeline.calibration import calibrate
    from halluscope.report.agreement import agreement_section
    from halluscope.report.render import markdown_blocks, render_markdown
    from halluscope.resolve.run import ResolvedRun

    cfg = load_config(args.config)
    if args.throughput:
        return _calibrate_speed(ResolvedRun.of(cfg, cache=None), args)  # a measurement looks in no call cache
    spec = cfg.calibration or CalibrationSpec()
    if args.items_per_model is not None:
        spec = spec.model_copy(update={"items_per_model": args.items_per_model})
    records: list[MetricRecord] = calibrate(ResolvedRun.of(cfg), spec, progress=not args.quiet)
    if args.json:
        print(json.dumps([r.as_json() for r in records], indent=2))
        return 0
    section = agreement_section(records)
    print(render_markdown("halluscope calibrate", markdown_blocks([section] if section else [])))
    return 0


def _calibrate_speed(resolved: ResolvedRun, args: argparse.Namespace) -> int:
    from halluscope.pipeline.engine_speed import calibrate_speed, table_path, write_table

    out = table_path(args.throughput)
    table, speeds = calibrate_speed(resolved, args.calls)
    write_table(table, out)
    if args.json:
        print(json.dumps([s.as_dict() for s in speeds], indent=2))
        return 0
    for s in speeds:
        up = "a shared service's engine, already up" if s.deploy_s is None else f"deployed in {s.deploy_s:.1f} s"
        print(f"{s.model}: {up}; prefill {s.prefill_tokens_per_s:,.0f} tokens/s "
              f"({s.prefill_tokens} tokens, {s.calls} calls at once), decode {s.decode_tokens_per_s:,.1f} tokens/s "
              f"({s.decode_output_tokens} tokens)")
    print(f"wrote {args.throughput}: plan with it as `halluscope plan --throughput {args.throughput} CONFIG`")
    return 0


def _partial_report(loc) -> str:
    """A running (or killed) run: per-model progress and the metrics of what is committed so far."""
    from halluscope.config.load import parse_config
    from halluscope.pipeline.aggregate import aggregate
    from halluscope.report.leaderboard import leaderboard
    from halluscope.storage.run import RunStore

    manifest = json.loads(loc.child("manifest.json").read_bytes())
    store = RunStore(Location(loc.fs, loc.path.rsplit("/", 1)[0]), manifest["run_id"])
    lines = [f"run {manifest['run_id']} is {manifest.get('status', 'running')}: partial results"]
    lines += [f"reason: {manifest['reason']}", ""] if manifest.get("reason") else [""]
    progress = store.read_json("progress.json") or {"models": {}}
    for model, m in progress["models"].items():
        lines.append(f"{model}: {m['done']}/{m['total']} generations committed")
    cfg = parse_config(manifest["config"], f"{loc.url}/manifest.json", stored=True)
    lines += ["", leaderboard(aggregate(store, cfg.tasks, cfg.models, cfg.options_for).metrics, manifest["run_id"])]
    return "\n".join(lines)


def _count(value: str) -> int:
    """An argparse type for a count of at least 1."""
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"a whole number of at least 1, not {value!r}")
    return int(value)


def _arg(problem: Callable[[str], str | None]) -> Callable[[str], str]:
    """An argparse type that refuses a value ``problem`` finds fault with, saying why."""
    def check(value: str) -> str:
        reason = problem(value)
        if reason:
            raise argparse.ArgumentTypeError(reason)
        return value
    return check


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="halluscope", description="Hallucination benchmarks on Ray.")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="evaluate the models of a run config")
    r.add_argument("config", nargs="?", help="YAML path or URL (s3://...); default: the embedded demo")
    r.add_argument("--run-id", type=_arg(run_id_problem),
                   help=f"resume or name a run; the same id continues where it stopped ({RUN_ID_RULE})")
    r.add_argument("--storage-root", type=_arg(root_problem), help="override storage.root")
    r.add_argument("--max-items-per-task", type=_count, metavar="N",
                   help="override limits.max_items_per_task: a pilot of the config, whose token sizes "
                        "`halluscope plan --stats` reads")
    r.add_argument("--quiet", action="store_true", help="no progress bars")
    r.add_argument("--keep-failed", action="store_true",
                   help="resuming, keep the rows that failed on a transient error (a call out of retries) as they "
                        "were committed instead of doing them again")
    r.set_defaults(fn=_cmd_run)
    sv = sub.add_parser("serve", help="serve the models of a run config, or a Ray Serve config (serve/*.yaml)")
    sv.add_argument("config")
    sv.add_argument("--http-port", type=int)
    sv.add_argument("--down", action="store_true", help="delete the config's served models instead")
    sv.set_defaults(fn=_cmd_serve)
    t = sub.add_parser("tasks", help="list the tasks")
    t.set_defaults(fn=_cmd_tasks)
    rep = sub.add_parser("report", help="print the leaderboard of a finished run")
    rep.add_argument("run_uri")
    rep.add_argument("--json", action="store_true", help="print metrics.json instead of the leaderboard")
    rep.set_defaults(fn=_cmd_report)
    st = sub.add_parser("status", help="a run's progress: rows evaluated and failed per model, its deployments, "
                                       "the spend so far")
    st.add_argument("run_uri")
    st.add_argument("--json", action="store_true", help="print it as JSON")
    st.set_defaults(fn=_cmd_status)
    sh = sub.add_parser("show", help="the evidence behind a number: one response, its units and each verdict")
    sh.add_argument("run_uri")
    sh.add_argument("--model", required=True)
    sh.add_argument("--task", required=True)
    sh.add_argument("--item", help="the item to show (default: the first scored one)")
    sh.add_argument("--hallucinated", action="store_true", help="the response with the most unsupported units")
    sh.set_defaults(fn=_cmd_show)
    cp = sub.add_parser("compare", help="a model across two runs: per task and figure, B minus A with its paired "
                                        "error over the items both scored")
    cp.add_argument("run_a")
    cp.add_argument("run_b")
    cp.add_argument("--model", action="append", help="only this model (repeatable; default: every model of both)")
    cp.add_argument("--json", action="store_true", help="print the rows as JSON")
    cp.set_defaults(fn=_cmd_compare)
    cb = sub.add_parser("calibrate", help="the judge's agreement with a benchmark's reference judge on its released "
                                          "models' recorded responses (accuracy, Cohen's kappa); with --throughput, "
                                          "the served engines' speed")
    cb.add_argument("config", help="YAML path or URL: its judge and tasks (settings: its calibration section)")
    cb.add_argument("--items-per-model", type=_count,
                    help="items per task and released model (default: the config's, 2)")
    cb.add_argument("--quiet", action="store_true", help="no progress bars")
    cb.add_argument("--json", action="store_true", help="print the records as JSON")
    cb.add_argument("--throughput", metavar="FILE",
                    help="instead, measure each served engine's prefill and decode speed and deploy time here, and "
                         "write them as a throughput table (cluster/throughput.yaml's form) to FILE")
    cb.add_argument("--calls", type=_count,
                    help="with --throughput: calls per load (default: as many as a deployment takes at once)")
    cb.set_defaults(fn=_cmd_calibrate)
    pl = sub.add_parser("plan", help="estimate a run's calls, tokens, GPU-hours and dollars before it starts")
    pl.add_argument("config", help="YAML path or URL")
    pl.add_argument("--stats", action="append", metavar="RUN_URI",
                    help="measure call sizes from an earlier run folder (repeatable)")
    pl.add_argument("--json", action="store_true", help="print the plan as JSON")
    pl.add_argument("--throughput", metavar="FILE",
                    help="the throughput table to plan with (default: the config's costs.throughput_table, else "
                         "cluster/throughput.yaml); `halluscope calibrate --throughput FILE` measures one")
    pl.set_defaults(fn=_cmd_plan)
    ts = sub.add_parser("testset", help="build a benchmark's test sets from a job file and print their URIs")
    ts.add_argument("job", help="test-set job YAML (path or URL)")
    ts.add_argument("--benchmark", help="the benchmark whose test sets the job builds (default: the only one that "
                                        "builds test sets)")
    ts.set_defaults(fn=_cmd_testset)
    for bench in benchmarks().values():  # the commands a benchmark brings (e.g. attribute)
        if bench.commands is not None:
            bench.commands(sub)
    add_submit_parser(sub)
    add_kueue_parser(sub)
    add_keep_logs_parser(sub)
    return p


_RESUME = "halluscope_resume"  # the command that resumes the run an error stopped (_cmd_run sets it)


def main(argv: list[str] | None = None) -> int:
    """The command's exit code. Whatever stops it, its last lines are halluscope's own: the error
    in one line (a bug's traceback above it) and, for a run it left resumable, the command that
    resumes it (a run killed by a Ray actor's error ended on Ray's description of the actor)."""
    try:
        args = build_parser().parse_args(argv)  # a benchmark that fails to load is a user error too
        return args.fn(args)
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM / SIGHUP during a run (errors.Interrupted)
        signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
        print(f"halluscope: {err}" if isinstance(err, Interrupted) else "halluscope: interrupted", file=sys.stderr)
        _print_resume(err)
        return 128 + signum
    except Exception as err:  # noqa: BLE001 - user errors are printed plainly, others with their traceback
        cause = user_error(err) or _environment_error(err)
        if cause is None:
            traceback.print_exception(err, file=sys.stderr)
            print(f"halluscope: error: {terminal(error_summary(err))}", file=sys.stderr)
            _print_resume(err)
            return 1
        print(f"halluscope: error: {terminal(cause)}", file=sys.stderr)
        _print_resume(err)
        return OverBudget.EXIT_CODE if isinstance(cause, OverBudget) else 2


def _print_resume(err: BaseException) -> None:
    hint = getattr(err, _RESUME, None)
    if hint:
        print(hint, file=sys.stderr)


def _environment_error(err: BaseException) -> str | None:
    """What the environment, not halluscope, got wrong, in one line: a file that cannot be opened,
    S3 without credentials (a chain of botocore tracebacks otherwise)."""
    from botocore.exceptions import ConnectionError as EndpointError
    from botocore.exceptions import NoCredentialsError

    seen = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, NoCredentialsError):
            return ("no S3 credentials: name the environment variables that hold them in storage.access_key_env "
                    "and storage.secret_key_env (or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
        if isinstance(cause, EndpointError):  # an endpoint that stopped answering during the run
            return f"S3 storage did not answer: {' '.join(str(cause).split())[:300]}"
        if isinstance(cause, (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)):
            return str(cause)
        cause = cause.__cause__ or cause.__context__
    return None


def entry() -> int:
    """The `halluscope` command as a process of its own: Ray's C++ lines go to the log file
    (``quiet.native_lines_to_log``), then ``main``. Tests call ``main``, and keep their capture."""
    native_lines_to_log()
    return main()


if __name__ == "__main__":
    sys.exit(entry())
