"""Flags that are the library's settings: their default and help read from the pydantic model
that declares the setting (:class:`~tfopt.optimizer.records.Settings`, ``GateConfig``), so the
command line, the pipeline config and the library cannot disagree. ``tests/test_cli_defaults.py``
walks every flag that has a config key and checks that they agree.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from tfopt.optimizer.records import default_of


def shown_default(value: Any) -> str:
    """A default as a user types it: ``1,32`` for a tuple of batch sizes, ``0.005`` for a float."""
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def setting_flag(settings: type[BaseModel], name: str, help: str | None = None,
                 **argparse_keywords: Any) -> dict[str, Any]:
    """``add_argument`` keywords for a flag that is the setting ``name`` of ``settings``: its
    default, and its help (``help`` if given, else the field's description) ending with the
    default. ``help`` may hold ``{description}``, the field's."""
    field = settings.model_fields[name]
    default = default_of(settings, name)
    text = (help or "{description}").format(description=field.description or name)
    text = text.replace("%", "%%")
    return {"default": default, "help": f"{text} (default {shown_default(default)})",
            **argparse_keywords}


# Each command's flags that are a pipeline config key: command -> flag's dest -> dotted key.
# Their defaults agree with the config's (tests/test_cli_defaults.py), and the docs' CLI
# reference names the key beside the flag.
CONFIG_KEYS: dict[str, dict[str, str]] = {
    "inspect": {"allow_ops": "security.allow_ops"},
    "freeze": {"atol": "optimize.atol", "signature": "signature",
               "allow_ops": "security.allow_ops",
               "model_call_seconds": "resources.model_call_seconds"},
    "optimize": {
        "signature": "signature", "strategy": "optimize.strategy", "backend": "optimize.backend",
        "atol": "optimize.atol", "rtol": "optimize.rtol", "min_top1": "optimize.min_top1",
        "alpha": "optimize.alpha", "budget": "optimize.budget",
        "time_budget": "optimize.time_budget_seconds", "cost": "optimize.cost",
        "eval_data": "evaluation.data", "calibration_data": "calibration.data",
        "accuracy_budget": "gate.max_accuracy_drop_abs", "min_speedup": "gate.min_speedup",
        "seconds": "benchmark.min_seconds", "memory_gb": "resources.memory_gb",
        "allow_ops": "security.allow_ops",
        "model_call_seconds": "resources.model_call_seconds",
        "precision_search": "candidates.precision_search",
    },
    "benchmark": {
        "signature": "signature", "batch_sizes": "benchmark.batch_sizes",
        "warmup": "benchmark.warmup", "min_runs": "benchmark.min_runs",
        "min_seconds": "benchmark.min_seconds", "block_size": "benchmark.block_size",
        "block_seconds": "benchmark.block_seconds", "max_seconds": "benchmark.max_seconds",
        "twin": "benchmark.twin", "threads": "benchmark.threads",
        "confidence": "gate.confidence", "eval_data": "evaluation.data",
        "metric": "evaluation.metric", "allow_ops": "security.allow_ops",
        "model_call_seconds": "resources.model_call_seconds",
    },
}

# Flags named like a config key that are not that setting, and why.
NOT_CONFIG_KEYS: dict[str, dict[str, str]] = {
    "optimize": {
        "recipe": "a recipe's name; the config's optimize.recipe holds the transforms, and "
                  "neither given is the inference recipe in both",
        "targets": "without --targets, optimize writes the optimized graph alone; the "
                   "pipeline always builds candidates (candidates.targets)",
        "tune": "tuning takes seconds per candidate model: opt-in on the command line, on in "
                "the pipeline (tuning.enabled); how long it measures is one set of settings",
    },
}
