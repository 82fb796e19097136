"""tfopt step NAME: one pipeline step, as each containerized task calls it."""

from __future__ import annotations

import json
from pathlib import Path

from tfopt.components.cli.run_command import add_config_arguments, load_config_from_args


def add_parser(sub) -> None:
    from tfopt.components.pipeline.step_table import NAMES

    p = sub.add_parser("step", help="run one pipeline step (containerized tasks call this)",
                       description="Run one step with the JSON outputs of the steps it needs. "
                                   "Prints the step's own output JSON, and writes it to "
                                   "--output (KubernetesPodOperator reads "
                                   "/airflow/xcom/return.json).")
    p.add_argument("name", choices=NAMES, help="the step")
    add_config_arguments(p)
    p.add_argument("--inputs", default="{}",
                   help="JSON {step name: output} of earlier steps, or @FILE to read it")
    p.add_argument("--output", default=None, help="also write the output JSON here")
    # what every command takes; a step always prints its output as JSON
    p.add_argument("--json", action="store_true",
                   help="print the output as JSON (always: what orchestrators read)")
    p.add_argument("--run-id", default=None, help="the DAG run id, recorded by publish")
    p.add_argument("--pod-memory", action="append", default=[], metavar="STEP=FILE",
                   help="pull: write the memory STEP's pod needs for the model pulled to FILE "
                        "(Kubeflow sizes the pod from it; repeatable)")
    p.set_defaults(run=run)


def _read_inputs(text: str) -> dict:
    from tfopt.components.pipeline.step_runner import StepInputError

    try:
        raw = Path(text[1:]).read_text() if text.startswith("@") else text
        data = json.loads(raw)
    except (OSError, json.JSONDecodeError) as exc:
        raise StepInputError(f"--inputs is not readable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise StepInputError("--inputs must be a JSON object of {step name: output}")
    return data


def run(args) -> int:
    from tfopt.components.cli.stage_lines import stages_of
    from tfopt.components.pipeline.step_runner import run_step

    config = load_config_from_args(args)
    memory_files = _pod_memory_files(args.pod_memory)  # bad input before any work
    with stages_of(args).stage(args.name):
        output = run_step(args.name, config, _read_inputs(args.inputs),
                          {"dag_run_id": args.run_id} if args.run_id else {})
    text = json.dumps(output, sort_keys=True)
    if args.output:
        _write(Path(args.output), text + "\n")
    for step, file in memory_files.items():
        _write(Path(file), _pod_memory_of(output, step))
    print(text)
    return 0


def _write(path: Path, text: str) -> None:
    from tfopt.optimizer.files.atomic import atomic_file

    with atomic_file(path, overwrite=True) as staging:
        staging.write_text(text)


def _pod_memory_files(pairs: list[str]) -> dict[str, str]:
    from tfopt.components.pipeline.step_runner import StepInputError

    files = {}
    for pair in pairs:
        step, sep, file = pair.partition("=")
        if not sep or not step or not file:
            raise StepInputError(f"--pod-memory expects STEP=FILE, got '{pair}'")
        files[step] = file
    return files


def _pod_memory_of(output: dict, step: str) -> str:
    from tfopt.components.pipeline.step_runner import POD_MEMORY_KEY, StepInputError

    sized = output.get(POD_MEMORY_KEY) or {}
    if step not in sized:
        raise StepInputError(f"--pod-memory: no memory for '{step}' in this step's output "
                             f"(pull sizes: {', '.join(sized) or 'none'})")
    return sized[step]
