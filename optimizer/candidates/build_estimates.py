"""How much memory each candidate's build takes in its worker process, from the model's size.

:func:`tfopt.optimizer.candidates.build.derive_candidates` skips, before starting its worker, a build
estimated not to fit the memory budget beside what the step's process holds, with the estimate
in its one-line reason; the watchdog (:mod:`tfopt.optimizer.system.memory_watchdog`) stops one that
does not fit after all. One factor for every build (10x the model's size on disk over the
runtime, :func:`tfopt.optimizer.model.footprint.building_bytes`) estimated ResNet50's ONNX build at
2.5 GiB where tf2onnx's conversion took 7.9-9.3, and its bf16 build at 2.5 where it took 1.8, so
each flavour has its own.

A build's estimate is a line in the source SavedModel's bytes on disk: a fixed part (the
worker's runtime and converter, which a small model pays in full) plus a factor times the size.
The flavours of one target are built in one worker after one shared conversion
(:func:`tfopt.optimizer.candidates.build.planned_builds`), so a flavour's line covers that conversion
and the flavour itself, and a group's estimate is its largest flavour's. Each line goes through
the peaks of two models' builds, ``keras.applications.MobileNetV2(weights=None)`` (28.7 MiB on
disk) and ``ResNet50(weights=None)`` (197.6 MiB), 100 synthetic calibration samples, rounded
up: a build estimated to fit and stopped costs its time, one skipped needlessly only its
candidate. The ResNet50 figures are the worker's high-water mark, reset before each flavour
(logged by :func:`tfopt.optimizer.candidates.build.build_candidates` in a worker, ``tfopt -v``), and
its process tree's peak (the watchdog's); ``benchmarks/candidate_builds.py`` prints both per
build for a family.
"""

from __future__ import annotations

import os

from tfopt.optimizer.model.footprint import disk_bytes
from tfopt.optimizer.system.memory_budget import GIB

# (GiB whatever the size: the worker's runtime and converter, bytes per byte of the source on
# disk), through the two models' peaks (GiB, MobileNetV2 / ResNet50), rounded up; each line's
# estimate for each model is at least its peak. MobileNetV2's are its workers' high-water
# marks (getrusage): bf16 1.29, then no later worker above that until ONNX's 1.57, so 1.29 is
# taken for XLA, LiteRT and OpenVINO (a bound: sampled from inside the workers, where the
# converters starved the sampling thread, they read 0.88-1.12)
BUILD_LINES = {
    # the optimized graph retyped to bfloat16 and written: 1.29 / 1.80
    "bf16": (1.2, 3.5),
    # the graph traced as one XLA function and written: 1.29 / 2.33
    "xla": (1.1, 7.0),
    # the TFLite converter, run per flavour from one shared source: 1.29 / fp32 (with that
    # source) 1.60, dynamic int8 1.44, full int8 (calibrating) 1.92; the worker's process
    # tree 1.86 for ResNet50's group
    **dict.fromkeys(("litert_fp32", "litert_fp16", "litert_dynamic_int8"), (1.2, 3.5)),
    "litert_full_int8": (1.2, 4.0),
    # tf2onnx's conversion, which the four flavours share, is the group's peak: 1.57 / 9.28
    # (47x ResNet50's size; another run's tree, sampled every 0.5 s, read 7.86), while ONNX
    # Runtime's optimization and quantizers after it peak at 1.96 once the conversion's
    # garbage is collected
    **dict.fromkeys(("onnx_fp32", "onnx_optimized", "onnx_dynamic_int8", "onnx_static_int8"),
                    (0.6, 47.0)),
    # OpenVINO's frontend reads the SavedModel's graph without TensorFlow: 1.29 / 1.18 (the
    # worker's process tree; its own high-water mark 0.57: the conversion has a helper)
    **dict.fromkeys(("openvino_fp32", "openvino_bf16", "openvino_int8"), (1.3, 3.0)),
}


def build_bytes(source: str | os.PathLike, labels: tuple[str, ...] | list[str]) -> int:
    """The estimated peak of one worker building ``labels`` (the flavours of one target, or
    one SavedModel variant) from ``source``: its largest flavour's."""
    size = disk_bytes(source)
    return max(int(fixed * GIB + factor * size)
               for fixed, factor in (BUILD_LINES[label] for label in labels))
