"""tfopt step NAME: one pipeline step, as each containerized task calls it."""

from __future__ import annotations

import json
from pathlib import Path

from components.cli.run_command import add_config_arguments, load_config_from_args


def add_parser(sub) -> None:
    from components.pipeline import STEPS

    p = sub.add_parser("step", help="run one pipeline step (containerized tasks call this)",
                       description="Run one step with the JSON outputs of the steps it needs. "
                                   "Prints the step's own output JSON, and writes it to "
                                   "--output (KubernetesPodOperator reads "
                                   "/airflow/xcom/return.json).")
    p.add_argument("name", choices=STEPS, help="the step")
    add_config_arguments(p)
    p.add_argument("--inputs", default="{}",
                   help="JSON {step name: output} of earlier steps, or @FILE to read it")
    p.add_argument("--output", default=None, help="also write the output JSON here")
    p.add_argument("--run-id", default=None, help="the DAG run id, recorded by publish")
    p.set_defaults(run=run)


def _read_inputs(text: str) -> dict:
    from components.step_runner import StepInputError

    try:
        raw = Path(text[1:]).read_text() if text.startswith("@") else text
        data = json.loads(raw)
    except (OSError, json.JSONDecodeError) as exc:
        raise StepInputError(f"--inputs is not readable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise StepInputError("--inputs must be a JSON object of {step name: output}")
    return data


def run(args) -> int:
    from components.step_runner import run_step

    config = load_config_from_args(args)
    output = run_step(args.name, config, _read_inputs(args.inputs),
                      {"dag_run_id": args.run_id} if args.run_id else {})
    text = json.dumps(output, sort_keys=True)
    if args.output:
        from optimizer.atomic import atomic_file

        with atomic_file(Path(args.output), overwrite=True) as staging:
            staging.write_text(text + "\n")
    print(text)
    return 0
