"""``make demo``: the whole pipeline on embedded defaults, through Airflow, in a few minutes.

1. trains a small CNN on scikit-learn's bundled digits (fixed seed; reused on a rerun);
2. runs the ``model_optimization`` DAG with ``airflow dags test`` on the DAG's own config
   (``dags/model_optimization.yaml``: the local model, a sqlite MLflow under ``work/mlflow``);
3. prints the gate's verdict, the before/after table, where to look, and last the one line
   that loads the champion the MLflow way (``mlflow.pyfunc.load_model("models:/...@champion")``)
   and the command that serves it.

A second ``make demo`` is a new DAG run: it benchmarks against the champion the first run
promoted (a LiteRT file, timed in LiteRT), so expect it to reject: the same model is not faster
than itself. Both end with exit 0; a rejection is a verdict, not a failure.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / "work"
TASK_DONE = re.compile(r"Pushing xcom.*?task_id='(\w+)'")
TASK_FAILED = re.compile(r"task_id='?(\w+)'?.*(?:failed|FAILED|up_for_retry)")


def _airflow_env(home: Path) -> dict[str, str]:
    return {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "TFOPT_PIPELINE_CONFIG": str(REPO / "dags" / "model_optimization.yaml"),
            "TF_CPP_MIN_LOG_LEVEL": "2", "MLFLOW_DISABLE_TELEMETRY": "true"}


def _run_dag(airflow: Path, env: dict[str, str], log_path: Path) -> tuple[int, str | None]:
    """``airflow dags test``, its log to a file, one progress line per finished task."""
    started, run_id = time.perf_counter(), None
    with open(log_path, "w") as log:
        process = subprocess.Popen([str(airflow), "dags", "test", "model_optimization"],
                                   cwd=REPO, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        for line in process.stdout:
            log.write(line)
            if match := TASK_DONE.search(line):
                print(f"      {match.group(1):<10} done ({time.perf_counter() - started:.0f}s)",
                      flush=True)
            if "DagRun Finished" in line and "run_id=" in line:
                run_id = line.split("run_id=", 1)[1].split(",", 1)[0]
        return process.wait(), run_id


def _show_outcome(tracking_uri: str, experiment: str, model: str, run_id: str | None) -> None:
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one small file
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id], order_by=["attributes.start_time DESC"],
                              filter_string=f"tags.`tfopt.dag_run_id` = '{run_id}'"
                              if run_id else "", max_results=1) if found else []
    if not runs:
        print("no MLflow run was recorded; see the Airflow log above")
        return
    run = runs[0]
    tags = run.data.tags
    baseline = tags.get("tfopt.baseline", "?")
    if tags.get("tfopt.baseline_role") == "champion":
        against = (f"the registry's champion, {baseline} ({tags.get('tfopt.baseline_format', '?')}"
                   f" on {tags.get('tfopt.baseline_runtime', '?')})")
    else:
        against = f"the unoptimized input ({baseline}): no champion yet"
    chosen = tags.get("tfopt.chosen")
    outcome = (f"PROMOTE {chosen}" if tags.get("tfopt.verdict") == "promote"
               else "REJECT: no candidate beats it by the gate's margin")
    print(f"judged vs    {against}")
    print(f"verdict      {outcome}")
    champion_found = False
    try:
        champion = client.get_model_version_by_alias(model, "champion")
        print(f"registry     {model}: alias 'champion' -> version {champion.version} "
              f"({champion.tags.get('tfopt.candidate', '?')}, "
              f"{champion.tags.get('tfopt.format', '?')} on "
              f"{champion.tags.get('tfopt.runtime', '?')})")
        champion_found = True
    except Exception:  # noqa: BLE001 - no champion yet is a normal outcome
        print(f"registry     {model}: no champion")
    report = Path(client.download_artifacts(run.info.run_id, "report",
                                            str(WORK / "demo" / "last_report"))) / "report.html"
    text = report.with_name("report.md").read_text()
    table = text[text.find("| "):].split("\n\n", 1)[0] if "| " in text else ""
    if table:
        print("\n" + table + "\n")
    print(f"report       {report}")
    print(f"browse       {Path(sys.executable).parent / 'mlflow'} ui --backend-store-uri "
          f"{tracking_uri}   (then open http://127.0.0.1:5000)")
    if champion_found:
        print(f"load it      {pyfunc_one_liner(tracking_uri, model)}")
        print(f"serve it     {serve_command(tracking_uri, model)}")


def pyfunc_one_liner(tracking_uri: str, model: str, alias: str = "champion") -> str:
    """A shell line that loads the registry's champion as MLflow does and predicts on its
    input example: the way any MLflow consumer takes the model."""
    code = (f"import mlflow; m = mlflow.pyfunc.load_model('models:/{model}@{alias}'); "
            f"print(m.predict(m.input_example))")
    return (f"MLFLOW_TRACKING_URI={shlex.quote(tracking_uri)} "
            f"{shlex.quote(str(Path(sys.executable)))} -c {shlex.quote(code)}")


def serve_command(tracking_uri: str, model: str, alias: str = "champion") -> str:
    """``mlflow models serve`` on the champion, in this environment (whose bin directory must
    be on PATH: the server starts its uvicorn by name)."""
    venv_bin = shlex.quote(str(Path(sys.executable).parent))
    return (f"PATH={venv_bin}:\"$PATH\" MLFLOW_TRACKING_URI={shlex.quote(tracking_uri)} "
            f"mlflow models serve -m models:/{model}@{alias} --env-manager local -p 5001")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if argv is None:
        from tfopt.components.cli import native_log_filter

        native_log_filter.install()

    from tfopt.components.config.pipeline_config import load_config
    from tfopt.components.demo.digits import train_digits_model

    config = load_config(REPO / "dags" / "model_optimization.yaml")
    demo_dir = WORK / "demo"
    if (demo_dir / "digits_savedmodel").is_dir() and (demo_dir / "digits_eval.npz").is_file():
        print(f"[1/3] reusing the trained digits model in {demo_dir}")
    else:
        print("[1/3] training a small CNN on scikit-learn's digits (fixed seed) ...", flush=True)
        trained = train_digits_model(demo_dir, seed=args.seed)
        print(f"      held-out accuracy {trained.test_accuracy:.4f}")

    (WORK / "mlflow").mkdir(parents=True, exist_ok=True)
    airflow_home = WORK / "airflow"
    airflow = Path(sys.executable).parent / "airflow"
    env = _airflow_env(airflow_home)
    if not (airflow_home / "airflow.db").is_file():
        print("[2/3] preparing a local Airflow (sqlite) in work/airflow ...", flush=True)
        subprocess.run([str(airflow), "db", "migrate"], cwd=REPO, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print("[2/3] airflow dags test model_optimization ...", flush=True)
    code, run_id = _run_dag(airflow, env, demo_dir / "airflow_dags_test.log")
    if code != 0:
        print(f"the DAG run failed (exit {code}); log: {demo_dir / 'airflow_dags_test.log'}",
              file=sys.stderr)
        return code
    print("[3/3] outcome\n")
    tracking_uri = config.mlflow.tracking_uri
    if tracking_uri.startswith("sqlite:///") and not tracking_uri.startswith("sqlite:////"):
        tracking_uri = f"sqlite:///{REPO / tracking_uri[len('sqlite:///'):]}"
    _show_outcome(tracking_uri, config.mlflow.experiment, config.mlflow.registered_model, run_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
