"""publish against a real MLflow server: what a run and a version hold, when the alias moves,
and that reruns, interrupted publishes and an unreachable server change nothing they should not.

The inputs are real: an optimized SavedModel made from model_zoo's keras_cnn, benchmarked
against a copy of the same graph that does extra, output-neutral work (so the speedup is large
and the gate promotes it on any machine), a real gate decision and its report. A stricter gate
config (min_speedup 100) on the same measurements makes the rejected case.
"""

import dataclasses
import json
import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from benchmark_testing import with_output_neutral_work
from fault_proxy import FaultProxy
from mlflow import MlflowClient
from mlflow.entities import LoggedModelStatus

from tfopt.components.config.pipeline_config import config_from_mapping
from tfopt.components.pipeline.artifacts import (
    CandidateModel,
    EvaluationOutput,
    GateOutput,
    PulledModel,
)
from tfopt.components.pipeline.workspace import Workspace
from tfopt.components.publishing.logged_models import log_model
from tfopt.components.publishing.naming import step_name
from tfopt.components.publishing.publication import PUBLISH_KEY_TAG, publication
from tfopt.components.publishing.registry_protocol import RaceTolerantClient, find_version, register
from tfopt.components.publishing.run_logging import log_run
from tfopt.components.steps import publish as publish_step
from tfopt.components.steps.publish import publish
from tfopt.components.tracking import TrackingError, mlflow_client
from tfopt.components.tracking.champion import find_champion
from tfopt.optimizer.benchmark.environment import model_digest
from tfopt.optimizer.benchmark.harness import BenchmarkConfig, Subject, run_benchmark
from tfopt.optimizer.gate.verdict import GateConfig, evaluate_gate
from tfopt.optimizer.model.export import write_saved_model
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.optimize.flow import apply_recipe
from tfopt.optimizer.optimize.recipe import DEPLOYMENT_RECIPE, Recipe
from tfopt.optimizer.report.write import write_report

pytest_plugins = ["mlflow_server"]  # the mlflow_server fixture

QUICK = BenchmarkConfig(batch_sizes=(1,), warmup=3, min_runs=30, min_seconds=0.2)
PROMOTING = GateConfig(min_speedup=1.05)
REJECTING = GateConfig(min_speedup=100.0)


@pytest.fixture(scope="module")
def made(tmp_path_factory, model_dir):
    """The pipeline's records up to the gate, for both gate configs, built from real files."""
    root = tmp_path_factory.mktemp("publish")
    source = model_dir("keras_cnn")
    frozen = freeze(source)
    optimized = apply_recipe(frozen, Recipe.from_string(DEPLOYMENT_RECIPE))
    write_saved_model(optimized.model, root / "optimized")
    write_saved_model(with_output_neutral_work(frozen), root / "slowed_input")
    result = run_benchmark(Subject.baseline(root / "slowed_input", label="input"),
                           [Subject.candidate(root / "optimized", label="optimized")], QUICK)
    evaluation = EvaluationOutput(result_path=str(result.save(root / "evaluation.json")),
                                  has_labels=False, metric="top1")
    gates = {}
    for name, gate_config in (("promote", PROMOTING), ("reject", REJECTING)):
        decision = evaluate_gate(result, gate_config)
        verdict_path = root / name / "verdict.json"
        report = write_report(result, root / name / "report", decision)
        verdict_path.write_text(json.dumps(decision.to_dict(), indent=2))
        verdict = decision.verdicts[0]
        gates[name] = GateOutput(
            promote=decision.promote, chosen=decision.chosen,
            chosen_path=str(root / "optimized") if decision.chosen else None,
            summary=verdict.summary(), verdict_path=str(verdict_path),
            report_dir=str(report.directory))
    assert gates["promote"].promote, gates["promote"].summary
    assert not gates["reject"].promote
    candidate = CandidateModel(
        label="optimized", path=str(root / "optimized"), kind="optimized",
        digest=model_digest(root / "optimized"), recipe=optimized.recipe,
        trace=[step.to_dict() for step in optimized.trace])
    pulled = PulledModel(uri=str(source), path=str(source), digest=model_digest(source))
    return {"root": root, "pulled": pulled, "candidates": [candidate],
            "evaluation": evaluation, "gates": gates}


class Pipeline:
    """One registered model and experiment per test, so tests share the server, not state."""

    def __init__(self, made, tracking_uri: str, name: str, verdict: str = "promote",
                 register_rejected: bool = False):
        self.made, self.name = made, name
        gate = PROMOTING if verdict == "promote" else REJECTING
        self.config = config_from_mapping({
            "source": made["pulled"].uri, "workdir": str(made["root"] / name),
            "gate": gate.model_dump(), "publish": {"register_rejected": register_rejected},
            "mlflow": {"tracking_uri": tracking_uri, "experiment": f"exp-{name}",
                       "registered_model": name}})
        self.gate = made["gates"][verdict]
        self.ws = Workspace.for_run(self.config.workdir, made["pulled"].digest,
                                    self.config.fingerprint())
        self.client = MlflowClient(tracking_uri, registry_uri=tracking_uri)

    def publish(self, run_context=None, ws=None, gate=None):
        return publish(self.config, self.made["pulled"], self.made["candidates"],
                       self.made["evaluation"], gate or self.gate, ws or self.ws,
                       run_context if run_context is not None else {"dag_run_id": "run-1"})

    def runs(self):
        experiment = self.client.get_experiment_by_name(self.config.mlflow.experiment)
        return self.client.search_runs([experiment.experiment_id]) if experiment else []

    def versions(self):
        return self.client.search_model_versions(f"name = '{self.name}'")

    def champion_version(self):
        return self.client.get_registered_model(self.name).aliases.get("champion")


def publish_records(ws: Workspace, dag_run_id: str) -> list:
    """The workspace's records of finished publishes of ``dag_run_id``, on any server."""
    return sorted(ws.root.glob(f"{step_name({'dag_run_id': dag_run_id})}-*/result.json"))


def artifact_paths(client, run_id, path=None) -> set[str]:
    found = set()
    for item in client.list_artifacts(run_id, path):
        found |= artifact_paths(client, run_id, item.path) if item.is_dir else {item.path}
    return found


def model_files(client, model_id, path=None) -> set[str]:
    """Every file of a logged model, by its path inside the MLflow Model."""
    found = set()
    for item in client.list_logged_model_artifacts(model_id, path):
        found |= model_files(client, model_id, item.path) if item.is_dir else {item.path}
    return found


def test_a_promoted_candidate_is_logged_registered_and_made_champion(made, mlflow_server):
    p = Pipeline(made, mlflow_server, "promoted")
    out = p.publish({"dag_run_id": "scheduled__2025-01-01T03:00:00+00:00", "dag_id": "tfopt"})

    assert out.promote and out.alias_moved and out.version == "1" and out.alias == "champion"
    run = p.client.get_run(out.run_id)
    assert run.info.status == "FINISHED"
    params, metrics, tags = run.data.params, run.data.metrics, run.data.tags
    assert params["optimize.recipe"] == p.config.optimize.recipe
    assert params["recipe"] == made["candidates"][0].recipe
    assert params["gate.min_speedup"] == "1.05"
    for stat in ("p50", "p90", "p99", "mean"):
        assert metrics[f"optimized.latency_{stat}_ms_b1"] > 0
        assert metrics[f"baseline.latency_{stat}_ms_b1"] > metrics["optimized.latency_p50_ms_b1"]
    assert metrics["optimized.throughput_b1"] > metrics["baseline.throughput_b1"]
    assert (1.05 < metrics["optimized.speedup_ci_low_b1"] <= metrics["optimized.speedup_b1"]
            <= metrics["optimized.speedup_ci_high_b1"])
    assert metrics["optimized.fidelity_top1_agreement"] == 1.0
    assert metrics["optimized.size_bytes"] > 0 and metrics["gate.promote"] == 1.0
    assert "optimized.peak_rss_growth_bytes" in metrics
    assert tags["tfopt.verdict"] == "promote"
    assert tags["tfopt.dag_run_id"] == "scheduled__2025-01-01T03:00:00+00:00"
    assert tags["tfopt.source_digest"] == made["pulled"].digest
    assert tags["tfopt.model_digest"] == made["candidates"][0].digest
    environment = json.loads(Path(made["evaluation"].result_path).read_text())["environment"]
    assert tags["env.cpu_model"] == (environment["cpu_model"] or "unknown")
    assert tags["env.tensorflow_version"] == environment["tensorflow_version"]
    assert tags["env.onednn"] in ("on", "off", "unknown") and int(tags["env.cpus_available"]) >= 1

    artifacts = artifact_paths(p.client, out.run_id)
    assert {"trace.json", "verdict.json", "report/report.md", "report/report.html",
            "report/report.json", "report/latency_distribution.png",
            "report/speedup.png"} <= artifacts
    # The model is a logged model of the run, named after its candidate, not a run artifact.
    assert not {a for a in artifacts if a.startswith("model/")}
    [logged] = p.client.search_logged_models([run.info.experiment_id])
    assert (out.model_uri, out.logged_models) == (f"models:/{logged.model_id}",
                                                  {"optimized": logged.model_id})
    assert (logged.name, logged.source_run_id, logged.status) == (
        "optimized", out.run_id, LoggedModelStatus.READY)
    assert logged.metrics and {m.key: m.value for m in logged.metrics} == {
        k: v for k, v in metrics.items() if k.startswith("optimized.")}
    model_dir = Path(made["candidates"][0].path)
    files = model_files(p.client, logged.model_id)
    assert {"MLmodel", "requirements.txt", "input_example.json"} <= files
    assert {f for f in files if f.startswith("saved_model/")} == {
        f"saved_model/{f.relative_to(model_dir).as_posix()}" for f in model_dir.rglob("*")
        if f.is_file()}

    version = p.client.get_model_version("promoted", out.version)
    assert version.run_id == out.run_id and version.source == logged.artifact_location
    assert version.description.startswith("**PROMOTE optimized: ")
    # which comparisons the gate made: here, no champion and no labels
    assert ("\n\nCompared: latency against input (input); accuracy against input (the input: "
            "agreement with its outputs on generated inputs)") in version.description
    assert f"/runs/{out.run_id}/artifactPath/report/report.html" in version.description
    assert version.tags["tfopt.role"] == "champion"
    assert version.tags["tfopt.verdict"] == "promote"
    assert version.tags["tfopt.gate_summary"].startswith("PROMOTE optimized")
    assert version.tags["tfopt.source_uri"] == made["pulled"].uri
    assert version.tags["tfopt.format"] == "savedmodel"
    assert version.tags["tfopt.load"] == "tf.saved_model.load(path).signatures['serving_default']"
    assert p.champion_version() == "1"


def test_the_published_champion_downloads_as_the_same_files(made, mlflow_server):
    p = Pipeline(made, mlflow_server, "roundtrip")
    out = p.publish()

    champion = find_champion(p.config)

    assert champion.uri == "models:/roundtrip@champion" and champion.version == out.version
    assert champion.digest == model_digest(made["candidates"][0].path)
    # the version is an MLflow Model; the champion is the SavedModel its MLmodel names
    assert champion.directory.endswith(f"champions/roundtrip-v{out.version}")
    assert champion.path == f"{champion.directory}/saved_model"
    assert (champion.format, champion.runtime, champion.candidate) == (
        "savedmodel", "tensorflow", "optimized")


def test_a_rejected_candidate_is_logged_for_review_and_the_champion_stays(made, mlflow_server):
    promoted = Pipeline(made, mlflow_server, "kept")
    first = promoted.publish({"dag_run_id": "monday"})
    rejected = Pipeline(made, mlflow_server, "kept", verdict="reject")

    out = rejected.publish({"dag_run_id": "tuesday"})

    assert not out.promote and not out.alias_moved and out.version is None
    assert rejected.champion_version() == first.version == "1"
    assert [v.version for v in rejected.versions()] == ["1"]
    run = rejected.client.get_run(out.run_id)
    assert run.info.run_id != first.run_id and run.info.status == "FINISHED"
    assert run.data.tags["tfopt.verdict"] == "reject"
    assert "latency improvement too small" in run.data.tags["tfopt.gate_summary"]
    assert run.data.metrics["gate.promote"] == 0.0
    [logged] = rejected.client.search_logged_models(
        [run.info.experiment_id], filter_string=f"source_run_id = '{out.run_id}'")
    assert out.model_uri == f"models:/{logged.model_id}"
    assert logged.tags["tfopt.verdict"] == "reject" and logged.status == LoggedModelStatus.READY


def test_a_rejected_candidate_is_registered_as_challenger_only_when_asked(made, mlflow_server,
                                                                          tmp_path):
    monday = Pipeline(made, mlflow_server, "contest").publish({"dag_run_id": "monday"})
    asked = Pipeline(made, mlflow_server, "contest", verdict="reject", register_rejected=True)

    out = asked.publish({"dag_run_id": "tuesday"})

    assert (out.promote, out.version, out.alias, out.alias_moved) == (False, "2", "challenger",
                                                                      True)
    aliases = asked.client.get_registered_model("contest").aliases
    assert aliases == {"champion": monday.version, "challenger": "2"}
    version = asked.client.get_model_version("contest", "2")
    assert (version.tags["tfopt.role"], version.tags["tfopt.verdict"]) == ("challenger", "reject")
    assert version.tags["tfopt.lost_because"].startswith("latency improvement too small")
    assert version.description.startswith("**REJECT optimized: ")
    assert "Lost because: latency improvement too small" in version.description
    # A newer challenger does not hold the champion back; each alias moves in its own role.
    wednesday = Pipeline(made, mlflow_server, "contest").publish({"dag_run_id": "wednesday"})
    assert wednesday.alias_moved and wednesday.version == "3"
    assert asked.client.get_registered_model("contest").aliases == {"champion": "3",
                                                                    "challenger": "2"}
    assert find_champion(asked.config).version == "3"
    # A rerun of the rejected DAG run (another pod: MLflow's tags alone tell) finds its version.
    assert asked.publish({"dag_run_id": "tuesday"},
                         ws=Workspace(tmp_path / asked.ws.key)).version == "2"
    assert len(asked.versions()) == 3


def test_publishing_the_same_dag_run_again_creates_no_second_run_or_version(made, mlflow_server,
                                                                            tmp_path):
    p = Pipeline(made, mlflow_server, "twice")
    first = p.publish()
    again = p.publish()
    # Another pod, without the shared workspace's record: MLflow's tags alone must tell.
    elsewhere = Workspace(tmp_path / p.ws.key)
    from_scratch = p.publish(ws=elsewhere)

    assert again == first == from_scratch
    assert len(p.runs()) == 1 and [v.version for v in p.versions()] == ["1"]
    assert publish_records(elsewhere, "run-1")
    experiment = p.client.get_experiment_by_name(p.config.mlflow.experiment).experiment_id
    assert len(p.client.search_logged_models([experiment])) == 1


def test_another_dag_run_of_the_same_model_is_a_new_run_and_version(made, mlflow_server):
    p = Pipeline(made, mlflow_server, "daily")
    monday = p.publish({"dag_run_id": "monday"})
    tuesday = p.publish({"dag_run_id": "tuesday"})

    assert monday.run_id != tuesday.run_id
    assert (monday.version, tuesday.version) == ("1", "2")
    assert p.champion_version() == "2"


def test_a_publish_killed_after_logging_the_run_is_completed_by_the_rerun(made, mlflow_server):
    p = Pipeline(made, mlflow_server, "killed_after_run")
    pub = publication(p.config, made["pulled"], made["candidates"], made["evaluation"], p.gate,
                      p.ws, {"dag_run_id": "run-1"})
    with mlflow_client(mlflow_server) as client:
        _, half_done = log_run(client, pub)
    assert half_done.info.status == "RUNNING" and p.versions() == []

    out = p.publish()

    assert out.run_id == half_done.info.run_id and len(p.runs()) == 1
    assert [v.version for v in p.versions()] == [out.version] == ["1"]
    assert p.champion_version() == "1"
    assert p.client.get_run(out.run_id).info.status == "FINISHED"


def test_a_publish_killed_before_moving_the_alias_is_completed_by_the_rerun(made, mlflow_server):
    p = Pipeline(made, mlflow_server, "killed_before_alias")
    pub = publication(p.config, made["pulled"], made["candidates"], made["evaluation"], p.gate,
                      p.ws, {"dag_run_id": "run-1"})
    with mlflow_client(mlflow_server) as client:
        experiment, run = log_run(client, pub)
        logged = log_model(client, pub, experiment, run, pub.model)
        registered = register(client, pub, pub.model, logged, experiment, run)
    assert p.champion_version() is None

    out = p.publish()

    assert out.version == registered and out.alias_moved
    assert len(p.runs()) == 1 and len(p.versions()) == 1 and p.champion_version() == registered


def test_a_rerun_of_an_older_dag_run_does_not_take_the_alias_back(made, mlflow_server,
                                                                  tmp_path):
    p = Pipeline(made, mlflow_server, "no_going_back")
    monday = p.publish({"dag_run_id": "monday"})
    p.publish({"dag_run_id": "tuesday"})

    rerun = p.publish({"dag_run_id": "monday"}, ws=Workspace(tmp_path / p.ws.key))

    assert rerun.version == monday.version == "1" and not rerun.alias_moved
    assert p.champion_version() == "2" and len(p.versions()) == 2


def test_a_local_sqlite_store_keeps_artifacts_beside_its_database(made, tmp_path, monkeypatch):
    # The config's default store is a sqlite file; MLflow alone would put artifacts in ./mlruns.
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    store = tmp_path / "store" / "mlflow.db"
    store.parent.mkdir()
    p = Pipeline(made, f"sqlite:///{store}", "local")

    out = p.publish()
    champion = find_champion(p.config)

    assert list(cwd.iterdir()) == []
    artifacts = tmp_path / "store" / "artifacts"
    assert (artifacts / out.run_id / "artifacts" / "report" / "report.html").is_file()
    model_id = out.model_uri.removeprefix("models:/")
    assert (artifacts / "models" / model_id / "artifacts" / "saved_model" / "saved_model.pb"
            ).is_file()
    assert champion.version == out.version == "1"
    assert champion.digest == model_digest(made["candidates"][0].path)


def test_the_demos_one_liner_loads_the_champion_of_a_local_store(made, tmp_path):
    from tfopt.components.demo.run import pyfunc_one_liner

    store = tmp_path / "mlflow" / "mlflow.db"
    store.parent.mkdir()
    p = Pipeline(made, f"sqlite:///{store}", "demo")
    p.publish()

    done = subprocess.run(["bash", "-c", pyfunc_one_liner(f"sqlite:///{store}", "demo")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          check=False)

    assert done.returncode == 0, done.stderr[-3000:]
    # the input example's prediction, one row of the signature's output_0
    assert re.match(r"\{'output_0': \[\[(-?[0-9.e-]+, ){4}-?[0-9.e-]+\]\]\}$",
                    done.stdout.strip()), done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow"]  # no stray store


def test_an_unreachable_server_fails_fast_with_one_line_and_records_nothing(made, mlflow_server):
    reachable = Pipeline(made, mlflow_server, "outage")
    reachable.publish({"dag_run_id": "before"})
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, never listening
        down = Pipeline(made, closed, "outage")

        started = time.monotonic()
        with pytest.raises(TrackingError) as caught:
            down.publish({"dag_run_id": "during"})
        elapsed = time.monotonic() - started

    assert elapsed < 30
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"MLflow at {closed} is unreachable")
    assert not publish_records(down.ws, "during")
    assert reachable.champion_version() == "1" and len(reachable.runs()) == 1


HUNG_TIMEOUT_SECONDS, HUNG_RETRIES = 5, 1
# (1 + retries) waits for an answer, a backoff, and room for a busy CI machine.
HUNG_BOUND_SECONDS = (1 + HUNG_RETRIES) * HUNG_TIMEOUT_SECONDS + 1 + 10


def _short_mlflow_timeouts(monkeypatch) -> None:
    """What an operator sets to bound a hung server; the environment wins over the pipeline's
    own 30 s x 3 tries (components/tracking)."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", str(HUNG_TIMEOUT_SECONDS))
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(HUNG_RETRIES))
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")


def test_a_server_that_accepts_connections_but_never_answers_fails_in_bounded_time(
        made, mlflow_server, monkeypatch):
    reachable = Pipeline(made, mlflow_server, "hung")
    reachable.publish({"dag_run_id": "before"})
    _short_mlflow_timeouts(monkeypatch)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)  # the kernel completes the handshake; nothing ever reads or answers
        hung = f"http://127.0.0.1:{sock.getsockname()[1]}"
        down = Pipeline(made, hung, "hung")

        started = time.monotonic()
        with pytest.raises(TrackingError) as caught:
            down.publish({"dag_run_id": "during"})
        elapsed = time.monotonic() - started

    assert elapsed < HUNG_BOUND_SECONDS
    assert str(caught.value) == f"MLflow at {hung} is unreachable: no answer in time"
    assert not publish_records(down.ws, "during")
    assert reachable.champion_version() == "1" and len(reachable.runs()) == 1


def test_an_unanswered_registration_fails_in_bounded_time_and_its_rerun_keeps_one_version(
        made, mlflow_server, monkeypatch):
    direct = Pipeline(made, mlflow_server, "stalled")
    direct.publish({"dag_run_id": "before"})
    with FaultProxy(mlflow_server) as proxy:
        # The server registers the version; its answer is held until the client gives up.
        # MLflow's client retries the POST after the timeout, so the server registers twice.
        proxy.add("stall_after_forward", r"/model-versions/create$", method="POST")
        through = Pipeline(made, proxy.url, "stalled")
        with monkeypatch.context() as short:
            _short_mlflow_timeouts(short)
            started = time.monotonic()
            with pytest.raises(TrackingError) as caught:
                through.publish({"dag_run_id": "during"})
            elapsed = time.monotonic() - started
        sent = len(proxy.seen("POST", r"/model-versions/create$"))
        proxy.clear()
        proxy.release()
        assert elapsed < HUNG_BOUND_SECONDS
        assert sent == HUNG_RETRIES + 1
        assert str(caught.value) == f"MLflow at {proxy.url} is unreachable: no answer in time"
        assert direct.champion_version() == "1"
        assert len(direct.versions()) == 1 + sent  # the duplicates the retry made

        rerun = through.publish({"dag_run_id": "during"})

    during = [v for v in direct.versions() if v.tags.get("tfopt.dag_run_id") == "during"]
    assert [v.version for v in during] == [rerun.version] == ["2"]  # the lowest one kept
    assert direct.champion_version() == "2" and len(direct.versions()) == 2


def test_an_older_publish_whose_alias_move_lands_late_gives_the_alias_back(made, mlflow_server):
    # Monday's publish reads the alias, then its move is held on the wire while Tuesday's
    # publish registers a newer version and moves the alias; Monday's move then lands last.
    tuesday = Pipeline(made, mlflow_server, "late_alias")
    with FaultProxy(mlflow_server) as proxy:
        proxy.add("hold", r"/registered-models/alias$", method="POST", times=1)
        monday = Pipeline(made, proxy.url, "late_alias")
        outcome = {}
        held = threading.Thread(
            target=lambda: outcome.update(out=monday.publish({"dag_run_id": "monday"})))
        held.start()
        assert proxy.wait_for_stall(timeout=120)
        newer = tuesday.publish({"dag_run_id": "tuesday"})
        assert tuesday.champion_version() == newer.version == "2"
        proxy.release()
        held.join(timeout=120)

    assert outcome["out"].version == "1" and not outcome["out"].alias_moved
    assert tuesday.champion_version() == "2"


def test_a_version_deleted_between_reading_and_aliasing_is_passed_over(made, mlflow_server,
                                                                        monkeypatch):
    # Seen in a 20-publish load run: a publish saw another DAG run's duplicate version before
    # that run deleted it, tried to move the alias onto it, and failed on the missing version.
    p = Pipeline(made, mlflow_server, "vanishing")
    first = p.publish({"dag_run_id": "a"})
    assert first.version == "1"
    plain = RaceTolerantClient
    injected = {}

    class RacedClient(plain):
        def get_registered_model(self, name):
            if "registered" not in injected:  # a version registered while the alias moves
                source = p.client.get_model_version(name, "1")
                injected["registered"] = p.client.create_model_version(
                    name, source=source.source, run_id=source.run_id,
                    model_id=first.model_uri.removeprefix("models:/"),
                    tags={PUBLISH_KEY_TAG: "another DAG run"}).version
            return super().__getattr__("get_registered_model")(name)

        def set_registered_model_alias(self, name, alias, version):
            if version == injected.get("registered") and "deleted" not in injected:
                p.client.delete_model_version(name, version)  # by its own racing publish
                injected["deleted"] = version
            return super().__getattr__("set_registered_model_alias")(name, alias, version)

    monkeypatch.setattr(publish_step, "RaceTolerantClient", RacedClient)
    out = p.publish({"dag_run_id": "b"})

    assert injected == {"registered": "3", "deleted": "3"}  # the fault did happen
    assert out.version == "2" and out.alias_moved and p.champion_version() == "2"
    assert sorted(v.version for v in p.versions()) == ["1", "2"]
    assert {r.info.status for r in p.runs()} == {"FINISHED"}


def test_an_alias_on_a_duplicate_version_moves_to_the_kept_version_before_it_is_deleted(
        made, mlflow_server):
    # Issue 15, 2a: a publish set the alias on another DAG run's duplicate version just before
    # that run deleted it; MLflow drops a deleted version's aliases with it.
    p = Pipeline(made, mlflow_server, "alias_on_duplicate")
    first = p.publish({"dag_run_id": "a"})
    kept = p.client.get_model_version(p.name, first.version)
    duplicate = p.client.create_model_version(
        p.name, source=kept.source, run_id=kept.run_id,
        model_id=first.model_uri.removeprefix("models:/"), tags=dict(kept.tags))
    p.client.set_registered_model_alias(p.name, "champion", duplicate.version)

    # A rerun of DAG run "a" finds and deletes it; the alias must survive before its own
    # alias move (which a newer version elsewhere would stop) even runs.
    found = find_version(p.client, p.name, kept.tags[PUBLISH_KEY_TAG])

    assert found.version == first.version == "1"
    assert [v.version for v in p.versions()] == ["1"]
    assert p.champion_version() == "1"


def test_localhost_and_127_0_0_1_are_one_server_one_run_one_version(made, mlflow_server,
                                                                      tmp_path):
    # Issue 15, 2b: the publish is keyed by what the server reports, not by its URL.
    assert "127.0.0.1" in mlflow_server
    by_ip = Pipeline(made, mlflow_server, "two_urls")
    by_name = Pipeline(made, mlflow_server.replace("127.0.0.1", "localhost"), "two_urls")
    assert by_ip.ws.root == by_name.ws.root  # one workspace: the URL is not in the fingerprint

    first = by_ip.publish()
    # Another pod, without the shared workspace's record: MLflow's tags alone must tell.
    elsewhere = by_name.publish(ws=Workspace(tmp_path / by_name.ws.key))
    shared = by_name.publish()

    assert len(by_ip.runs()) == 1 and [v.version for v in by_ip.versions()] == ["1"]
    assert (elsewhere.run_id, elsewhere.version) == (shared.run_id, shared.version) == (
        first.run_id, first.version)
    assert shared.tracking_uri == by_name.config.mlflow.tracking_uri  # where it was asked
    experiment = by_ip.client.get_experiment_by_name(by_ip.config.mlflow.experiment)
    assert len(by_ip.client.search_logged_models([experiment.experiment_id])) == 1


def test_another_server_sharing_the_workdir_gets_its_own_publish(made, mlflow_server, tmp_path,
                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    served = Pipeline(made, mlflow_server, "two_servers")
    local = Pipeline(made, f"sqlite:///{tmp_path / 'other.db'}", "two_servers")
    assert served.ws.root == local.ws.root

    on_server = served.publish()
    on_local = local.publish()

    assert on_local.tracking_uri.startswith("sqlite:") and on_local.version == "1"
    assert len(local.runs()) == 1 and on_local.run_id != on_server.run_id
    assert len(publish_records(served.ws, "run-1")) == 2


def test_a_candidate_tf_serving_cannot_load_is_refused_before_anything_is_logged(
        made, mlflow_server, tmp_path):
    # Issue 15, 2e: TF2 loads it; TF Serving's loader (tag 'serve', TF1 Session) does not.
    from tensorflow.core.protobuf import saved_model_pb2

    from tfopt.optimizer.verify.servability import NotServableError

    broken = tmp_path / "untagged"
    shutil.copytree(made["candidates"][0].path, broken)
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((broken / "saved_model.pb").read_bytes())
    del proto.meta_graphs[0].meta_info_def.tags[:]
    proto.meta_graphs[0].meta_info_def.tags.append("train")
    (broken / "saved_model.pb").write_bytes(proto.SerializeToString())
    candidate = dataclasses.replace(made["candidates"][0], path=str(broken),
                                    digest=model_digest(broken))
    p = Pipeline(made, mlflow_server, "not_servable")

    with pytest.raises(NotServableError, match="candidate 'optimized'.*tag 'serve'"):
        publish(p.config, made["pulled"], [candidate], made["evaluation"], p.gate, p.ws,
                {"dag_run_id": "run-1"})

    assert p.runs() == [] and not p.client.search_registered_models(f"name = '{p.name}'")
    assert not publish_records(p.ws, "run-1")
    # The verdict is kept per content: a rerun (or a concurrent publish) does not load it again.
    kept = [json.loads(f.read_text()) for f in (p.ws.root / "servable").glob("*.json")]
    assert [(k["candidate"], "tag 'serve'" in k["error"]) for k in kept] == [("optimized", True)]
    with pytest.raises(NotServableError, match="candidate 'optimized'"):
        publish(p.config, made["pulled"], [candidate], made["evaluation"], p.gate, p.ws,
                {"dag_run_id": "run-2"})


def tuned_settings(model_path: str, intra: int, inter: int):
    """A runtime_settings record as the gate's tuning writes it, with chosen threads."""
    from tfopt.optimizer.runtime_tuning import TunedRuntimeSettings
    from tfopt.optimizer.runtime_tuning.grid import ThreadSetting

    return TunedRuntimeSettings(
        model=model_path, intra_op_threads=intra, inter_op_threads=inter, num_threads=None,
        recommended_batch_size=None, batch_reason="", throughput_target=None,
        latency_slo_ms=None, reference=ThreadSetting(2, 1), thread_probes=(), batch_curve=(),
        batches_not_measured=(), available_cpus=2, cpu_quota=None, cpu_model="test")


def test_the_version_description_says_format_runtime_the_tuned_load_line_and_the_report(
        made, tmp_path):
    from tfopt.components.publishing.run_record import version_description

    config = config_from_mapping({"source": made["pulled"].uri, "workdir": str(tmp_path),
                                  "mlflow": {"registered_model": "described"}})
    settings = tuned_settings(made["candidates"][0].path, 1, 2).to_json(
        tmp_path / "runtime_settings.json")
    gate = dataclasses.replace(made["gates"]["promote"], runtime_settings_path=str(settings))
    ws = Workspace.for_run(config.workdir, made["pulled"].digest, config.fingerprint())
    pub = publication(config, made["pulled"], made["candidates"], made["evaluation"], gate, ws,
                      {})
    text = version_description(pub, pub.models[0], "7", "abc123")
    paragraphs = text.split("\n\n")
    assert paragraphs[0].startswith("**PROMOTE optimized: ")
    assert paragraphs[1] == ("Format: savedmodel; runtime: tensorflow (tuned: intra-op 1, "
                             "inter-op 2 threads)")
    assert paragraphs[2] == (
        "Load: `tf.config.threading.set_intra_op_parallelism_threads(1); "
        "tf.config.threading.set_inter_op_parallelism_threads(2); "
        "tf.saved_model.load(path).signatures['serving_default']`")
    assert "#/experiments/7/runs/abc123/artifactPath/report/report.html" in paragraphs[-1]
    # the tag machines read says the same
    assert pub.load_instructions(pub.models[0]) in text
