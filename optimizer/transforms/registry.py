"""Every transform by name. Adding one: a module in this package, a test file, a line here.

Order matters for ``all_transforms()`` listings and for recipes that say ``all`` only; a recipe
runs transforms in the order it names them.
"""

from __future__ import annotations

import importlib

from optimizer.transforms.base import Transform, TransformConfigError

# name -> module under optimizer.transforms that defines the Transform subclass of that name.
TRANSFORM_MODULES: dict[str, str] = {
    "strip_unused_nodes": "strip_unused_nodes",
    "remove_nodes": "remove_nodes",
    "remove_control_dependencies": "remove_control_dependencies",
    "sort_by_execution_order": "sort_by_execution_order",
    "merge_duplicate_nodes": "merge_duplicate_nodes",
    "fold_constants": "fold_constants",
    "fold_batch_norms": "fold_batch_norms",
    "fold_old_batch_norms": "fold_old_batch_norms",
    "fuse_pad_and_conv": "fuse_pad_and_conv",
    "quantize_weights": "quantize_weights",
    "quantize_nodes": "quantize_nodes",
    "grappler": "grappler",
    "unroll_static_loops": "unroll_static_loops",
    "rewrite_gelu_erf": "rewrite_gelu_erf",
}


def transform_class(name: str) -> type[Transform]:
    if name not in TRANSFORM_MODULES:
        raise TransformConfigError(
            f"unknown transform '{name}'; valid: {', '.join(TRANSFORM_MODULES)}")
    module = importlib.import_module(f"optimizer.transforms.{TRANSFORM_MODULES[name]}")
    for obj in vars(module).values():
        if isinstance(obj, type) and issubclass(obj, Transform) and obj.name == name:
            return obj
    raise LookupError(f"module optimizer.transforms.{TRANSFORM_MODULES[name]} defines no '{name}'")


def make_transform(name: str, **params) -> Transform:
    return transform_class(name)(**params)


def transform_names() -> list[str]:
    return list(TRANSFORM_MODULES)
