"""Every transform by name. Adding one: a module in this package, a test file, a line here.

Order matters for ``all_transforms()`` listings and for recipes that say ``all`` only; a recipe
runs transforms in the order it names them.
"""

from __future__ import annotations

import importlib

from tfopt.optimizer.transforms.base import Transform, TransformConfigError


class LazyRegistry:
    """Classes by name, each in a module of ``package`` imported only when its name is asked
    for (a transform's or a rule's module may import TensorFlow, and a recipe names a few).

    ``modules`` (name -> module under ``package``) is read at each lookup, not copied: adding a
    name is one line in the dict, and a test may add one for its own duration.
    """

    def __init__(self, package: str, base: type, kind: str, modules: dict[str, str]):
        self.package, self.base, self.kind, self.modules = package, base, kind, modules

    def names(self) -> list[str]:
        return list(self.modules)

    def get(self, name: str) -> type:
        if name not in self.modules:
            raise TransformConfigError(
                f"unknown {self.kind} '{name}'; valid: {', '.join(self.modules)}")
        module_name = f"{self.package}.{self.modules[name]}"
        module = importlib.import_module(module_name)
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, self.base) and obj.name == name:
                return obj
        raise LookupError(f"module {module_name} defines no {self.kind} '{name}'")


# name -> module under tfopt.optimizer.transforms that defines the Transform subclass of that name.
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
    "flatten_dense_matmuls": "flatten_dense_matmuls",
    "einsum_as_batch_matmul": "einsum_as_batch_matmul",
    "fold_embedding_projections": "fold_embedding_projections",
    "constant_reshape_shapes": "constant_reshape_shapes",
}


TRANSFORMS = LazyRegistry("tfopt.optimizer.transforms", Transform, "transform", TRANSFORM_MODULES)


def transform_class(name: str) -> type[Transform]:
    return TRANSFORMS.get(name)


def make_transform(name: str, **params) -> Transform:
    return transform_class(name)(**params)


def transform_names() -> list[str]:
    return TRANSFORMS.names()
