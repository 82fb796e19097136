"""Substitution rules by name. Adding one: a module here, a test file, a line in RULE_MODULES."""

from __future__ import annotations

from tfopt.optimizer.search.substitution import Substitution
from tfopt.optimizer.transforms.registry import LazyRegistry

# rule name -> module under tfopt.optimizer.search.rules defining the Substitution of that name.
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


RULES = LazyRegistry("tfopt.optimizer.search.rules", Substitution, "substitution rule", RULE_MODULES)


def rule_class(name: str) -> type[Substitution]:
    return RULES.get(name)


def all_rules() -> list[Substitution]:
    return [rule_class(name)() for name in RULES.names()]
