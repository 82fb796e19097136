"""Many publishes at once against ONE real mlflow server: nothing lost, nothing doubled.

Eight ``tfopt step publish`` processes, each for its own DAG run, start together, and with
them three more that all carry the same DAG run id, as when a task is started twice. The
expensive steps (freeze, optimize, benchmark, gate) ran once, in tests/publish_inputs.py; what
races here is the part that talks to MLflow, as separate processes, not threads.

The three same-key publishes talk to the server through tests/fault_proxy.py, whose barriers
hold each one's first search for its run and for its version until all three have asked: all
three find nothing and create, so the race MLflow cannot prevent (it has no create-if-absent)
happens every time, and the publish's own claim has to settle it.
"""

import json
import time

import pytest
from fault_proxy import FaultProxy
from mlflow import MlflowClient
from mlflow.entities import LoggedModelStatus, ViewType

pytest_plugins = ["mlflow_server", "publish_inputs"]

# Eight, not twenty: each process spends seconds importing TensorFlow and MLflow before its
# first request, so eight started at once (on two cores) still reach the server together, and
# every check below is per DAG run or about the last version; the twelve more only added two
# minutes of imports. The same-key race is forced by the proxy's barriers, not by the load.
DISTINCT_RUNS = 8
SAME_KEY_RACERS = 3
RACED_RUN_ID = "manual__2025-02-01T00:00:00+00:00"
API = "/api/2.0/mlflow"


@pytest.fixture(scope="module")
def raced(publish_inputs, mlflow_server, tmp_path_factory):
    """All the processes started together and waited for."""
    with FaultProxy(mlflow_server) as proxy:
        proxy.add("barrier", rf"{API}/runs/search$", method="POST", times=SAME_KEY_RACERS)
        proxy.add("barrier", rf"{API}/model-versions/search", method="GET",
                  times=SAME_KEY_RACERS)
        direct = publish_inputs.config(tmp_path_factory.mktemp("load"), mlflow_server, "load")
        # Each racer in a work directory of its own, as on machines that share no volume: in
        # one directory the workspace's step lock serializes them before they reach the server.
        racing = [publish_inputs.config(tmp_path_factory.mktemp(f"racer{i}"), proxy.url, "load")
                  for i in range(SAME_KEY_RACERS)]
        run_ids = [f"scheduled__2025-01-{day:02d}T03:00:00+00:00"
                   for day in range(1, DISTINCT_RUNS + 1)]
        middle = DISTINCT_RUNS // 2  # the racers start while the others do
        launches = ([(direct, run_id) for run_id in run_ids[:middle]]
                    + [(config, RACED_RUN_ID) for config in racing]
                    + [(direct, run_id) for run_id in run_ids[middle:]])
        started = time.monotonic()
        processes = [(run_id, publish_inputs.start(config, run_id))
                     for config, run_id in launches]
        outcomes = []
        for run_id, process in processes:
            out, err = process.communicate(timeout=600)
            outcomes.append((run_id, process.returncode, out, err))
        print(f"{len(processes)} publishes finished in {time.monotonic() - started:.0f} s")
        created = {"runs": len(proxy.seen("POST", rf"{API}/runs/create$")),
                   "versions": len(proxy.seen("POST", rf"{API}/model-versions/create$"))}
    return {"outcomes": outcomes, "run_ids": run_ids, "racers_created": created,
            "client": MlflowClient(mlflow_server, registry_uri=mlflow_server)}


def _by_dag_run(items, tags_of):
    grouped: dict[str, list] = {}
    for item in items:
        grouped.setdefault(tags_of(item).get("tfopt.dag_run_id"), []).append(item)
    return grouped


@pytest.mark.slow
def test_every_concurrent_publish_succeeds(raced):
    failed = [(run_id, code, err[-1500:]) for run_id, code, _, err in raced["outcomes"]
              if code != 0]
    assert failed == []


def test_every_dag_run_has_exactly_one_finished_mlflow_run(raced):
    client = raced["client"]
    experiment = client.get_experiment_by_name("exp-load")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)

    by_dag_run = _by_dag_run(runs, lambda r: r.data.tags)

    assert sorted(by_dag_run) == sorted([*raced["run_ids"], RACED_RUN_ID])
    assert {dag_run: len(found) for dag_run, found in by_dag_run.items() if len(found) != 1} == {}
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert all(r.data.tags.get("tfopt.logged") == "true" for r in runs)


def test_every_dag_run_has_exactly_one_version_and_each_process_reports_it(raced):
    client = raced["client"]
    versions = client.search_model_versions("name = 'load'", max_results=1000)

    by_dag_run = _by_dag_run(versions, lambda v: v.tags)

    assert sorted(by_dag_run) == sorted([*raced["run_ids"], RACED_RUN_ID])
    assert {dag_run: len(found) for dag_run, found in by_dag_run.items() if len(found) != 1} == {}
    for run_id, _, out, _ in raced["outcomes"]:
        reported = json.loads(out)
        [version] = by_dag_run[run_id]
        assert (reported["version"], reported["run_id"]) == (version.version, version.run_id)


def test_every_dag_run_has_exactly_one_ready_logged_model(raced):
    client = raced["client"]
    experiment = client.get_experiment_by_name("exp-load")
    models = client.search_logged_models([experiment.experiment_id], max_results=1000)

    by_dag_run = _by_dag_run(models, lambda m: m.tags)

    assert sorted(by_dag_run) == sorted([*raced["run_ids"], RACED_RUN_ID])
    assert {dag_run: len(found) for dag_run, found in by_dag_run.items() if len(found) != 1} == {}
    assert {m.status for m in models} == {LoggedModelStatus.READY}
    for run_id, _, out, _ in raced["outcomes"]:
        [model] = by_dag_run[run_id]
        assert json.loads(out)["model_uri"] == f"models:/{model.model_id}"


def test_the_same_key_racers_all_created_and_settled_on_one_run_and_version(raced):
    client = raced["client"]
    experiment = client.get_experiment_by_name("exp-load")
    reported = {(out_run["run_id"], out_run["version"]) for out_run in (
        json.loads(out) for run_id, _, out, _ in raced["outcomes"] if run_id == RACED_RUN_ID)}
    deleted = client.search_runs([experiment.experiment_id], run_view_type=ViewType.DELETED_ONLY,
                                 filter_string=f"tags.`tfopt.dag_run_id` = '{RACED_RUN_ID}'")

    # The race really happened: each racer made its own run and its own version ...
    assert raced["racers_created"] == {"runs": SAME_KEY_RACERS, "versions": SAME_KEY_RACERS}
    # ... and all of them ended on the one that won; the losers' runs are deleted.
    assert len(reported) == 1
    assert len(deleted) == SAME_KEY_RACERS - 1
    [(winner_run, _)] = reported
    assert winner_run not in {r.info.run_id for r in deleted}


def test_the_alias_ends_on_the_newest_version(raced):
    client = raced["client"]
    versions = {v.version for v in client.search_model_versions("name = 'load'")}

    champion = client.get_registered_model("load").aliases.get("champion")

    assert champion == max(versions, key=int)
