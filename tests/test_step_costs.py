"""Every step's wall time and peak tree memory: carried forward, logged, shown."""

from components.publishing.run_record import step_cost_metrics
from components.step_runner import COSTS_KEY, inherited_costs
from optimizer.report.markdown import step_costs_table

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
