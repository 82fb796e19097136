"""The report says which layers a mixed int8 candidate keeps in float, and shows the search's
trace: every assignment built and measured, predicted beside measured."""

from tfopt.optimizer.report.markdown import candidates_table
from tfopt.optimizer.report.precision_search import precision_outcomes, precision_search_lines


def _outcome(float_layers, tried):
    return {"strategy": "relaxed", "reason": "", "table_seconds": 3.2, "search_seconds": 9.5,
            "uniform_int8_error": 0.41, "float_layers": float_layers,
            "candidate": "litert_mixed_int8",
            "result": {"strategy": "relaxed", "max_error": 0.01, "tried": tried}}


TRIED = [
    {"float_layers": ["normalize/truediv"], "found_by": "greedy", "predicted_seconds": 21e-6,
     "predicted_error": 0.004, "measured_seconds": 23e-6, "measured_error": 0.0,
     "within_budget": True},
    {"float_layers": ["normalize/truediv", "conv1"], "found_by": "relaxed",
     "predicted_seconds": 19e-6, "predicted_error": 0.0, "measured_seconds": 20.5e-6,
     "measured_error": 0.02, "within_budget": False},
]


def test_each_assignment_tried_is_a_row_with_its_prediction_and_measurement():
    lines = precision_search_lines({"litert_mixed_int8": _outcome(["normalize/truediv"], TRIED)})
    text = "\n".join(lines)
    assert "### litert_mixed_int8" in text
    assert "kept in float: `normalize/truediv`" in text and "uniform int8's error 0.4100" in text
    assert "| `normalize/truediv`, `conv1` | relaxed | 19.0 us | 20.5 us | 0.0000 | 0.0200 | no |" \
        in text
    assert "| `normalize/truediv` | greedy | 21.0 us | 23.0 us | 0.0040 | 0.0000 | yes |" in text


def test_an_outcome_is_read_from_mixed_records_only():
    records = [{"label": "litert_full_int8", "variant": "full_int8", "trace": []},
               {"label": "optimized", "variant": "fp32",
                "trace": [{"transform": "fold_constants"}]},
               {"label": "onnx_mixed_int8", "variant": "mixed_int8",
                "trace": [_outcome(["a"], TRIED)]}]
    assert list(precision_outcomes(records)) == ["onnx_mixed_int8"]


def test_the_candidates_table_has_a_float_column_only_when_a_candidate_keeps_layers_in_float():
    row = {"label": "litert_full_int8", "format": "tflite", "runtime": "litert",
           "calibration": "data", "ratio_to_baseline": None, "accuracy": 0.9,
           "size_bytes": 1000, "verdict": "passed", "reasons": []}
    assert "kept in float" not in candidates_table([row])[0]
    mixed = {**row, "label": "litert_mixed_int8", "float_layers": ["normalize/truediv"]}
    header, _, first, second = candidates_table([row, mixed])
    assert "kept in float" in header
    assert "| normalize/truediv |" in second and "| - |" in first


def test_the_report_writes_the_section_and_its_json(tmp_path):
    import json

    from benchmark_testing import noisy_samples, synthetic_result

    from tfopt.optimizer.gate.verdict import evaluate_gate
    from tfopt.optimizer.report.write import write_report

    result = synthetic_result({1: noisy_samples(0.002, 60, 0)},
                              {"litert_mixed_int8": {"samples": {1: noisy_samples(0.001, 60, 1)}}})
    precision = {"litert_mixed_int8": _outcome(["normalize/truediv"], TRIED)}
    files = write_report(result, tmp_path / "report", evaluate_gate(result), charts=False,
                         precision=precision)
    markdown = files.markdown.read_text()
    assert "## Precision search" in markdown and "### litert_mixed_int8" in markdown
    assert json.loads(files.json.read_text())["precision_search"] == precision
