import numpy as np
import pytest
from graph_testing import apply_twice, assert_same_outputs, build_graph, context, op_counts, tf

import tfopt.optimizer.transforms.grappler as grappler_module
from tfopt.optimizer.graph.traversal import nodes_by_name
from tfopt.optimizer.model.export import write_saved_model
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.system.cpu_features import cpu_supports_bf16
from tfopt.optimizer.transforms.base import TransformConfigError, TransformRefused
from tfopt.optimizer.transforms.pipeline import context_for
from tfopt.optimizer.transforms.registry import make_transform
from tfopt.optimizer.verify.equivalence import compare

RNG = np.random.default_rng(0)


def _conv_bias_relu_graph():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 3], name="x")
        conv = tf.nn.conv2d(x, tf.constant(RNG.standard_normal((3, 3, 3, 4)), tf.float32),
                            1, "SAME")
        biased = tf.nn.bias_add(conv, tf.constant(RNG.standard_normal(4), tf.float32))
        tf.nn.relu(biased, name="y")
    return build_graph(body)


def _matmul_bias_graph():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 6], name="x")
        product = tf.matmul(x, tf.constant(RNG.standard_normal((6, 5)), tf.float32))
        tf.nn.bias_add(product, tf.constant(RNG.standard_normal(5), tf.float32), name="y")
    return build_graph(body)


def _conv_read_twice_graph():
    """The raw convolution is an output too, so fusing the bias into it would lose that value."""
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 3], name="x")
        conv = tf.nn.conv2d(x, tf.constant(RNG.standard_normal((3, 3, 3, 4)), tf.float32),
                            1, "SAME", name="conv")
        tf.nn.bias_add(conv, tf.constant(RNG.standard_normal(4), tf.float32), name="y")
    return build_graph(body)


def test_grappler_remapper_fuses_conv_bias_relu_keeping_the_output_name():
    graph = _conv_bias_relu_graph()
    fused = make_transform("grappler", optimizers=["remapper"])(graph, context(["x"], ["y"]))
    counts = op_counts(fused)
    assert counts["_FusedConv2D"] == 1
    assert counts["Conv2D"] == counts["BiasAdd"] == counts["Relu"] == 0
    y = nodes_by_name(fused)["y"]
    assert y.op == "_FusedConv2D" and list(y.attr["fused_ops"].list.s) == [b"BiasAdd", b"Relu"]
    assert all(not n.device for n in fused.node)  # placed on CPU for the run only


def test_grappler_remapper_fuses_matmul_bias():
    fused = make_transform("grappler", optimizers=["remap"])(_matmul_bias_graph(),
                                                             context(["x"], ["y"]))
    assert op_counts(fused)["_FusedMatMul"] == 1 and op_counts(fused)["MatMul"] == 0


def test_grappler_fused_graph_reloaded_in_a_session_gives_the_same_outputs():
    """run_graph imports the GraphDef into a new graph and runs it in a Session: the fused CPU
    kernels load from the artifact. Tolerance 1e-5: the fused kernel adds the bias in a
    different order than BiasAdd would, nothing else."""
    ctx = context(["x"], ["y"])
    x = RNG.standard_normal((2, 8, 8, 3)).astype(np.float32)
    graph = _conv_bias_relu_graph()
    assert_same_outputs(graph, make_transform("grappler", optimizers=["remapper"])(graph, ctx),
                        {"x": x}, ["y"], atol=1e-5)
    graph = _matmul_bias_graph()
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    assert_same_outputs(graph, make_transform("grappler", optimizers=["remapper"])(graph, ctx),
                        {"x": x}, ["y"], atol=1e-5)


def test_grappler_leaves_a_conv_whose_raw_output_is_also_read_unfused():
    graph = _conv_read_twice_graph()
    result = make_transform("grappler", optimizers=["remapper"])(
        graph, context(["x"], ["y", "conv"]))
    assert not any(op.startswith("_Fused") for op in op_counts(result))
    assert op_counts(result) == op_counts(graph)
    assert {n.name for n in result.node} == {n.name for n in graph.node}


def test_grappler_twice_gives_the_same_op_histogram(model_dir):
    """Grappler does not promise byte-identical output on a second run (it may renumber the
    nodes it creates), so idempotence is asserted on the op histogram and the node names.
    keras_cnn needs both default iterations: with one, a second run still fuses more."""
    model = freeze(model_dir("keras_cnn"))
    once, twice = apply_twice(make_transform("grappler"), model.graph_def, context_for(model))
    assert op_counts(once) == op_counts(twice)
    assert {n.name for n in once.node} == {n.name for n in twice.node}


def test_grappler_rejects_an_optimizer_name_it_would_silently_ignore():
    with pytest.raises(TransformConfigError, match="unknown optimizer 'remaper'"):
        make_transform("grappler", optimizers=["remaper"])
    assert make_transform("grappler", optimizers=["remapper", "model_pruner"]).grappler_names \
        == ["remap", "pruning"]


def test_grappler_on_keras_cnn_fuses_convolutions_and_keeps_outputs(model_dir, tmp_path):
    """Tolerance 1e-4 on the softmax probabilities: constant folding merges each batch norm
    into its convolution's weights and bias, which reorders float32 arithmetic only. The
    artifact is written and reloaded as a SavedModel, so the fused ops must load from it."""
    model = freeze(model_dir("keras_cnn"))
    graph = make_transform("grappler")(model.graph_def, context_for(model))
    counts = op_counts(graph)
    assert counts["_FusedConv2D"] == 2 and counts["Conv2D"] == 0
    assert set(model.input_node_names + model.output_node_names) <= {n.name for n in graph.node}
    candidate = model.with_graph(graph, "grappler")
    assert compare(model, candidate, batches=2, batch_size=8).max_abs_diff < 1e-4
    saved = write_saved_model(candidate, tmp_path / "grappler")
    assert compare(model, saved, batches=2, batch_size=8).max_abs_diff < 1e-4


BF16_WITHOUT_REMAP = ["pruning", "constfold", "arithmetic", "dependency",
                      "common_subgraph_elimination", "auto_mixed_precision_onednn_bfloat16"]


def test_grappler_bf16_on_keras_cnn_is_refused_or_within_the_bf16_tolerance(model_dir,
                                                                             tmp_path):
    """bfloat16 keeps 8 significant bits (relative rounding 2^-9 ~ 2e-3 per op); across the
    model's layers the probabilities are asserted within 5e-2 relative to their scale and
    top-1 agreement at least 0.9 over 64 inputs, also after a SavedModel round trip. On a CPU
    without native bfloat16 the pass is refused instead, with the reason."""
    model = freeze(model_dir("keras_cnn"))
    transform = make_transform("grappler", optimizers=BF16_WITHOUT_REMAP)
    if not cpu_supports_bf16():
        with pytest.raises(TransformRefused, match="native bfloat16"):
            transform(model.graph_def, context_for(model))
        return
    graph = transform(model.graph_def, context_for(model))
    bf16_ops = [n for n in graph.node if n.op in ("Conv2D", "MatMul")
                and n.attr["T"].type == tf.bfloat16.as_datatype_enum]
    assert len(bf16_ops) == 3, "the convolutions and the dense layer should run in bfloat16"
    candidate = model.with_graph(graph, "grappler bf16")
    report = compare(model, candidate, batches=4, batch_size=16)
    assert report.max_rel_diff < 5e-2 and report.top1_agreement >= 0.9, report.summary()
    assert report.max_abs_diff > 0  # it really ran in bfloat16
    saved = write_saved_model(candidate, tmp_path / "bf16")
    assert compare(model, saved, batches=2, batch_size=8).max_rel_diff < 5e-2


def test_grappler_refuses_bf16_with_remap_because_the_result_would_not_load(model_dir,
                                                                           monkeypatch):
    """remap + bf16 makes bfloat16 _FusedConv2D nodes, which the public op definition rejects:
    such an artifact could not be reloaded, so the transform refuses and says why."""
    monkeypatch.setattr(grappler_module, "cpu_supports_bf16", lambda: True)
    model = freeze(model_dir("keras_cnn"))
    transform = make_transform("grappler", optimizers=[*grappler_module.DEFAULT_OPTIMIZERS,
                                                       "auto_mixed_precision_mkl"])
    with pytest.raises(TransformRefused, match="cannot be loaded back.*bfloat16"):
        transform(model.graph_def, context_for(model))


def test_grappler_refuses_bf16_on_a_cpu_without_it(monkeypatch):
    monkeypatch.setattr(grappler_module, "cpu_supports_bf16", lambda: False)
    transform = make_transform("grappler", optimizers=["auto_mixed_precision_mkl"])
    with pytest.raises(TransformRefused, match="avx512_bf16 or amx_bf16"):
        transform(_conv_bias_relu_graph(), context(["x"], ["y"]))


def test_cpu_supports_bf16_reads_the_flags_line(tmp_path):
    with_bf16 = tmp_path / "with"
    with_bf16.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_bf16\n")
    without = tmp_path / "without"
    without.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_vnni\n")
    assert cpu_supports_bf16(with_bf16)
    assert not cpu_supports_bf16(without)
    assert not cpu_supports_bf16(tmp_path / "missing")
