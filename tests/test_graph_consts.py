import numpy as np
from graph_testing import build_graph, tf

from tfopt.optimizer.graph.consts import resolve_through_identity, values_from_const
from tfopt.optimizer.graph.traversal import nodes_by_name


def _graph():
    def body():
        a = tf.constant(np.float32(1.0), name="a")
        b = tf.constant(np.float32(2.0), name="b")
        tf.identity_n([a, b], name="pair")
        tf.identity(tf.identity(b, name="inner"), name="outer")
    return build_graph(body)


def test_identity_chains_lead_to_their_const():
    nodes = nodes_by_name(_graph())
    assert resolve_through_identity(nodes, "outer").name == "b"


def test_identity_n_follows_the_input_of_the_output_read():
    nodes = nodes_by_name(_graph())
    assert resolve_through_identity(nodes, "pair:0").name == "a"
    assert values_from_const(resolve_through_identity(nodes, "pair:1")) == np.float32(2.0)
