"""Substitution rules by name. Adding one: a module here, a test file, a line in RULE_MODULES."""

from __future__ import annotations

import importlib

from optimizer.search.substitution import Substitution
from optimizer.transforms.base import TransformConfigError

# rule name -> module under optimizer.search.rules defining the Substitution of that name.
RULE_MODULES: dict[str, str] = {
    "fold_conv_batchnorm": "fold_conv_batchnorm",
    "remove_concat_split": "remove_concat_split",
    "merge_duplicate_subgraphs": "merge_duplicate_subgraphs",
    "remove_identity_like": "remove_identity_like",
    "enlarge_conv_kernel": "enlarge_conv_kernel",
    "merge_parallel_convs": "merge_parallel_convs",
    "merge_parallel_matmuls": "merge_parallel_matmuls",
    "fuse_conv_bias_relu": "fuse_conv_bias_relu",
    "unroll_static_loops": "unroll_static_loops",
}


def rule_class(name: str) -> type[Substitution]:
    if name not in RULE_MODULES:
        raise TransformConfigError(f"unknown substitution rule '{name}'; valid: "
                                   f"{', '.join(RULE_MODULES)}")
    module = importlib.import_module(f"optimizer.search.rules.{RULE_MODULES[name]}")
    for obj in vars(module).values():
        if isinstance(obj, type) and issubclass(obj, Substitution) and obj.name == name:
            return obj
    raise LookupError(f"optimizer.search.rules.{RULE_MODULES[name]} defines no rule '{name}'")


def all_rules() -> list[Substitution]:
    return [rule_class(name)() for name in RULE_MODULES]
