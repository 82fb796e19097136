"""A mixed int8 candidate through the gate to a real MLflow registry: the published version
says which layers it keeps in float, and ``mlflow.pyfunc`` loads it from the registry and
predicts what the candidate computes."""

from __future__ import annotations

import mlflow
import numpy as np
import pytest
from precision_models import searched_candidate, train_model
from publish_inputs import judge

from tfopt.components.config.pipeline_config import config_from_mapping
from tfopt.components.pipeline.artifacts import CandidateModel, PulledModel
from tfopt.components.pipeline.workspace import Workspace
from tfopt.components.steps.publish import publish
from tfopt.optimizer.benchmark.environment import model_digest
from tfopt.optimizer.gate.verdict import GateConfig
from tfopt.optimizer.runtime import load_runner
from tfopt.optimizer.verify.evaluation import load_labelled_data

pytest_plugins = ["mlflow_server"]
pytestmark = pytest.mark.slow  # trains, searches, benchmarks and publishes: ~3 minutes


@pytest.fixture(scope="module")
def published(mlflow_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("precision_registry")
    model = train_model("wine", root)
    outcome = searched_candidate(model, root / "search", "relaxed",
                                 cost_cache=root / "precision_costs.json")
    assert outcome.candidate is not None, outcome.reason
    candidate = CandidateModel.made(outcome.candidate, kind="derived",
                                    digest=model_digest(outcome.candidate.artifact_dir),
                                    trace=[outcome.to_dict()])
    evaluation, gate = judge(root, model.saved_model, [candidate],
                             GateConfig(min_speedup=1.05, max_accuracy_drop_abs=0.01),
                             eval_data=model.eval_data)
    assert gate.chosen == candidate.label, gate.summary
    pulled = PulledModel(uri=str(model.saved_model), path=str(model.saved_model),
                         digest=model_digest(model.saved_model))
    name = "precision-mixed"
    config = config_from_mapping({
        "source": str(model.saved_model), "workdir": str(root / "work"),
        "mlflow": {"tracking_uri": mlflow_server, "experiment": name, "registered_model": name}})
    ws = Workspace.for_run(config.workdir, pulled.digest, config.fingerprint())
    out = publish(config, pulled, [candidate], evaluation, gate, ws, {"dag_run_id": "mixed-1"})
    assert out.version == "1"
    return name, candidate, model


def test_the_published_version_lists_the_layers_kept_in_float(published, mlflow_server):
    name, candidate, _ = published
    version = mlflow.MlflowClient(mlflow_server).get_model_version(name, "1")
    assert version.tags["tfopt.variant"] == "mixed_int8"
    assert version.tags["tfopt.float_layers"].split(",") == list(candidate.float_layers)
    assert any("normalize" in layer for layer in candidate.float_layers)


def test_pyfunc_loads_the_mixed_model_from_the_registry(published, mlflow_server, monkeypatch):
    name, candidate, model = published
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    loaded = mlflow.pyfunc.load_model(f"models:/{name}@champion")
    data = load_labelled_data(model.eval_data)
    batch = {"features": data.x[:7]}
    predicted = loaded.predict(batch)
    expected = load_runner(candidate.path, num_threads=1)(batch)
    np.testing.assert_allclose(predicted["output_0"], expected["output_0"], rtol=1e-5,
                               atol=1e-6)
    assert (predicted["output_0"].argmax(-1) == data.y[:7]).mean() >= 0.8
