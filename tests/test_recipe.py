"""Recipes: GTT's --transforms syntax and the YAML spelling give the same transform specs."""

import numpy as np
import pytest
from graph_testing import build_graph, context, run_graph, tf

from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.optimize.gtt_syntax import (
    RecipeSyntaxError,
    TransformSpec,
    format_transforms,
    parse_transforms,
)
from tfopt.optimizer.optimize.recipe import (
    DEPLOYMENT_RECIPE,
    GTT_INFERENCE_RECIPE,
    INFERENCE_RECIPE,
)
from tfopt.optimizer.optimize.recipe_building import IgnoringErrors, build_transforms
from tfopt.optimizer.optimize.recipe_yaml import (
    RecipeFileError,
    load_recipe_file,
    parse_yaml_transforms,
)
from tfopt.optimizer.transforms import registry
from tfopt.optimizer.transforms.base import TransformConfigError
from tfopt.optimizer.verify.tolerance import Tolerance, ToleranceError

README_DEPLOYMENT = [
    TransformSpec("strip_unused_nodes", {"type": ["float"], "shape": ["1,299,299,3"]}),
    TransformSpec("remove_nodes", {"op": ["Identity", "CheckNumerics"]}),
    TransformSpec("fold_constants", {"ignore_errors": ["true"]}),
    TransformSpec("fold_batch_norms"),
    TransformSpec("fold_old_batch_norms"),
]
README_DEPLOYMENT_TEXT = ('strip_unused_nodes(type=float, shape="1,299,299,3") '
                          'remove_nodes(op=Identity, op=CheckNumerics) '
                          'fold_constants(ignore_errors=true) fold_batch_norms fold_old_batch_norms')


# --- GTT string syntax ---------------------------------------------------------------------


def test_transforms_without_parameters_are_whitespace_separated():
    assert parse_transforms("fold_constants fold_batch_norms") == [
        TransformSpec("fold_constants"), TransformSpec("fold_batch_norms")]


def test_parameters_in_parentheses_are_lists_of_strings_in_order():
    assert parse_transforms(README_DEPLOYMENT_TEXT) == README_DEPLOYMENT


def test_a_repeated_key_accumulates_its_values():
    (spec,) = parse_transforms("remove_nodes(op=Identity, op=CheckNumerics, op=StopGradient)")
    assert spec.params == {"op": ["Identity", "CheckNumerics", "StopGradient"]}


@pytest.mark.parametrize("quoted", ['"1,299,299,3"', "'1,299,299,3'"])
def test_a_quoted_value_keeps_its_commas(quoted):
    (spec,) = parse_transforms(f"strip_unused_nodes(type=float, shape={quoted})")
    assert spec.params == {"type": ["float"], "shape": ["1,299,299,3"]}


def test_a_backslash_escapes_a_quote_inside_a_quoted_value():
    (spec,) = parse_transforms(r'insert_logging(message="say \"hi\", twice")')
    assert spec.params == {"message": ['say "hi", twice']}


def test_whitespace_and_newlines_may_separate_any_two_tokens():
    spaced = ("\n  strip_unused_nodes ( type = float ,\n    shape = \"1,299,299,3\" )\n"
              "\tremove_nodes(\n op=Identity,\n op=CheckNumerics\n)\n"
              "  fold_constants(ignore_errors=true)\n fold_batch_norms\n\n fold_old_batch_norms \n")
    assert parse_transforms(spaced) == README_DEPLOYMENT


def test_the_readme_form_with_shell_line_continuations_and_quotes_parses():
    # As pasted from GTT's README: --transforms='\<newline>...\<newline>'
    pasted = ("'\\\nstrip_unused_nodes(type=float, shape=\"1,299,299,3\") \\\n"
              "remove_nodes(op=Identity, op=CheckNumerics) \\\n"
              "fold_constants(ignore_errors=true) \\\nfold_batch_norms \\\n"
              "fold_old_batch_norms\\\n'")
    assert parse_transforms(pasted) == README_DEPLOYMENT


def test_parameters_may_be_separated_by_spaces_as_gtt_allows():
    assert parse_transforms("remove_nodes(op=Identity op=CheckNumerics)") == \
        parse_transforms("remove_nodes(op=Identity, op=CheckNumerics)")


def test_bare_values_may_hold_gtt_value_characters():
    (spec,) = parse_transforms("t(a=-1.5, b=some/path_x, c=node:1)")
    assert spec.params == {"a": ["-1.5"], "b": ["some/path_x"], "c": ["node:1"]}


def test_an_empty_recipe_names_no_transforms():
    assert parse_transforms("  \n\t ") == []


def test_formatting_gives_back_what_parsing_read():
    specs = [TransformSpec("strip_unused_nodes", {"shape": ["1,2"], "type": ["float"]}),
             TransformSpec("insert_logging", {"message": ['a "b" \\ c'], "op": ["Mul", "Add"]}),
             TransformSpec("fold_constants")]
    text = format_transforms(specs)
    assert parse_transforms(text) == specs
    assert 'shape="1,2"' in text and "op=Mul, op=Add" in text


@pytest.mark.parametrize("text, message", [
    ("fold_constants(", ("column 16: expected ')' to close the parameters of fold_constants "
                         "opened at column 15, found the end of the recipe")),
    ("remove_nodes(op)", ("column 16: expected '=' after parameter 'op' of remove_nodes, "
                          "found ')'")),
    ("remove_nodes(op=)", "column 17: expected a parameter value"),
    ("strip_unused_nodes(shape=1,299)", ("column 31: expected '=' after parameter '299' "
                                         "of strip_unused_nodes, found ')' (a value with commas "
                                         "needs quotes")),
    ('strip_unused_nodes(shape="1,2)', ("column 31: expected a closing \" for the value opened "
                                        "at column 26")),
    ("fold_constants) fold_batch_norms", ("column 15: expected a transform name, found ') "
                                          "fold_batch_norms'")),
    ("fold_constants(ignore_errors=true fold_batch_norms",
     "column 51: expected '=' after parameter 'fold_batch_norms' of fold_constants"),
    ("a(x=1,,y=2)", "column 7: expected a parameter name or ')' in a(...), found ',y=2)'"),
    ("remove_nodes(op=Identity,\n  op=)", "line 2, column 6: expected a parameter value"),
])
def test_a_syntax_error_is_one_line_with_its_position(text, message):
    with pytest.raises(RecipeSyntaxError) as caught:
        parse_transforms(text)
    text_of_error = str(caught.value)
    assert text_of_error.startswith("recipe syntax error at ")
    assert message in text_of_error
    assert "\n" not in text_of_error
    assert caught.value.exit_code == 2


# --- YAML spelling -------------------------------------------------------------------------


def test_every_yaml_item_form_equals_the_string_form():
    yaml_text = """
- name: strip_unused_nodes
  type: float
  shape: "1,299,299,3"
- name: remove_nodes
  op: [Identity, CheckNumerics]
- fold_constants: {ignore_errors: true}
- fold_batch_norms
- fold_old_batch_norms:
"""
    assert parse_yaml_transforms(yaml_text) == parse_transforms(README_DEPLOYMENT_TEXT)


def test_a_yaml_string_item_may_use_gtt_syntax():
    assert parse_yaml_transforms(
        "- strip_unused_nodes(type=float, shape=\"1,299,299,3\")\n"
        "- remove_nodes(op=Identity, op=CheckNumerics) fold_constants(ignore_errors=true)\n"
        "- fold_batch_norms fold_old_batch_norms\n") == README_DEPLOYMENT


def test_yaml_numbers_and_booleans_become_gtt_strings():
    (spec,) = parse_yaml_transforms("- quantize_weights: {minimum_size: 1024, fallback: 0.5, "
                                    "ignore_errors: false}")
    assert spec.params == {"minimum_size": ["1024"], "fallback": ["0.5"],
                           "ignore_errors": ["false"]}


@pytest.mark.parametrize("yaml_text, message", [
    ("- {a: 1, b: 2}", "transforms item 1: a mapping item is either {name: TRANSFORM"),
    ("- fold_constants\n- [x]", ("transforms item 2: expected a transform name or a mapping, "
                                 "got list")),
    ("- remove_nodes: {op: []}", "parameter 'op' has no value"),
    ("- remove_nodes: {op: {x: 1}}", "parameter 'op': expected a string, number or true/false"),
    ("- fold_constants(", "transforms item 1: recipe syntax error at column 16"),
    ("- name: fold constants", "'fold constants' is not a transform name"),
    ("fold_constants: {}", "transforms must be a list of transforms, got dict"),
    ("- a: [1\n- b", "invalid YAML at line 2, column 4: expected ',' or ']'"),
])
def test_a_malformed_yaml_recipe_is_one_clear_line(yaml_text, message):
    with pytest.raises(RecipeSyntaxError) as caught:
        parse_yaml_transforms(yaml_text)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


# --- named recipes -------------------------------------------------------------------------


def test_the_deployment_recipe_is_gtts_readme_recipe_without_inceptions_input_shape():
    readme = parse_transforms(README_DEPLOYMENT_TEXT)
    assert parse_transforms(DEPLOYMENT_RECIPE) == [TransformSpec("strip_unused_nodes")] + \
        readme[1:]


def test_the_inference_recipe_adds_merge_duplicate_nodes():
    assert parse_transforms(GTT_INFERENCE_RECIPE) == \
        parse_transforms(DEPLOYMENT_RECIPE) + [TransformSpec("merge_duplicate_nodes")]


def test_the_default_recipe_writes_gelu_dense_layers_and_einsums_for_onednn_before_merging():
    assert parse_transforms(INFERENCE_RECIPE) == parse_transforms(DEPLOYMENT_RECIPE) + [
        TransformSpec("rewrite_gelu_erf"), TransformSpec("flatten_dense_matmuls"),
        TransformSpec("einsum_as_batch_matmul"), TransformSpec("fold_embedding_projections"),
        TransformSpec("constant_reshape_shapes"),
        TransformSpec("merge_duplicate_nodes")]


# --- building ------------------------------------------------------------------------------


def test_building_gives_configured_transforms_in_order():
    (transform,) = build_transforms(parse_transforms(
        'strip_unused_nodes(type=float, shape="1,3")'))
    assert transform.name == "strip_unused_nodes"
    assert transform["type"] == "float" and transform["shape"] == "1,3"
    assert transform.describe() == "strip_unused_nodes(type=float, shape=1,3)"


def test_an_unknown_transform_is_named_with_every_valid_name():
    with pytest.raises(TransformConfigError) as caught:
        build_transforms(parse_transforms("strip_unused_nodes not_a_transform"))
    message = str(caught.value)
    assert message.startswith("unknown transform 'not_a_transform'")
    assert all(name in message for name in registry.transform_names())
    assert caught.value.exit_code == 2


def test_a_misspelt_transform_gets_a_suggestion():
    with pytest.raises(TransformConfigError, match="did you mean 'strip_unused_nodes'"):
        build_transforms([TransformSpec("strip_unused_node")])


def test_an_unknown_parameter_is_named_with_the_valid_ones():
    with pytest.raises(TransformConfigError) as caught:
        build_transforms(parse_transforms("strip_unused_nodes(typ=float)"))
    assert str(caught.value) == ("strip_unused_nodes: unknown parameter 'typ' (did you mean "
                                 "'type'?); valid: type, shape, ignore_errors")


def test_a_bad_parameter_value_is_a_config_error():
    with pytest.raises(TransformConfigError, match="ignore_errors.*expects bool"):
        build_transforms(parse_transforms("strip_unused_nodes(ignore_errors=maybe)"))


def _graph_with_an_input():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        tf.nn.relu(x, name="y")
    return build_graph(body)


def test_ignore_errors_true_skips_a_failing_step_leaving_the_graph_unchanged():
    graph, ctx = _graph_with_an_input(), context(["x"], ["y"])
    failing = "strip_unused_nodes(type=not_a_dtype)"
    with pytest.raises(TypeError):
        build_transforms(parse_transforms(failing))[0](graph, ctx)

    (skipping,) = build_transforms(parse_transforms(
        "strip_unused_nodes(type=not_a_dtype, ignore_errors=true)"))
    assert isinstance(skipping, IgnoringErrors)
    assert skipping.describe() == "strip_unused_nodes(type=not_a_dtype, ignore_errors=true)"
    result = skipping(graph, ctx)
    assert result.SerializeToString(deterministic=True) == \
        graph.SerializeToString(deterministic=True)


def test_ignore_errors_true_on_a_working_step_changes_nothing_about_its_result():
    graph, ctx = _graph_with_an_input(), context(["x"], ["y"])
    plain = build_transforms(parse_transforms("strip_unused_nodes"))[0](graph, ctx)
    ignoring = build_transforms(parse_transforms(
        "strip_unused_nodes(ignore_errors=true)"))[0](graph, ctx)
    assert plain.SerializeToString(deterministic=True) == \
        ignoring.SerializeToString(deterministic=True)
    feeds = {"x": np.array([[-1.0, 0.5, 2.0]], np.float32)}
    np.testing.assert_array_equal(run_graph(ignoring, feeds, ["y"])[0], [[0.0, 0.5, 2.0]])


# --- recipe files --------------------------------------------------------------------------


def test_a_recipe_file_may_be_a_bare_list(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text("- strip_unused_nodes\n- fold_constants: {ignore_errors: true}\n")
    recipe = load_recipe_file(path)
    assert list(recipe.transforms) == parse_transforms(
        "strip_unused_nodes fold_constants(ignore_errors=true)")
    assert recipe.tolerance is None and recipe.backend is None
    assert recipe.source == str(path)


def test_a_recipe_file_mapping_carries_tolerance_and_backend(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text("transforms:\n  - strip_unused_nodes\n  - name: remove_nodes\n"
                    "    op: [Identity, CheckNumerics]\n"
                    "tolerance: {atol: 1e-4, rtol: 0.01, min_top1: 0.99}\nbackend: native\n")
    recipe = load_recipe_file(path)
    assert recipe.text == "strip_unused_nodes remove_nodes(op=Identity, op=CheckNumerics)"
    # PyYAML reads 1e-4 (no dot) as a string; it still means 0.0001.
    assert recipe.tolerance == Tolerance(atol=1e-4, rtol=0.01, min_top1=0.99)
    assert recipe.backend == "native"


def test_transforms_in_a_recipe_file_may_be_one_gtt_string(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text(f"transforms: '{README_DEPLOYMENT_TEXT}'\n")
    assert list(load_recipe_file(path).transforms) == README_DEPLOYMENT


@pytest.mark.parametrize("content, error, message", [
    ("transforms: [strip_unused_nodes]\ntolerence: {atol: 1}\n", RecipeFileError,
     "unknown key(s) tolerence; valid: transforms, tolerance, backend"),
    ("transforms: [strip_unused_nodes]\nbackend: cuda\n", RecipeFileError,
     "backend must be one of python, native, got 'cuda'"),
    ("transforms: [strip_unused_nodes]\ntolerance: {atol: 1, top1: 0.9}\n", ToleranceError,
     "unknown key(s) top1; valid: atol, rtol, min_top1"),
    ("transforms: [strip_unused_nodes]\ntolerance: {atol: lots}\n", ToleranceError,
     "atol must be a number, got 'lots'"),
    ("transforms: [strip_unused_nodes]\ntolerance: {atol: -1}\n", ToleranceError,
     "atol must be a finite number >= 0"),
    ("tolerance: {atol: 1}\n", RecipeFileError, "no 'transforms' list"),
    ("transforms: []\n", RecipeFileError, "names no transforms"),
    ("", RecipeFileError, "is empty"),
    ("transforms: [strip_unused_nodes\n", RecipeFileError, "invalid YAML at line 2"),
    ("42\n", RecipeFileError, "must hold a list of transforms or a mapping"),
])
def test_a_bad_recipe_file_is_one_line_naming_the_problem(tmp_path, content, error, message):
    path = tmp_path / "recipe.yaml"
    path.write_text(content)
    with pytest.raises(error) as caught:
        load_recipe_file(path)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert isinstance(caught.value, TfoptError) and caught.value.exit_code == 2


def test_a_missing_recipe_file_is_named(tmp_path):
    with pytest.raises(RecipeFileError, match="no such recipe file: .*nope.yaml"):
        load_recipe_file(tmp_path / "nope.yaml")
