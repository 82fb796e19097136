"""tfopt optimize --strategy greedy|relaxed: a substitution search, checked and written like a recipe.

The model is the block of test_search_relaxation.py as a real SavedModel: a 1x1 and a 3x3
convolution with 8 filters each (and a ReLU each) on a 14x14x256 input. On this CPU the op cost
model makes enlarging the 1x1 kernel slower and merging the two 3x3 convs faster (that test
asserts the premise), so relaxed search with alpha 2 reaches the merged graph.
"""

import itertools
import json

import numpy as np
import pytest
from cli_testing import assert_clean_failure, run_tfopt
from graph_testing import op_counts, tf

from tfopt.components.cli import main
from tfopt.optimizer.model.export import read_provenance
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.model.savedmodel import list_signatures
from tfopt.optimizer.verify.equivalence import compare

SIZE, CHANNELS, FILTERS = 14, 256, 8
ATOL = 1e-4  # the merged conv sums the same products; only float reassociation differs


class TwoConvs(tf.Module):
    def __init__(self):
        rng = np.random.default_rng(0)
        self.narrow = tf.Variable(rng.standard_normal((1, 1, CHANNELS, FILTERS)) * 0.1,
                                  dtype=tf.float32)
        self.wide = tf.Variable(rng.standard_normal((3, 3, CHANNELS, FILTERS)) * 0.1,
                                dtype=tf.float32)

    @tf.function(input_signature=[tf.TensorSpec([None, SIZE, SIZE, CHANNELS], tf.float32,
                                                name="image")])
    def serve(self, image):
        a = tf.nn.relu(tf.nn.conv2d(image, self.narrow, 1, "SAME"))
        b = tf.nn.relu(tf.nn.conv2d(image, self.wide, 1, "SAME"))
        return {"features": a + b}


@pytest.fixture(scope="module")
def two_conv_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("two_convs") / "model"
    module = TwoConvs()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path


@pytest.fixture(autouse=True)
def private_cost_cache(tmp_path_factory, monkeypatch):
    # One cache for the module's tests: the op timings are made once, not in ~/.cache.
    cache = tmp_path_factory.getbasetemp() / "optimize_search_op_costs.json"
    monkeypatch.setenv("TFOPT_OP_COST_CACHE", str(cache))


def _same_signature(src, dst):
    before, after = list_signatures(src)["serving_default"], list_signatures(dst)
    assert list(after) == ["serving_default"]
    assert after["serving_default"].same_contract(before), (before, after)


def test_relaxed_search_writes_the_merged_graph_with_the_same_signature_and_outputs(
        two_conv_model, tmp_path, capsys):
    dst, trace_file = tmp_path / "relaxed", tmp_path / "trace.json"

    code = main(["optimize", str(two_conv_model), str(dst), "--strategy", "relaxed",
                 "--alpha", "2", "--budget", "50", "--remeasure-top", "0",
                 "--trace", str(trace_file)])

    out = capsys.readouterr().out
    assert code == 0
    _same_signature(two_conv_model, dst)
    assert compare(two_conv_model, dst).max_abs_diff <= ATOL
    for line in ("recipe       relaxed(alpha=2, cost=model)", "backend      search",
                 "search       ", " expansions, ", " candidates generated, ", " duplicates, ",
                 "cost         op-model: ", "returned     best", "substitutions",
                 "cost after", "tolerance    atol 0.0001: within", f"wrote        {dst}"):
        assert line in out, out
    # The trace in order: the slower enlargement first, then the merge it enables.
    enlarge, merge = out.index("enlarge_conv_kernel"), out.index("merge_parallel_convs")
    assert enlarge < merge
    assert op_counts(freeze(dst).graph_def)["Conv2D"] == 1

    provenance = read_provenance(dst)
    assert provenance["recipe"] == "relaxed(alpha=2, cost=model)"
    steps = [s["substitution"].split("(")[0] for s in provenance["trace"]]
    assert steps.index("enlarge_conv_kernel") < steps.index("merge_parallel_convs")
    assert provenance["trace"][-1]["cost"] < provenance["search"]["input_cost"]
    assert provenance["search"]["stats"]["expansions"] >= 2
    saved = json.loads(trace_file.read_text())
    assert saved["steps"] == provenance["trace"]
    assert saved["search"]["returned"] == "best"


def test_greedy_search_writes_a_valid_model_and_remeasures_end_to_end(
        two_conv_model, tmp_path, capsys):
    dst = tmp_path / "greedy"

    code = main(["optimize", str(two_conv_model), str(dst), "--strategy", "greedy",
                 "--budget", "50", "--remeasure-top", "2", "--json"])

    summary = json.loads(capsys.readouterr().out)
    assert code == 0
    assert summary["recipe"] == "greedy(cost=model)" and summary["accepted"]
    _same_signature(two_conv_model, dst)
    assert compare(two_conv_model, dst).max_abs_diff <= ATOL
    search = summary["search"]
    assert search["alpha"] == 1.0
    assert search["returned"] in ("best", "fallback", "input", "remeasured")
    # The input is always among the graphs timed end to end, and the written one was measured.
    assert "input" in [m["graph"] for m in search["measured"]]
    assert search["measured_seconds"] > 0
    # The one-pass cleanup comes first; after it greedy never accepts a costlier step, so
    # every cost on its trace falls.
    trace = search["trace"]
    cleanup = [s for s in trace if s["substitution"].startswith("cleanup:")]
    assert trace[:len(cleanup)] == cleanup and len(cleanup) == 3
    costs = [s["cost"] for s in trace[len(cleanup) - 1:]]
    assert all(b < a for a, b in itertools.pairwise(costs)), costs


def test_the_measured_cost_times_every_candidate_end_to_end(two_conv_model, tmp_path, capsys):
    dst = tmp_path / "measured"

    code = main(["optimize", str(two_conv_model), str(dst), "--strategy", "relaxed",
                 "--alpha", "1.5", "--budget", "2", "--cost", "measured", "--remeasure-top", "0",
                 "--json"])

    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["recipe"] == "relaxed(alpha=1.5, cost=measured)"
    assert summary["search"]["cost_name"] == "measured"
    assert summary["search"]["stats"]["expansions"] <= 2
    _same_signature(two_conv_model, dst)
    assert compare(two_conv_model, dst).max_abs_diff <= ATOL


@pytest.mark.parametrize("args, phrase", [
    (["--strategy", "relaxed", "--budget", "0"], "budget must be >= 1"),
    (["--strategy", "relaxed", "--time-budget", "0"], "time budget must be > 0"),
    (["--strategy", "relaxed", "--transforms", "strip_unused_nodes"],
     "apply only to --strategy recipe"),
    (["--strategy", "greedy", "--alpha", "1.1"], "--alpha applies only to --strategy relaxed"),
    (["--strategy", "greedy", "--recipe", "inference"], "apply only to --strategy recipe"),
])
def test_bad_search_settings_exit_2_before_anything_is_loaded(tmp_path, capsys, args, phrase):
    dst = tmp_path / "dst"
    assert main(["optimize", str(tmp_path / "missing_src"), str(dst), *args]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("tfopt: error: ") and phrase in error, error
    assert not dst.exists()


def test_the_real_command_rejects_alpha_below_1_in_one_line(tmp_path):
    dst = tmp_path / "dst"
    result = run_tfopt("optimize", tmp_path / "src", dst, "--strategy", "relaxed",
                       "--alpha", "0.5")
    assert_clean_failure(result, 2, "alpha must be >= 1", "0.5")
    assert not dst.exists()


def test_the_pipeline_config_selects_the_search_and_rejects_alpha_below_1():
    from tfopt.components.config.pipeline_config import ConfigError, config_from_mapping
    from tfopt.components.steps.optimize import search_settings_of

    assert search_settings_of(config_from_mapping({"source": "/m"})) is None  # recipe: as before
    relaxed = search_settings_of(config_from_mapping({"source": "/m"}, overrides=[
        "optimize.strategy=relaxed", "optimize.alpha=1.1", "optimize.budget=40",
        "optimize.time_budget_seconds=30", "optimize.cost=measured"]))
    assert (relaxed.strategy, relaxed.alpha, relaxed.budget, relaxed.time_budget,
            relaxed.cost) == ("relaxed", 1.1, 40, 30.0, "measured")
    assert relaxed.describe() == "relaxed(alpha=1.1, cost=measured)"
    greedy = search_settings_of(config_from_mapping(
        {"source": "/m", "optimize": {"strategy": "greedy"}}))
    assert greedy.alpha == 1.0 and greedy.describe() == "greedy(cost=model)"
    with pytest.raises(ConfigError, match=r"optimize\.alpha"):
        config_from_mapping({"source": "/m", "optimize": {"alpha": 0.5}})
