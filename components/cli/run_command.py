"""tfopt run: the whole pipeline in one process, as a CI job or a plain container calls it."""

from __future__ import annotations

import json


def add_config_arguments(p) -> None:
    p.add_argument("--config", required=True, help="pipeline YAML (see README: Configuration)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set gate.min_speedup=1.1 (repeatable)")
    p.add_argument("--conf", default=None, metavar="JSON",
                   help='a trigger\'s conf: {"source": ..., "overrides": {"key.path": value}}')


def load_config_from_args(args):
    """The YAML, then the trigger's conf (``--conf``), then ``--set`` overrides, in that order."""
    import json as _json

    from components.config import ConfigError, load_config

    overrides = {}
    if args.conf:
        try:
            conf = _json.loads(args.conf) or {}
        except _json.JSONDecodeError as exc:
            raise ConfigError(f"--conf is not JSON: {exc}") from None
        if not isinstance(conf, dict):
            raise ConfigError("--conf must be a JSON object")
        if not isinstance(conf.get("overrides") or {}, dict):
            raise ConfigError('--conf: "overrides" must be a JSON object of dotted keys')
        overrides.update(conf.get("overrides") or {})
        if conf.get("source"):
            overrides["source"] = conf["source"]
    merged = [f"{k}={_json.dumps(v) if not isinstance(v, str) else v}"
              for k, v in overrides.items()] + list(args.overrides)
    return load_config(args.config, merged)


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run the whole pipeline: pull, optimize, benchmark, gate, "
                                   "publish",
                       description="Pull the source model, freeze and optimize it, benchmark "
                                   "baseline and candidates, evaluate, gate, and publish to "
                                   "MLflow. Finished steps are reused on a rerun. Exit 0 when "
                                   "a candidate is promoted, 3 when the gate rejects.")
    add_config_arguments(p)
    p.add_argument("--run-id", default=None, help="an id for this run (e.g. the DAG run id); "
                                                  "recorded on the MLflow run and version")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    from components.pipeline import run_pipeline
    from optimizer.gate.verdict import EXIT_PROMOTE, EXIT_REJECT

    config = load_config_from_args(args)
    outcome = run_pipeline(config, {"dag_run_id": args.run_id} if args.run_id else {})
    if args.json:
        print(json.dumps(outcome.to_dict(), indent=2))
    else:
        print(f"verdict      {outcome.gate.summary}")
        print(f"report       {outcome.gate.report_dir}/report.md")
        if outcome.publish:
            p = outcome.publish
            alias = f"alias '{p.alias}' moved to v{p.version}" if p.alias_moved \
                else f"alias '{p.alias}' unchanged"
            version = f"v{p.version}" if p.version else "no version registered"
            print(f"registry     {p.registered_model} {version}: {alias}")
            print(f"mlflow       run {p.run_id} at {p.tracking_uri}")
    return EXIT_PROMOTE if outcome.gate.promote else EXIT_REJECT
