"""remove_concat_split: a concat undone by a split (or a split undone by a concat) is removed.

Two shapes of the same pair, both common once parallel branches have been merged and split again
(e.g. by merge_parallel_convs in an Inception block)::

    ConcatV2(t1..tn, axis=a) -> Split|SplitV(axis=a) into n pieces   ==>  readers of piece i read t_i
    Split|SplitV(x, axis=a) -> ConcatV2(piece 0..n-1, axis=a)         ==>  readers of the concat read x

Preconditions, each checked (a pair that fails one is not a match):
- both axes are constants that name the same dimension (negative axes are normalized with the
  tensor's static rank);
- concat-then-split: the split has as many pieces as the concat has inputs and every input's
  static size along the axis equals its piece's (from ``infer_shapes``; an unknown size is no
  match); the concat is read by the split only; neither node is an input, output or protected
  node, nor does any node have a control input on either;
- split-then-concat: the concat reads every piece of the split, in order, and nothing else; a
  concat that is a boundary node (or that a control edge names) stays, as ``Identity(x)``;
- neither node has control inputs (bypassing them would drop that ordering), and neither runs
  inside lowered control flow.

Constants and a split left unread afterwards are removed.
"""

from __future__ import annotations

import logging

from tfopt.optimizer.graph.colocation import redirect_colocation
from tfopt.optimizer.graph.const_eval import is_pure
from tfopt.optimizer.graph.consts import resolve_through_identity, values_from_const
from tfopt.optimizer.graph.control_flow import nodes_under_control_flow
from tfopt.optimizer.graph.names import (
    canonical_input,
    is_control_input,
    node_name_from_input,
    output_index,
)
from tfopt.optimizer.graph.rewrite import only_reader, remove_unread
from tfopt.optimizer.graph.shapes import infer_shapes, static_shape
from tfopt.optimizer.graph.traversal import consumers, nodes_by_name
from tfopt.optimizer.search.substitution import Match, Substitution
from tfopt.optimizer.transforms.base import TransformContext

log = logging.getLogger(__name__)

_SPLITS = frozenset({"Split", "SplitV"})
_CONCAT_SPLIT = "concat_split"
_SPLIT_CONCAT = "split_concat"


class RemoveConcatSplit(Substitution):
    name = "remove_concat_split"
    description = "remove a concat followed by the split that undoes it, or a split then concat"

    def matches(self, graph_def, context: TransformContext) -> list[Match]:
        by_name = nodes_by_name(graph_def)
        readers = consumers(graph_def)
        # Shape inference imports the whole graph: skip it when no concat meets a split.
        if not any(n.op == "ConcatV2" and (
                any(r.op in _SPLITS for r in readers.get(n.name, ()))
                or any(by_name[node_name_from_input(i)].op in _SPLITS for i in n.input))
                for n in graph_def.node):
            return []
        controlled = {node_name_from_input(i) for n in graph_def.node for i in n.input
                      if is_control_input(i)}
        shapes = infer_shapes(graph_def)
        in_control_flow = nodes_under_control_flow(graph_def)
        found = []
        for node in graph_def.node:
            if node.op != "ConcatV2" or node.name in in_control_flow:
                continue
            split = only_reader(readers, node.name)
            if split is not None and split.op in _SPLITS:
                if self._concat_split(node, split, by_name, shapes, controlled, context):
                    found.append(Match(self.name, (node.name, split.name),
                                       {"kind": _CONCAT_SPLIT}))
                continue
            split = self._split_concat(node, by_name, shapes)
            if split is not None:
                found.append(Match(self.name, (split.name, node.name), {"kind": _SPLIT_CONCAT}))
        return found

    def _concat_split(self, concat, split, by_name, shapes, controlled, context) -> bool:
        def skip(reason: str) -> bool:
            log.debug("%s: leaving %s -> %s: %s", self.name, concat.name, split.name, reason)
            return False

        pieces = _concat_inputs(concat)
        if pieces is None or _has_controls(split):
            return skip("control inputs")
        stuck = [n.name for n in (concat, split) if n.name in context.boundary
                 or n.name in controlled]
        if stuck:
            return skip(f"{stuck} must keep their place")
        if canonical_input(_split_value(split)) != concat.name:
            return skip("the concat is not the split's value")
        rank = _rank(shapes, concat.name)
        axes = (_axis(by_name, concat.input[-1], rank), _axis(by_name, _split_axis(split), rank))
        if axes[0] is None or axes[0] != axes[1]:
            return skip(f"axes {axes} differ or are not constant")
        if split.attr["num_split"].i != len(pieces):
            return skip(f"{len(pieces)} inputs, {split.attr['num_split'].i} pieces")
        for k, piece in enumerate(pieces):
            before = static_shape(shapes, piece)
            after = static_shape(shapes, f"{split.name}:{k}")
            if (before is None or after is None or before[axes[0]] is None
                    or before[axes[0]] != after[axes[0]]):
                return skip(f"input {k} ({before}) is not split back as {after}")
        return True

    def _split_concat(self, concat, by_name, shapes):
        pieces = _concat_inputs(concat)
        if not pieces:
            return None
        split = by_name.get(node_name_from_input(pieces[0]))
        if split is None or split.op not in _SPLITS or _has_controls(split):
            return None
        if [canonical_input(p) for p in pieces] != [
                canonical_input(f"{split.name}:{k}") for k in range(split.attr["num_split"].i)]:
            log.debug("%s: %s does not concatenate all of %s in order", self.name, concat.name,
                      split.name)
            return None
        rank = _rank(shapes, _split_value(split))
        axes = (_axis(by_name, concat.input[-1], rank), _axis(by_name, _split_axis(split), rank))
        if axes[0] is None or axes[0] != axes[1]:
            log.debug("%s: %s and %s: axes %s differ", self.name, split.name, concat.name, axes)
            return None
        return split

    def apply(self, graph_def, match: Match, context: TransformContext):
        from tensorflow.core.framework import graph_pb2

        result = graph_pb2.GraphDef()
        result.CopyFrom(graph_def)
        by_name = nodes_by_name(result)
        first, second = (by_name[n] for n in match.nodes)
        if match.detail["kind"] == _CONCAT_SPLIT:
            concat, split = first, second
            pieces = [canonical_input(p) for p in _concat_inputs(concat)]
            _rewire(result, lambda inp: pieces[output_index(inp)]
                    if node_name_from_input(inp) == split.name else None)
            gone = {concat.name, split.name}
            leftovers = [node_name_from_input(i) for n in (concat, split) for i in n.input]
        else:
            split, concat = first, second
            source = canonical_input(_split_value(split))
            leftovers = [split.name] + [node_name_from_input(i) for i in concat.input]
            controlled = any(i == f"^{concat.name}" for n in result.node for i in n.input)
            if concat.name in context.boundary or controlled:
                name, device, dtype = concat.name, concat.device, concat.attr["T"]
                kept = type(concat)(name=name, op="Identity", device=device, input=[source])
                kept.attr["T"].CopyFrom(dtype)
                concat.CopyFrom(kept)
                gone = set()
            else:
                _rewire(result, lambda inp: source
                        if node_name_from_input(inp) == concat.name else None)
                gone = {concat.name}
        kept_nodes = [n for n in result.node if n.name not in gone]
        del result.node[:]
        result.node.extend(kept_nodes)
        remove_unread(result, leftovers, context.boundary, is_pure)
        redirect_colocation(result, {name: None for name in gone})
        return result


def _rewire(graph_def, replacement) -> None:
    """Each data input for which ``replacement(input)`` names a tensor reads that tensor."""
    for node in graph_def.node:
        for k, inp in enumerate(node.input):
            if not is_control_input(inp):
                new = replacement(inp)
                if new is not None:
                    node.input[k] = new


def _has_controls(node) -> bool:
    return any(is_control_input(i) for i in node.input)


def _concat_inputs(concat) -> list[str] | None:
    """The tensors a ConcatV2 joins (its axis aside), or None if it has control inputs."""
    if _has_controls(concat) or len(concat.input) < 2:
        return None
    return list(concat.input[:-1])


def _split_value(split) -> str:
    return split.input[1] if split.op == "Split" else split.input[0]


def _split_axis(split) -> str:
    return split.input[0] if split.op == "Split" else split.input[2]


def _rank(shapes, tensor: str) -> int | None:
    shape = static_shape(shapes, canonical_input(tensor))
    return None if shape is None else len(shape)


def _axis(by_name, tensor: str, rank: int | None) -> int | None:
    """The constant axis ``tensor`` holds, normalized to be >= 0 (None if it is not constant, or
    negative with the rank unknown)."""
    node = resolve_through_identity(by_name, tensor)
    if node is None or node.op != "Const":
        return None
    value = values_from_const(node)
    if value.size != 1:
        return None
    axis = int(value.reshape(()))
    if axis < 0:
        return None if rank is None else axis + rank
    return axis
