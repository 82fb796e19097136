"""tfopt config: the pipeline config, every key with its default and meaning (``--example``),
or a config file as the pipeline reads it (``--config FILE [--set KEY=VALUE]``)."""

from __future__ import annotations

import json

# What `source` (the one key without a default) reads in the example.
EXAMPLE_SOURCE = "s3://bucket/models/my-model"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "config", help="print the pipeline config: every key with its default, or a file's "
                       "keys as the pipeline reads them",
        description="--example prints a pipeline YAML holding every key with its default, "
                    "each described in a comment, generated from the config's typed models: "
                    "a valid config as printed (but for its placeholder source). --config "
                    "FILE prints FILE as the pipeline reads it: validated, with --set "
                    "overrides applied and every default filled in.")
    shown = p.add_mutually_exclusive_group(required=True)
    shown.add_argument("--example", action="store_true",
                       help="every key, its default and its description")
    shown.add_argument("--config", metavar="FILE", help="pipeline YAML to read")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="with --config: override a key (repeatable)")
    p.add_argument("--json", action="store_true", help="print the config as JSON instead")
    p.set_defaults(run=run)


def run(args) -> int:
    from tfopt.components.config.pipeline_config import PipelineConfig, example_yaml, load_config

    if args.example:
        config = PipelineConfig(source=EXAMPLE_SOURCE)
        text = None if args.json else example_yaml(EXAMPLE_SOURCE)
    else:
        config = load_config(args.config, args.overrides)
        text = None if args.json else _plain_yaml(config)
    print(json.dumps(config.model_dump(mode="json"), indent=2) if args.json else text,
          end="\n" if args.json else "")
    return 0


def _plain_yaml(config) -> str:
    import yaml

    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
