"""What the tests of every converter and runtime check alike: the sidecar's snippet run as a user
pastes it, a two-input signature kept through conversion, a runner's outputs at any batch size."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from tfopt.optimizer.inputs.generated import make_inputs
from tfopt.optimizer.runtime import load_runner

FLOAT_ATOL = 1e-5  # a float flavour computes what the SavedModel does, in another order


def run_load_snippet(model_path: Path, output: str) -> str:
    """The snippet of ``model_path``'s sidecar run in a fresh interpreter in the model's
    directory, then ``sorted(outputs)`` and the shape of ``outputs[output]`` printed."""
    sidecar = model_path.with_name(model_path.name + ".json")
    snippet = json.loads(sidecar.read_text())["load"]["python"]
    done = subprocess.run([sys.executable, "-c", snippet + f"print(sorted(outputs), "
                           f"outputs[{output!r}].shape)"], cwd=model_path.parent,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def assert_keeps_the_calibrated_signature(source: Path, converted: Path) -> None:
    """``converted`` (from model_zoo's tf_module_two_signatures, signature ``calibrated``: a
    batch of features and a scalar temperature) has its keys and its outputs."""
    reference = load_runner(source, "calibrated")
    runner = load_runner(converted, "calibrated")
    assert runner.signature.input_keys == ["features", "temperature"]
    assert runner.signature.output_keys == ["logits", "probabilities"]
    feeds = {"features": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4),
             "temperature": np.float32(2.0)}
    for key, value in reference(feeds).items():
        np.testing.assert_allclose(runner(feeds)[key], value, atol=FLOAT_ATOL)


def assert_outputs_match_at_any_batch(model: Path, source: Path) -> None:
    """The benchmark's path (to_tensors, call, outputs) gives the SavedModel's outputs at
    batch 1, 3 and 64 through one runner (the shape changes between calls)."""
    reference = load_runner(source)
    runner = load_runner(model)
    for batch in (1, 3, 64):
        feeds = make_inputs(runner.signature, batch, seed=batch)
        got = runner.outputs(runner.call(runner.to_tensors(feeds)))
        for key, value in reference(feeds).items():
            np.testing.assert_allclose(got[key], value, atol=FLOAT_ATOL, err_msg=f"batch {batch}")
