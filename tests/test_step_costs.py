"""Every step's wall time and peak tree memory: carried forward, logged, shown."""

from tfopt.components.pipeline.step_runner import COSTS_KEY, inherited_costs
from tfopt.components.publishing.run_record import step_cost_metrics
from tfopt.optimizer.report.markdown import step_costs_table

COSTS = {"freeze": {"wall_seconds": 2.5, "peak_rss_bytes": 3 * 2**30},
         "optimize": {"wall_seconds": 4.0, "peak_rss_bytes": None}}


def test_a_step_gets_the_costs_of_every_step_before_it_from_its_inputs():
    inputs = {"pull": {"path": "x", COSTS_KEY: {"pull": {"wall_seconds": 1.0,
                                                         "peak_rss_bytes": 1}}},
              "optimize": {"path": "y", COSTS_KEY: COSTS}}
    assert set(inherited_costs(inputs)) == {"pull", "freeze", "optimize"}
    assert inherited_costs({"pull": {"path": "x"}}) == {}


def test_costs_become_step_metrics_and_an_unknown_peak_is_left_out():
    assert step_cost_metrics(COSTS) == {"step.freeze.wall_seconds": 2.5,
                                        "step.freeze.peak_rss_bytes": 3 * 2**30,
                                        "step.optimize.wall_seconds": 4.0}


def test_the_report_shows_each_step_beside_the_model_size():
    text = "\n".join(step_costs_table(COSTS, 2**30))
    assert "1.0 GiB on disk" in text
    assert "| freeze | 2.5 s | 3.0 GiB | 3.0x |" in text
    assert "| optimize | 4.0 s | n/a | - |" in text


def test_a_steps_part_costs_follow_its_own_as_step_dot_part_up_to_the_metrics():
    from tfopt.components.pipeline.artifacts import GateOutput
    from tfopt.components.pipeline.step_runner import own_costs
    from tfopt.optimizer.system.process_tree import Cost

    tune = {"wall_seconds": 40.0, "peak_rss_bytes": 2 * 2**30}
    gate = GateOutput(promote=True, chosen="x", chosen_path="x", summary="", verdict_path="v",
                      part_costs={"tune": tune})
    costs = own_costs("gate", Cost(50.0, 3 * 2**30), gate)
    assert list(costs) == ["gate", "gate.tune"] and costs["gate.tune"] == tune
    metrics = step_cost_metrics(costs)
    assert metrics["step.gate.tune.wall_seconds"] == 40.0
    assert metrics["step.gate.tune.peak_rss_bytes"] == 2 * 2**30
    assert "| gate.tune | 40.0 s | 2.0 GiB |" in "\n".join(step_costs_table(costs, 2**30))
    assert list(own_costs("pull", Cost(1.0, None), object())) == ["pull"]


def test_the_gates_tuning_is_measured_with_its_probe_processes_in_the_tree(model_dir, tmp_path):
    from tfopt.components.config.pipeline_config import PipelineConfig
    from tfopt.components.steps.gate import tune
    from tfopt.optimizer.system.process_tree import tree_rss_bytes

    before = tree_rss_bytes()
    # room for the reference probe alone: one TensorFlow process holding the model
    config = PipelineConfig(
        source="unused", resources={"memory_gb": (before + 1.6 * 2**30) / 2**30},
        tuning={"rounds": 1, "seconds_per_probe": 0.1, "time_budget_seconds": 1.0})
    written, cost = tune(config, str(model_dir("keras_cnn")), tmp_path)
    assert written == tmp_path / "runtime_settings.json" and written.is_file()
    assert cost.wall_seconds > 1.0
    assert cost.peak_rss_bytes > before + 300 * 2**20  # the probe's process counted
    assert tune(config.model_copy(update={"tuning": config.tuning.model_copy(
        update={"enabled": False})}), "unused", tmp_path) == (None, None)
