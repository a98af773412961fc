"""Fault drills on a real Ray head: killed workers, a killed driver resubmitted under the same run
id, and an S3 API that fails transiently. Each faulty run must end with the tables of a clean one,
every generation and atom exactly once."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml
from tests.conftest import IN_DRIVER, SHARED_DATA, leave_ray
from tests.support.drills import (
    Driver,
    comparable_tables,
    id_problems,
    kill_busy_worker,
    kill_running_task,
    restarts,
    stage_class,
    table_differences,
    wait_until_gone,
)
from tests.support.flaky_s3 import FlakyS3Proxy
from tests.support.openai_server import FailPlan, OpenAIStubServer
from tests.support.servers import s3_storage

from halluscope.config.load import parse_config
from halluscope.models.staged import read_staged
from halluscope.pipeline.generation import staged_location
from halluscope.pipeline.runner import run
from halluscope.resolve.run import ResolvedRun
from halluscope.serving.app import app_name_for
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")]

REPLAYED = ["gpt_4_0125_turbo", "llama_2_7b_chat", "redpajama_incite_7b_chat"]
SCRIPTED = ["scripted-a", "scripted-b"]  # served one at a time: GPUs for one (cluster.gpus)
TASKS = ["halogen/code"]  # verified by a program, no role model (none on record answers the live model)
LIMIT = 120
TOTAL = LIMIT * len(TASKS) * (len(REPLAYED) + len(SCRIPTED))  # 600 generations


def _config(root: str, drill: bool = True) -> dict:
    """HALOGEN's recorded responses of three models plus two live scripted models. For a drill,
    they are served in two waves (each holds the 2 GPUs the run has), take 0.2 s a prompt, 4 at
    once (so each generates for 6 s and can be hit), and batches are small, so kills land
    between commits; a clean run answers them in process (the same answers and token counts),
    neither waits nor commits 60 times, and goes in the driver."""
    code = "```python\nimport numpy\nimport fakepkg_zz\n```"
    server = {"latency_s": 0.2, "capacity": 4, "serve": {"num_cpus": 0, "num_gpus": 2, "max_batch_prompts": 5}} \
        if drill else {"in_process": True}
    scripted = [{"id": m, "backend": "scripted", "params": {"rules": [{"pattern": "Python", "response": code}],
                                                            **server}} for m in SCRIPTED]
    return {"storage": {"root": root}, "tasks": TASKS,
            "models": [{"id": m, "backend": "replay"} for m in REPLAYED] + scripted,
            "limits": {"max_items_per_task": LIMIT}, "cache": {"enabled": False}, "costs": {"price_table": None},
            **({"cluster": {"gpus": 2}} if drill else {}),
            "concurrency": {"batch_size": 10 if drill else 200, "generate_batch_size": 10, "verify_actors": 2}}


def _staged_ids(store: RunStore) -> dict[str, list[str]]:
    """The generation ids of each scripted model's staged parts (what its deployment generated),
    read as the run reads them; a model with none yet is left out."""
    ids = {m: read_staged(staged_location(store.loc, m), ["gen_id"]).column("gen_id").to_pylist() for m in SCRIPTED}
    return {m: i for m, i in ids.items() if i}


def _assert_each_id_once(tables: dict[str, pa.Table]) -> None:
    assert not (problems := id_problems(tables, TOTAL)), problems


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, pa.Table]:
    """The clean run, in the driver's process: the drills on Ray must end with its tables."""
    root = f"file://{tmp_path_factory.mktemp('clean')}"
    with pytest.MonkeyPatch.context() as env:
        leave_ray(env)  # as the in_driver fixture does, for the module
        result = run(ResolvedRun.of(parse_config(_config(root, drill=False))), run_id="clean", progress=False)
    assert result.processed == TOTAL
    assert RunStore(Location.from_url(root), "clean").read_json("manifest.json")["execution"] == IN_DRIVER
    tables = comparable_tables(RunStore(Location.from_url(root), "clean"))
    _assert_each_id_once(tables)
    return tables


# --- the drills ----------------------------------------------------------------------------------

def test_killed_driver_resubmitted_and_killed_workers_equal_an_uninterrupted_run(ray_head, tmp_path, uninterrupted,
                                                                                 drivers):
    """One scenario for the process faults, to keep Ray start-ups few: the worker generating the
    first wave's model SIGKILLed mid-generation; the driver SIGKILLed while the second wave's
    model generates; the same run id resubmitted, and an Evaluate worker SIGKILLed while it runs
    a batch. The run ends with the tables of an uninterrupted one; no answer was generated twice
    and the model generated before the driver's kill was not deployed again."""
    cfg_path = tmp_path / "run.yaml"
    cfg_path.write_text(yaml.safe_dump(_config(f"file://{tmp_path}")))
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "drill")

    def rows_committed() -> int:
        return store.read_table("scores", ["gen_id"]).num_rows

    # 1. the task generating the first wave's answers dies mid-generation; Ray runs it again
    # (max_retries), and the retry generates only what no staged part holds
    drivers.append(first := Driver(cfg_path, "drill", tmp_path / "first.log"))
    kill_running_task(ray_head, "generate_model", first.proc)
    # 2. the driver dies (SIGKILL, no cleanup) while the second wave generates
    deadline = time.time() + 300
    while len(_staged_ids(store)) < 2:
        assert first.proc.poll() is None and time.time() < deadline, first.tail()
        time.sleep(0.05)
    first.kill()
    before = _staged_ids(store)
    (done_first,) = [m for m, ids in before.items() if len(ids) == LIMIT]
    killed_at = len(store.committed_keys())
    assert 0 < rows_committed() < TOTAL
    # Ray ends the dead driver's actors within moments; the drill waits for that so that the kill
    # below hits the resubmission's workers (the run itself fences the dead ones off: storage/run.py)
    wait_until_gone(ray_head["dashboard"], [stage_class(s) for s in ("Generate", "Evaluate")], "the driver's kill")

    # 3. the same run id resubmitted; a worker of the Evaluate actor pool is SIGKILLed in the middle of a batch
    drivers.append(second := Driver(cfg_path, "drill", tmp_path / "second.log"))
    restarted = sum(restarts(ray_head["dashboard"], ("Evaluate",)).values())  # by the head's earlier runs
    kill_busy_worker(ray_head, "Evaluate", second.proc, armed=lambda: len(store.committed_keys()) > killed_at)
    assert rows_committed() < TOTAL, "the kill came after the run's last batch"
    assert second.proc.wait(timeout=450) == 0, second.tail()
    # what the raylets reported of the kills went to the log file, not to the terminal
    assert not [line for d in (first, second) for line in d.log.read_text().splitlines() if "(raylet)" in line]

    # Ray restarted the killed actor and retried its batch (Ray Data's defaults for actor pools:
    # max_restarts=-1, max_task_retries=-1)
    assert sum(restarts(ray_head["dashboard"], ("Evaluate",)).values()) > restarted
    # the killed driver left its Serve app running (Serve apps outlive their driver); the
    # resubmission took it over and removed it when done
    wait_until_gone(ray_head["dashboard"], [f"ServeReplica:{app_name_for(m, 'drill')}:scripted" for m in SCRIPTED], "the run",
                    timeout_s=15)
    manifest = store.read_json("manifest.json")
    assert manifest["status"] == "complete"
    assert manifest["counts"]["done_before"] + manifest["counts"]["processed"] == TOTAL
    tables = comparable_tables(store)
    _assert_each_id_once(tables)
    assert not table_differences(tables, uninterrupted)
    # nothing generated twice; the first wave's model, generated before the kill, not deployed again
    for model, ids in _staged_ids(store).items():
        assert len(ids) == len(set(ids)) == LIMIT, model
    assert done_first not in {d["model"] for d in manifest["schedule"]["deployments"]}


@pytest.mark.clock  # botocore's back-offs and its adaptive send rate after each SlowDown
def test_transient_s3_failures_are_retried(uninterrupted, in_driver, s3_endpoint, bucket):
    """Every 4th PUT and every 7th GET/HEAD fail (503 SlowDown before the server sees them, 500
    InternalError after it did the work): the run's retries absorb them, and its tables are the
    clean run's rows (on Ray) for the same models and items. The flaky run goes in the driver: the
    storage's retries are the subject, and they are the same code in a worker."""
    from halluscope.sources import DataResolver
    from halluscope.task_registry import get_task

    task, limit = "halogen/code", 20
    with FlakyS3Proxy(s3_endpoint, every={"PUT": 4, "GET": 7, "HEAD": 7}) as proxy:
        cfg = parse_config({"storage": s3_storage(proxy.url, f"s3://{bucket}/runs"), "tasks": [task],
                            "limits": {"max_items_per_task": limit},
                            "models": [{"id": m, "backend": "replay"} for m in REPLAYED],
                            "concurrency": {"batch_size": 30}, "costs": {"price_table": None}})
        result = run(ResolvedRun.of(cfg), run_id="flaky", progress=False)
        store = RunStore(Location.from_url(cfg.storage.root, cfg.storage), "flaky")
        tables = comparable_tables(store)
        manifest = store.read_json("manifest.json")
    assert proxy.injected_for("PUT") >= 2 and proxy.injected_for("GET") + proxy.injected_for("HEAD") > 0
    assert {code for code, _ in proxy.injected} == {"SlowDown", "InternalError"}
    assert result.processed == limit * len(REPLAYED) and manifest["status"] == "complete"
    assert manifest["execution"] == IN_DRIVER
    first = {i.item_id for i in get_task(task).load_items(DataResolver(download=False)).items[:limit]}
    gens = uninterrupted["generations"]
    keep = gens.filter(pc.and_(pc.and_(pc.equal(gens["task"], task), pc.is_in(gens["model"], pa.array(REPLAYED))),
                               pc.is_in(gens["item_id"], pa.array(sorted(first)))))["gen_id"]
    assert len(keep) == limit * len(REPLAYED)
    want = {t: rows.filter(pc.is_in(rows["gen_id"], keep)) for t, rows in uninterrupted.items()}
    assert not table_differences(tables, want)


@pytest.mark.clock
@pytest.mark.parametrize("retries, fails", [
    ({}, False),  # storage_options' botocore retries (8 attempts)
    ({"config_kwargs": {"retries": {"total_max_attempts": 1, "mode": "standard"}}}, True),  # botocore's off
])
def test_botocore_retries_are_what_absorbs_a_failed_write(s3_endpoint, bucket, retries, fails):
    """The control of the drill above, without Ray: every 2nd PUT fails. Writes 1-3 reach the
    server as PUTs 1, 2 (SlowDown) + 3 (retry), 4 (InternalError after the object was stored) + 5.
    s3fs retries SlowDown by itself but not InternalError, so without botocore's retries the
    third write fails although its object is there."""
    import fsspec

    from halluscope.storage.fs import storage_options
    from halluscope.storage.spec import StorageSpec

    with FlakyS3Proxy(s3_endpoint, every={"PUT": 2}) as proxy:
        opts = storage_options(StorageSpec.model_validate(s3_storage(proxy.url, f"s3://{bucket}/runs"))) | retries
        loc = Location(fsspec.filesystem("s3", skip_instance_cache=True, **opts), f"{bucket}/control")
        loc.child("a").write_bytes_atomic(b"first")
        loc.child("b").write_bytes_atomic(b"second")  # SlowDown: retried by s3fs itself if not by botocore
        if fails:
            with pytest.raises(OSError, match="injected transient fault"):
                loc.child("c").write_bytes_atomic(b"third")
        else:
            loc.child("c").write_bytes_atomic(b"third")
        assert [loc.child(n).read_bytes() for n in "abc"] == [b"first", b"second", b"third"]
    assert dict(proxy.injected) == {("SlowDown", "PUT"): 1, ("InternalError", "PUT"): 1}
    assert proxy.seen["PUT"] == (4 if fails else 5)


# --- RAGTruth and FEWL in one run: a detector under test, and rows that ask reference models ----

FEWL_SUBJECTS = ["the moon", "a volcano", "the heart", "a violin", "the internet", "a glacier"]
FEWL_FORMS = ["What is {} made of?", "Who first studied {}?", "Why does {} matter to people?",
              "Where can you find {}?"]
FEWL_QUESTIONS = [form.format(s) for s in FEWL_SUBJECTS for form in FEWL_FORMS]  # 24 generations
RT_SOURCES = 8
RT_MODELS = ("m1", "m2", "m3")
RT_TOTAL = RT_SOURCES * len(RT_MODELS)  # 24 responses, one detector reply each
BOTH_TOTAL = len(FEWL_QUESTIONS) + RT_TOTAL


def _asked(prompt: str) -> str:
    return prompt.split("Question: ", 1)[1].split("\n", 1)[0]


def _flag_blue(prompt: str) -> str:
    return '{"hallucination list": [%s]}' % ('"blue"' if "is blue." in prompt else "")


def _servers() -> dict[str, OpenAIStubServer]:
    """The detector, FEWL's model under test (both one prompt at a time), two references and an
    IW/CO writer; all answer at once until ``_pace`` slows the first two down."""
    pairs = ("1. Wrong: It is made of cheese.\n   Corrected: Cheese has nothing to do with it.\n"
             "2. Wrong: Nobody knows anything.\n   Corrected: Much is known about it.")
    return {"detector": OpenAIStubServer(_flag_blue),
            "slow": OpenAIStubServer(lambda p: f"I think: {_asked(p)}"),
            "ref-a": OpenAIStubServer(lambda p: f"A careful answer to: {_asked(p)}"),
            "ref-b": OpenAIStubServer(lambda p: f"Briefly, {_asked(p).lower()}"),
            "iwco": OpenAIStubServer(lambda p: pairs)}


def _pace(servers: dict[str, OpenAIStubServer], delay_s: float) -> None:
    """Seconds the models under test take a prompt: 0.4 while a driver is to be killed (so the
    run lasts long enough to be hit), none otherwise. The config, and so the run, is the same."""
    for name in ("detector", "slow"):
        servers[name].fail_plan = FailPlan(delay_s=delay_s)


def _fewl_data(path) -> str:
    rows = ["Question,Best Answer,Correct Answers,Incorrect Answers"]
    rows += [f'"{q}",A true answer {i},A true answer {i}; Another true answer {i},A false answer {i}'
             for i, q in enumerate(FEWL_QUESTIONS)]
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def _ragtruth_corpus(folder) -> dict:
    """Eight QA sources with three answers each; the third model's answers hold a gold span."""
    sources, responses = [], []
    for i in range(RT_SOURCES):
        question = f"what colour is the sky over town {i}"
        sources.append({"source_id": f"s{i}", "task_type": "QA", "source": "MARCO",
                        "source_info": {"question": question, "passages": f"passage 1:The sky over town {i} is grey."},
                        "prompt": f"Briefly answer the following question:\n{question}\noutput:"})
        for model in RT_MODELS:
            colour = "blue" if model == "m3" else "grey"
            text = f"The sky over town {i} is {colour}."
            labels = [{"start": text.index("blue"), "end": text.index("blue") + 4, "text": "blue", "meta": "",
                       "label_type": "Evident Conflict"}] if colour == "blue" else []
            responses.append({"id": f"r{i}-{model}", "source_id": f"s{i}", "model": model, "temperature": 0.7,
                              "labels": labels, "split": "test", "quality": "good", "response": text})
    for name, rows in (("response.jsonl", responses), ("source_info.jsonl", sources)):
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"responses": str(folder / "response.jsonl"), "sources": str(folder / "source_info.jsonl")}


def _both_config(root: str, corpus: dict, data: str, servers: dict[str, OpenAIStubServer]) -> dict:
    """ragtruth/detect (the detector is the model under test) and fewl/score in one run; batches
    of 4, so a kill lands between commits."""
    def model(model_id: str, role: str, concurrency: int, tasks: list[str] | None = None) -> dict:
        return {"id": model_id, "role": role, "backend": "openai", **({"tasks": tasks} if tasks else {}),
                "params": {"base_url": servers[model_id].base_url, "model": model_id,
                           "max_concurrency": concurrency}}
    return {"storage": {"root": root}, "tasks": ["ragtruth/detect", "fewl/score"], "cache": {"enabled": False},
            "costs": {"price_table": None},
            "models": [model("detector", "test", 1, ["ragtruth/detect"]), model("slow", "test", 1, ["fewl/score"]),
                       *(model(m, "reference", 8) for m in ("ref-a", "ref-b", "iwco"))],
            "benchmarks": {"ragtruth": {"corpus": corpus},
                           "fewl": {"dataset": {"name": "truthfulqa-gen", "source": data},
                                    "references": ["ref-a", "ref-b"], "generator": "iwco",
                                    "params": {"iw_pairs": 2, "k_nn": 2}}},
            "concurrency": {"batch_size": 4, "generate_batch_size": 4, "verify_actors": 1}}


def _fewl_scores(store: RunStore) -> dict[str, float]:
    """FEWL score per generation, from the verdicts' evidence."""
    return {v["gen_id"]: json.loads(v["evidence"])["score"] for v in store.read_table("verdicts").to_pylist()
            if v["task"] == "fewl/score"}


def _detection(store: RunStore) -> list[dict]:
    return [r for r in store.read_json("metrics.json") if r.get("table") == "detection"]


def test_killed_driver_of_a_ragtruth_and_fewl_run_resumes_every_id_once(in_driver, tmp_path, drivers):
    """A driver running ragtruth/detect and fewl/score, SIGKILLed after two commits and
    resubmitted under the same run id, ends with every response judged once, every FEWL
    generation, atom and verdict once, and the tables, detection metrics and FEWL scores of an
    uninterrupted run. Its subject is what these benchmarks make of a resumed run, so it runs in
    the driver's process (the engine's drill on Ray is the one above)."""
    corpus, data = _ragtruth_corpus(tmp_path), _fewl_data(tmp_path / "questions.csv")
    servers = _servers()
    for s in servers.values():
        s.__enter__()
    try:
        clean_root = f"file://{tmp_path}/clean"
        assert run(ResolvedRun.of(parse_config(_both_config(clean_root, corpus, data, servers))), run_id="clean",
                   progress=False).processed == BOTH_TOTAL
        clean = RunStore(Location.from_url(clean_root), "clean")

        cfg_path = tmp_path / "run.yaml"
        cfg_path.write_text(yaml.safe_dump(_both_config(f"file://{tmp_path}/drill", corpus, data, servers)))
        store = RunStore(Location.from_url(f"file://{tmp_path}/drill"), "drill")
        _pace(servers, 0.4)
        drivers.append(first := Driver(cfg_path, "drill", tmp_path / "first.log"))
        first.wait_for_commits(store, 2)
        first.kill()
        _pace(servers, 0.0)
        assert 0 < store.read_table("scores", ["gen_id"]).num_rows < BOTH_TOTAL
        drivers.append(second := Driver(cfg_path, "drill", tmp_path / "second.log"))
        assert second.proc.wait(timeout=450) == 0, second.tail()
    finally:
        for s in servers.values():
            s.__exit__(None, None, None)

    manifest = store.read_json("manifest.json")
    assert manifest["status"] == "complete" and manifest["execution"] == IN_DRIVER
    assert manifest["counts"]["done_before"] + manifest["counts"]["processed"] == BOTH_TOTAL
    tables, want = comparable_tables(store), comparable_tables(clean)
    assert not (problems := id_problems(tables, BOTH_TOTAL)), problems
    assert tables["generations"].equals(want["generations"]) and tables["scores"].equals(want["scores"])
    assert _detection(store) == _detection(clean)
    overall = next(r for r in _detection(store) if (r["task_type"], r["generator"]) == ("Overall", "*"))
    assert (overall["n_responses"], overall["tp"], overall["fp"]) == (RT_TOTAL, RT_SOURCES, 0)
    got, expected = _fewl_scores(store), _fewl_scores(clean)
    assert got.keys() == expected.keys() and len(got) == len(FEWL_QUESTIONS)
    assert all(got[g] == pytest.approx(expected[g], abs=1e-6) for g in got)
