"""Does a SavedModel serve the way TF Serving loads it: a TF1 Session, the ``serve`` tag?

``tf.saved_model.load`` (TF2) is forgiving where TF Serving is not: it takes a MetaGraph
whatever its tags, and restores objects, not the graph's signature tensors. TF Serving loads a
SavedModel with the TF1 loader (``tf.compat.v1.saved_model.loader.load`` into a Session, tag
``serve``) and runs the signature's tensors by name. So before a SavedModel is published, it is
loaded exactly that way, into a graph and Session of its own, and its serving signature is run
once on inputs generated from the signature it declares. Anything that fails is one line naming
why. It runs in this process: every candidate was already loaded and run here by the benchmark,
so a model that could abort the runtime would have done so before; a fresh interpreter per
candidate would cost a TensorFlow import each (10-30 s on a loaded 2-core machine).
"""

from __future__ import annotations

import logging
import os

from tfopt.optimizer.errors import EXIT_NOT_SERVABLE, TfoptError, first_line

log = logging.getLogger(__name__)

SERVE_TAG = "serve"


class NotServableError(TfoptError):
    """A SavedModel does not load or run through TF Serving's loader; nothing was published."""

    exit_code = EXIT_NOT_SERVABLE


def check_servable(path: str | os.PathLike, signature: str, *, label: str | None = None
                   ) -> dict[str, list[int]]:
    """Load ``path`` with the TF1 loader in a Session and run its ``signature`` once; returns
    each output's shape. Raises :class:`NotServableError`."""
    what = f"{label} ({path})" if label else str(path)
    try:
        return _serve_once(str(path), signature)
    except Exception as exc:  # noqa: BLE001 - whatever the loader raises is the answer
        raise NotServableError(
            f"{what} does not serve through TF Serving's loader (TF1 Session, tag "
            f"'{SERVE_TAG}'): {type(exc).__name__}: {first_line(exc)}") from None


def _serve_once(path: str, signature: str) -> dict[str, list[int]]:
    import tensorflow as tf

    from tfopt.optimizer.errors import InvalidInputsError
    from tfopt.optimizer.inputs.generated import make_inputs
    from tfopt.optimizer.model.signature import SignatureInfo
    from tfopt.optimizer.runtime.call_deadline import current, deadline, past_deadline_line

    graph = tf.Graph()
    with tf.compat.v1.Session(graph=graph) as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, [SERVE_TAG], path)
        if signature not in meta_graph.signature_def:
            known = ", ".join(sorted(meta_graph.signature_def)) or "none"
            raise LookupError(f"no signature '{signature}' (signatures: {known})")
        info = SignatureInfo.from_signature_def(signature, meta_graph.signature_def[signature])
        try:
            feeds = make_inputs(info)
        except InvalidInputsError as exc:  # an input of unknown rank: loaded, cannot be run
            log.warning("servability: %s loads in a TF1 Session; not run: %s", path, exc)
            return {}
        fetches = {spec.key: graph.get_tensor_by_name(spec.tensor_name) for spec in info.outputs}
        feed_dict = {graph.get_tensor_by_name(spec.tensor_name): feeds[spec.key]
                     for spec in info.inputs}
        # a call that never returns stops the run here, before anything is published
        seconds = current().seconds(None)
        with deadline(seconds, past_deadline_line(f"{path} in TF Serving's loader", seconds)):
            outputs = session.run(fetches, feed_dict=feed_dict)
    return {key: list(getattr(value, "shape", ())) for key, value in outputs.items()}
