"""tfopt run: the whole pipeline in one process, as a CI job or a plain container calls it."""

from __future__ import annotations

import json


def add_config_arguments(p) -> None:
    p.add_argument("--config", required=True,
                   help="pipeline YAML (every key: tfopt config --example)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="the operator's override of any config key, e.g. --set "
                        "gate.min_speedup=1.1 (repeatable; wins over --event and --conf)")
    p.add_argument("--conf", default=None, metavar="JSON",
                   help='what a trigger posts as dag_run.conf: {"source": ..., "overrides": '
                        '{"key.path": value}}; untrusted: it may set only source, '
                        "evaluation.data and the keys the config's triggers.allow_overrides "
                        "lists (docs/triggers.md)")
    p.add_argument("--event", default=None, metavar="JSON",
                   help='the extra of the asset event that triggered the run: {"source": ..., '
                        '"evaluation_data": ..., "overrides": {...}}; untrusted, as --conf, '
                        "which wins over it (Kubernetes pods get it this way)")


def _trigger_json(text: str | None, flag: str):
    from tfopt.components.config.pipeline_config import ConfigError
    from tfopt.components.config.trigger_conf import MAX_TRIGGER_CHARS

    if text is None:
        return None
    if len(text) > 4 * MAX_TRIGGER_CHARS:  # JSON escapes may quadruple what it holds
        raise ConfigError(f"{flag}: {len(text)} characters, more than a trigger may send")
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ConfigError(f"{flag} is not JSON: {str(exc).splitlines()[0]}") from None


def load_config_from_args(args):
    """The YAML, then the trigger (``--event``, then ``--conf``: only what the YAML lets a
    trigger set), then the operator's ``--set`` overrides, in that order."""
    from tfopt.components.config import trigger_conf
    from tfopt.components.config.pipeline_config import load_config

    triggers = []
    if getattr(args, "event", None) is not None:
        triggers.append(trigger_conf.event(_trigger_json(args.event, "--event"), "--event"))
    if args.conf is not None:
        triggers.append(trigger_conf.conf(_trigger_json(args.conf, "--conf"), "--conf"))
    return load_config(args.config, args.overrides, triggers)


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
    from tfopt.components.cli.stage_lines import load_tensorflow, stages_of
    from tfopt.components.pipeline.run import run_pipeline
    from tfopt.optimizer.gate.verdict import EXIT_PROMOTE, EXIT_REJECT

    config = load_config_from_args(args)
    load_tensorflow(stages_of(args))
    outcome = run_pipeline(config, {"dag_run_id": args.run_id} if args.run_id else {},
                           around_step=stages_of(args).stage)
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
