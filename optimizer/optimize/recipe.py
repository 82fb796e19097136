"""Transform recipes: the named ones, the default, and :class:`Recipe`, what a flow applies.

A recipe is spelled as GTT's ``--transforms`` string (:mod:`tfopt.optimizer.optimize.gtt_syntax`) or as
a YAML list or recipe file (:mod:`tfopt.optimizer.optimize.recipe_yaml`); both give the same
:class:`~tfopt.optimizer.optimize.gtt_syntax.TransformSpec` steps, which
:mod:`tfopt.optimizer.optimize.recipe_building` turns into transforms (or
:mod:`tfopt.optimizer.optimize.native_gtt` hands to TF's own Graph Transform Tool).
"""

from __future__ import annotations

from dataclasses import dataclass

from tfopt.optimizer.optimize.gtt_syntax import TransformSpec, format_transforms, parse_transforms
from tfopt.optimizer.verify.tolerance import Tolerance

# GTT's "Optimizing for Deployment" recipe (graph_transforms/README.md), without its
# Inception-specific ``type=float, shape="1,299,299,3"``: a frozen SavedModel signature already
# declares its inputs.
DEPLOYMENT_RECIPE = ("strip_unused_nodes remove_nodes(op=Identity, op=CheckNumerics) "
                     "fold_constants(ignore_errors=true) fold_batch_norms fold_old_batch_norms")
# The deployment recipe, then merging the constants and subgraphs that folding made identical:
# every step one that TF's native Graph Transform Tool also has (``--backend native``).
GTT_INFERENCE_RECIPE = f"{DEPLOYMENT_RECIPE} merge_duplicate_nodes"
# The default recipe: GTT's, with exact GELU written the way TensorFlow's remapper fuses it into
# the matrix product before it (Keras writes it with Erfc, which nothing fuses), and a dense layer
# after a mean-pooled embedding folded into the embedding's rows. Attention's Einsums become
# BatchMatMulV2 after the dense layers' rewrite (the two touch different nodes). The reshapes'
# targets are made constants where only the batch is unknown after the transforms that write such
# reshapes; merge_duplicate_nodes comes last, merging the constants they leave alike.
INFERENCE_RECIPE = (f"{DEPLOYMENT_RECIPE} rewrite_gelu_erf flatten_dense_matmuls "
                    "einsum_as_batch_matmul fold_embedding_projections constant_reshape_shapes "
                    "merge_duplicate_nodes")
# For recurrent models over a fixed sequence length: their loops unrolled first, so that the
# inference recipe's folding and merging reach every step (benchmarks/recurrent.py).
RECURRENT_RECIPE = f"unroll_static_loops {INFERENCE_RECIPE}"
# GTT's "Eight-bit Calculations" recipe, without ``add_default_attributes``: freezing with the
# running TensorFlow already fills in every default attribute.
EIGHT_BIT_RECIPE = ("strip_unused_nodes remove_nodes(op=Identity, op=CheckNumerics) "
                    "fold_old_batch_norms quantize_weights quantize_nodes strip_unused_nodes")
# GTT's "Shrinking File Size" recipe: weights stored as eight bits, computation in float.
SHRINK_WEIGHTS_RECIPE = "quantize_weights"

def default_recipe(backend: str = "python") -> str:
    """The recipe used when none is given: the inference recipe, or GTT's own for the native
    backend, whose C++ tool has none of this package's own transforms."""
    return GTT_INFERENCE_RECIPE if backend == "native" else INFERENCE_RECIPE


RECIPES = {
    "deployment": DEPLOYMENT_RECIPE,
    "inference": INFERENCE_RECIPE,
    "gtt_inference": GTT_INFERENCE_RECIPE,
    "recurrent": RECURRENT_RECIPE,
    "eight_bit": EIGHT_BIT_RECIPE,
    "shrink_weights": SHRINK_WEIGHTS_RECIPE,
}

BACKENDS = ("python", "native")
RECIPE_FILE_KEYS = ("transforms", "tolerance", "backend")


@dataclass(frozen=True)
class Recipe:
    """Transforms to apply, and optionally the tolerance and backend a recipe file asks for."""

    transforms: tuple[TransformSpec, ...]
    tolerance: Tolerance | None = None
    backend: str | None = None
    source: str = ""  # where the recipe came from, for messages

    @classmethod
    def from_string(cls, text: str, source: str = "--transforms") -> Recipe:
        return cls(tuple(parse_transforms(text)), source=source)

    @classmethod
    def named(cls, name: str) -> Recipe:
        """One of :data:`RECIPES`, by its name."""
        return cls.from_string(RECIPES[name], source=f"the {name} recipe")

    @classmethod
    def default(cls, backend: str | None = None) -> Recipe:
        """The recipe used when none is given (:func:`default_recipe`), named as such."""
        return cls.named("gtt_inference" if backend == "native" else "inference")

    @property
    def text(self) -> str:
        return format_transforms(self.transforms)

