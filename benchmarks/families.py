"""Issue 12, what must be shown: per model family, the stock SavedModel call against what
``tfopt optimize`` chooses and against ONNX Runtime, OpenVINO and LiteRT run by hand, in one
process, timed in blocks.

    .venv/bin/python benchmarks/families.py [--families digits,lstm,...] [--workdir DIR]
        [--seconds 30] [--rounds 20] [--quick] [--no-tune] [--prepare] [--print-only]

On a shared machine, prepare outside the benchmark lock (exports, the ``tfopt optimize`` runs,
the by-hand conversions: tens of minutes on an image model), then time under it (minutes):

    .venv/bin/python benchmarks/families.py --prepare --families resnet50 --workdir DIR
    flock /work/wt/bench.lock .venv/bin/python benchmarks/families.py --families resnet50 \
        --workdir DIR --seconds 20 --rounds 8

Families (batch 1): ``resnet50``, ``mobilenetv2``, ``efficientnetb0`` (``keras.applications``,
``weights=None``, 224x224x3, random BatchNorm statistics and logits out so that output
differences mean something: :func:`common.export_keras_application`); ``lstm``, the
bidirectional LSTM tagger of ``benchmarks/recurrent.py`` (int32 ids [batch, 20]), random weights,
its candidates gated on fidelity to it; ``lstm_trained``, the same tagger trained on a synthetic
tagging task (:func:`recurrent.export_trained_tagger`, ~30 s), with held-out tags as eval data,
so that its int8 candidates are judged on accuracy, as a user's trained model's are; ``bert``, a
BERT-style encoder built here (int32 ids of length 64, 4 layers, hidden 256, 4 heads, FFN 1024,
post-LayerNorm, a tanh pooler on the first token and 10 logits); ``string``, the
``StringLookup`` classifier of ``benchmarks/string_lookup.py`` (16 string tokens, 10000-row
vocabulary); ``digits``, the demo's CNN trained on scikit-learn's digits
(:func:`tfopt.components.demo.digits.train_digits_model`), with its held-out split as eval data.

Per family, in this one process:

- ``stock``: the exported SavedModel's signature call (``load_runner``), the baseline;
- ``all targets``: the model ``tfopt optimize SRC DST --targets savedmodel,litert,onnx,openvino
  --tune`` chose, run as a subprocess exactly as a user runs it (``--eval-data`` for digits and
  lstm_trained),
  loaded with ``tfopt.optimizer.runtime.load_runner(path, format=..., num_threads=...)`` at the thread
  count ``DST/runtime_settings.json`` records (``--no-tune``: the benchmark's own 1-or-all-CPUs
  rule, :func:`tfopt.optimizer.benchmark.thread_choice.choose_threads`, run here, since
  ``candidates.json`` does not record the count it measured at);
- ``savedmodel only``: the same with ``--targets savedmodel`` (without ``--tune``: the chosen
  SavedModel runs on this process's thread pools, sized as the optimize benchmark sized them);
- the stock model run by hand with each runtime's defaults, as a user would try it:
  ``ort``: ``python -m tf2onnx.convert --saved-model SRC`` then ``onnxruntime.InferenceSession``
  with default options; ``openvino``: ``openvino.convert_model(SRC)`` then
  ``Core().compile_model(model, "CPU")`` with no config (on a CPU with native bfloat16 the
  plugin then computes in bf16); ``litert``: ``tf.lite.TFLiteConverter.from_saved_model(SRC)
  .convert()`` with no options, run by ``ai_edge_litert``'s ``Interpreter`` with its default
  threads, and ``litert Nt`` with ``num_threads`` = the CPUs available; both called as the
  chosen LiteRT model is, bound through :class:`tfopt.optimizer.runtime.litert.SignatureCall` (the
  interpreter's ``SignatureRunner`` adds 3.6 us of Python to a 3.3 us call:
  ``benchmarks/litert_calls.py``), so that a LiteRT row compares models, not calling code;
- ``floor``: an identity function of the stock model's inputs, called as the SavedModels are.
  No SavedModel can be faster through that call, so its speedup is the ceiling of the
  savedmodel-only line, printed beside it (timed, not scored).

All of them are timed in one group (:func:`tfopt.optimizer.benchmark.interleaved.time_interleaved`,
blocks of 10 timed calls after one untimed call, scaled down as the gate's benchmark scales them
(:func:`tfopt.optimizer.benchmark.interleaved.scaled_block_size`: ResNet50 one call per round), the
order rotating each round, at least
``--rounds`` rounds and ``--seconds`` seconds). Speedup is ``p50(stock) / p50(model)`` over the
rounds' block medians, with a 95% paired block-bootstrap interval. Quality: digits, top-1 on the
held-out split for every model; the others, against the stock model on generated batch-1
inputs (ids inside the vocabulary, strings three in four from it): largest absolute output
difference and top-1 agreement (per token for the tagger).

Targets checked at the end of a run, on that run's rows only (PASS/FAIL): (1) with all
targets, on every family ours is at least as fast as the best runtime run by hand; (2) faster on
at least half of the families; (3) the LSTM reaches 5x the stock call; (4) with ``savedmodel``
only, 1.5x on every family. Ours against the best by hand (the by-hand row with the lowest p50)
is ``p50(best) / p50(ours)``, the median of per-round ratios of the two rows in the family's
one timing group, with its 95% paired block-bootstrap interval (as the gate's): ``faster``
when the whole interval is above 1, ``slower`` when it is all below 1, and a ``tie`` when it
reaches 1, which counts as at least as fast but not as faster. (3) and (4) are judged on the
point speedup, printed with its interval. A family whose gate chose nothing (exit 3) counts as
serving stock, 1.00x. Rows keep their round figures (``round_ms``) and the id of the run that
timed them; ``--print-only`` notes when the rows it checks come from more than one run.

Exported models, conversions and ``tfopt optimize`` outputs are cached under ``--workdir``
(default ``work/families``; ``--quick`` keeps its own optimize outputs), so a rerun only
times; results go to ``WORKDIR/families.json`` (merged family by family) and ``--print-only``
prints them.

Results, 2026-11-24, 2 CPUs shared with a test suite and other jobs (load average 8.7-11.6
while timing, 4.0 for efficientnetb0, so absolute times are several times an idle machine's;
ratios are within one process and one group). Commands: ``benchmarks/families.py --workdir work/families --seconds 30
--rounds 12`` (all families in order; stopped during resnet50 for time: the optimize run with
all targets took 14-16 min per image model at that load), and for the LSTM, after the harness fix
below, ``benchmarks/families.py --families lstm --workdir work/families_lstm --seconds 30
--rounds 12``. Speedups are p50(stock) / p50(model); "(1t)" the thread count the chosen model
ran at (from ``runtime_settings.json``); quality is top-1 on held-out data (digits) or max abs
diff / top-1 agreement with stock over 8 generated inputs:

| family | stock p50 ms | all targets: chosen | x | savedmodel only: chosen | x | ORT | OpenVINO | LiteRT | LiteRT 2t | quality of the chosen (all; savedmodel) | rounds | load |
|---|---:|---|---:|---|---:|---:|---:|---:|---:|---|---:|---:|
| digits | 0.453 | litert_full_int8 (1t) | 60.2x | xla | 2.47x | 22.9x | 3.97x | 37.4x | 32.2x | top1 0.9889; 0.9889 (stock 0.9889, every runtime 0.9889) | 2442 | 9.1 |
| lstm | 5.128 | onnx_optimized (1t) | 27.3x | xla | 10.4x | 26.2x | 0.53x | failed | failed | 1.1e-08 / 100%; 1.3e-08 / 100% | 127 | 9.9 |
| string | 0.232 | litert_fp16 (2t) | 21.5x | optimized | 1.37x | 18.6x | failed | 27.4x | 31.9x | 1.2e-05 / 100%; 0 / 100% | 1588 | 11.6 |
| bert | 12.46 | litert_dynamic_int8 (1t) | 6.73x | none (gate rejected all) | 1.00x | failed | 0.75x | 0.84x | 1.35x | 3.6e-02 / 100%; - | 28 | 11.0 |
| mobilenetv2 | 32.00 | litert_full_int8 (2t) | 3.75x | bf16 | 3.14x | 0.55x | 0.67x | 0.92x | 3.60x | 4.9e-03 / 100%; 2.0e-03 / 100% | 12 | 8.8 |
| efficientnetb0 | 32.29 | litert_full_int8 (2t) | 7.99x | bf16 | 1.75x | 3.10x | 3.85x | 2.12x | 3.77x | 6.7e-03 / 100%; 1.5e-03 / 100% | 27 | 4.0 |
| resnet50 | not measured in time (its optimize run was stopped at 17:00) | | | | | | | | | | | |

efficientnetb0's optimize run with all targets took 16 min at load 9-24 (its XLA candidate was
7.3x slower than stock there, 0.14x, and rejected).

Runs by hand that failed: LSTM on LiteRT (the default converter: "Lowering tensor list ops is
failed. Please consider using Select TF ops"); string on OpenVINO (``convert_model`` cannot
convert ``HashTableV2``, ``LookupTableFindV2``); BERT on ONNX Runtime (tf2onnx writes an
``Erfc`` node, from Keras' exact GELU, that ONNX Runtime refuses to load: INVALID_GRAPH; tfopt's own ONNX candidates are
skipped with "tf2onnx has no ONNX conversion for Erfc"). OpenVINO by hand computes in bf16 on this
CPU (its default): LSTM 9.5e-05, BERT 3.4e-02 from stock.

Targets, on the six families measured (``--print-only`` prints this check):

- FAIL all targets, at least as fast as the best runtime by hand on every family: string's
  litert_fp16 at 2 threads (0.011 ms) is slower than the default converter's LiteRT fp32 by hand
  at 2 threads (0.007 ms, 0.67x); digits 1.61x, lstm 1.04x (ORT by hand), bert 4.98x, mobilenetv2
  1.04x (LiteRT 2t by hand), efficientnetb0 2.08x (OpenVINO by hand) are ok; lstm's and
  mobilenetv2's margins are within the noise.
- PASS all targets, faster on at least half (5/6).
- PASS all targets, LSTM 27.3x the stock call (target 5x).
- FAIL savedmodel only, 1.5x everywhere: string 1.37x (the optimized graph; XLA takes no
  strings), bert 1.00x (the gate rejected optimized 0.89x, bf16 1.08x and XLA 1.22x, interval
  0.97-1.43x, under this load); digits 2.47x, lstm 10.4x, mobilenetv2 3.14x, efficientnetb0
  1.75x pass.

Round 21 (after the gate's near-tie rule, ONNX lookup tables, XLA around string ops; load
average 20-26 throughout, two other developers' benchmarks running):

``benchmarks/families.py --families string,bert --workdir work/families_r21 --seconds 30
--rounds 12`` (stock models and by-hand conversions copied from ``work/families``):

| family | stock p50 ms | all targets: chosen | x | savedmodel only | x | ORT | LiteRT | LiteRT 2t | rounds | load |
|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|
| string | 0.175 | litert_fp32 (2t) | 23.83x [23.5, 24.3] | optimized | 1.26x | 14.2x | 23.86x | 24.33x [24.0, 24.8] | 2599 | 20.2 |
| bert | 9.338 | litert_dynamic_int8 (2t) | 3.74x [3.53, 4.2] | xla | 1.30x [1.27, 1.34] | failed (Erfc) | 1.99x (OpenVINO, bf16) | 1.06x | 1.42x | 56 | 14.0 |

Optimize runs: string all targets 313 s, savedmodel only 172 s; bert all targets 1439 s (its
candidates 1113 s), savedmodel only 197 s. OpenVINO by hand on string failed as before
(``HashTableV2``; in this run a stale ``openvino_ir.partial`` copied along, cleared since).
Targets on these two rows: string's chosen 0.98x of LiteRT 2t by hand (a tie, below);
bert's 1.88x of the best by hand (OpenVINO); savedmodel only: string 1.26x, bert 1.30x (FAIL).
ResNet50: its all-targets optimize was started at 18:48 (load 3.7, then 17-30 from other
developers' runs) and stopped at 19:41 with 5 of 14 candidates built, for time. Its
``savedmodel``-only run alone, ``tfopt optimize work/families/resnet50/ResNet50_random_bn_logits_savedmodel
work/families_r21/resnet50/opt_savedmodel --targets savedmodel --overwrite`` (621 s, load 7.7-13.2):
the gate chose bf16 at 2.37x (optimized 1.19x, not shown real; XLA 0.67x); the gate's own
benchmark, not a row of this table (no by-hand runtimes, no all-targets choice).

String, why ours was slower than LiteRT by hand (0.011 vs 0.007 ms last round): measured
head to head in one process (``ai_edge_litert`` at 2 threads, 40+ rounds of 10 calls; the same
figures at 1 thread and the default, and with two busy loops on the cores), per call:

- the harness, ~0.7 us (10%): families.py timed the chosen model through
  ``ModelRunner.call``, which packs the keyword arguments per call, and the models run by hand
  bare. Fixed: every subject is called bound (``ModelRunner.bind``);
- fp16 over fp32, 0.2-0.35 us (3-5%): the fp16 model's ``DEQUANTIZE`` of the embedding's output.
  The gate had them tied (23.32x and 23.27x, intervals overlapping) and chose fp16. Fixed in
  ``tfopt.optimizer.gate.near_ties.choose_among_promoted``: among promoted candidates whose intervals
  overlap the fastest one's, the most precise (fp32, then fp16/bf16, then int8). Now
  ``litert_fp32`` is chosen (``litert_fp16`` and ``litert_dynamic_int8`` tied with it);
- the converter's source, ~0.1 us (1-2%): our LiteRT candidates convert the tables-refilled
  rewrite (``tfopt.optimizer.candidates.litert.constant_tables``), whose outputs are pinned with a ``RESHAPE``;
  converted from the stock SavedModel the same converter settings give the by-hand model's ops
  exactly. What is left: 0.00735 vs 0.00720 ms, 0.98x, intervals overlapping;
- threads: no difference (1, 2 or the default thread, 7.06-7.10 us by hand).

BERT, ``savedmodel`` only: the 0.88x of the optimized graph last round did not reproduce; its
interval then was 0.68-1.15 (28 rounds at load 11). Here the gate measured optimized 1.08-1.10x,
bf16 1.20x, XLA 1.31-1.32x (chosen with ``savedmodel`` only, 1.30x in the table); in a
20-round group at load 14-24 (``/tmp`` probe, every recipe prefix and every transform alone, all
within 3.6e-7 of stock) frozen was 1.13x, the full inference recipe 1.39x, the prefixes and
single transforms between 1.09x and 1.41x with no trend (medians only, no interval, at that
load). TensorFlow's post-optimization graphs
(``context.enable_run_metadata``) show no fusion that the stock call gets and ours loses: stock
2 ``_FusedMatMul`` and 12 separate ``BiasAdd``, 72 ``ReadVariableOp``, 490 nodes; ours 303 nodes
after grappler and the oneDNN layout pass (``_MklMatMul`` 10, ``_MklBatchMatMulV2`` 16,
``_MklEinsum`` 8). In both, Keras 3's exact GELU is ``0.5 * x * erfc(-x / sqrt 2)``, so the
remapper's MatMul+BiasAdd+GeluExact fusion (an ``Erf`` pattern) never fires, and LayerNorm stays
``Mean``/``SquaredDifference``/``Rsqrt`` (9 of each). 1.5x inside TensorFlow was not reached:
XLA, the best, is 1.30x at batch 1 here; an ``erfc`` to ``erf`` GELU rewrite that lets the
remapper fuse the four FFN matmuls is the next thing to try.

String, ``savedmodel`` only: the XLA candidate now compiles the numeric part after the lookup
(``tfopt.optimizer.candidates.xla.xla_partition``) and is exact, but under this load it was 0.88x of stock (the
hashing and search stay in TensorFlow, and the XLA launch adds its own cost to a 0.17 ms call);
the gate rejected it. ONNX candidates now convert (the tables as a ``CategoryMapper``); the
gate measured them at 15-16x, behind LiteRT, and rejected them for top-1 agreement 0.29: the
ONNX runner fed the generated tokens as bytes, which ONNX Runtime looks up as their repr. Fixed
after this run (the runner feeds str; ``tests/test_string_inputs.py``), not re-measured.

Round 22, ResNet50 (the machine's load average 10 at the start, then 17-81: six developers'
jobs on 2 CPUs). Where ``tfopt optimize`` with all targets spends its time: in round 21's run
(18:50-19:41, stopped) all 14 candidates were built by 19:11 (21 min: bf16 72 s, xla 125 s,
litert fp32/fp16/dynamic/full 152/104/171/153 s, the ONNX group 188 s, the OpenVINO group
279 s); the 30 min after that were the benchmark and evaluation of 16 models, not builds. This
round, ``families.py --prepare --families resnet50 --workdir work/families_r22`` with main's
code (ce3e99f): optimize stage 217 s, bf16 85 s, xla 110 s, litert_fp32 190 s, litert_fp16
310 s, litert_dynamic_int8 545 s, litert_full_int8 577 s (the load rising from 10 to 63), the
ONNX group killed after 704 s by the kernel's global OOM killer (the machine's 24 GiB exhausted
by all developers' jobs; the worker held 4.9 GB), the OpenVINO group 22:42-22:49. Each worker
pays a TensorFlow import: 13.7 CPU seconds, 125-163 s wall at load 10-23
(``python -X importtime -c "import tensorflow"``; keras alone imports scikit-learn, 24 s wall).
Changed since: the four LiteRT flavours build in one worker (one import, one load of the model,
one converter source: :func:`tfopt.optimizer.candidates.build.planned_builds`); on a model of 32 MB or more
``litert_fp16`` and ``onnx_fp32``, which cannot beat ``litert_fp32`` and ``onnx_optimized``, are
not built (:data:`tfopt.optimizer.candidates.build.DOMINATED`), which also takes two of 16 models out of
every benchmark round; the ONNX int8 flavours share one quantization pre-processing. The
per-group figures after the change (``benchmarks/candidate_builds.py``, CPU seconds) were not
measured: the runs were stopped to leave the CPUs to this row.

The ResNet50 row, partial: ``flock /work/wt/bench.lock .venv/bin/python benchmarks/families.py
--families resnet50 --workdir work/families_r22 --seconds 20 --rounds 8 --no-optimize``
(23:13-23:15, load 12.8 before, 13.0 after; the all-targets optimize, still in its benchmark
stage, was not timed). Its ``savedmodel``-only run (``tfopt optimize SRC DST --targets
savedmodel --overwrite``, 3180 s at load 17-81: optimize 962 s, candidates 755 s,
benchmark+evaluate 1450 s) chose bf16 at 2.49x in its own gate (optimized 1.27x, XLA 0.43x
rejected):

| family | stock p50 ms | all targets | savedmodel only: chosen | x [95%] | ORT | OpenVINO (bf16) | LiteRT | LiteRT 2t | rounds | load |
|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|
| resnet50 | 179.9 | not run | bf16 | 2.35x [2.10, 2.63] | 0.73x | 1.03x | 0.68x | 0.82x | 8 | 12.8 |

Quality against stock (max abs diff / top-1 agreement, 8 inputs): bf16 1.2e-02 / 100%, ORT
2.4e-06 / 100%, OpenVINO 1.1e-02 / 100%, LiteRT 4.1e-06 / 100%. Target with ``savedmodel``
only, 1.5x: PASS (2.35x). The best by hand here is OpenVINO at 181 ms, about stock; the
all-targets choice needs 1.0x of stock to tie it, which bf16 alone (2.35x) already beats.

Round 23: all seven families in ONE run, with r23-strings (LiteRT bound call, table-folded
index map) and r23-bert (the drawn encoder, ``flatten_dense_matmuls``, bf16 with float32
normalizations) merged. Command, 02:08:23-02:12:47 UTC (uptime before: load average 9.38, 11.10,
12.62; after: 9.27, 9.97, 11.77)::

    flock /work/wt/bench.lock .venv/bin/python benchmarks/families.py \
        --families digits,lstm,string,bert,mobilenetv2,efficientnetb0,resnet50 \
        --workdir work/families_r23 --seconds 20 --rounds 10 --no-optimize

| family | stock p50 ms | all targets: chosen | x [95%] | savedmodel only: chosen | x [95%] | ORT | OpenVINO | LiteRT | LiteRT 2t | fidelity of the chosen (all; savedmodel) | rounds | block | load |
|---|---:|---|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|
| digits | 0.401 | litert_full_int8 (1t) | 87.2x [84.7, 89.8] | xla | 2.83x [2.79, 2.88] | 20.0x | 3.25x | 39.7x | 33.2x | top-1 0.9889 for every model | 703 | 10 | 8.9 |
| lstm | 4.060 | onnx_optimized (1t) | 20.4x [15.6, 24.1] | xla | 8.63x [6.50, 9.30] | 21.1x | 0.58x | failed | failed | 1.1e-08 / 100%; 1.3e-08 / 100% | 116 | 10 | 9.8 |
| string | 0.125 | litert_fp32 (2t) | 44.8x [44.4, 45.7] | optimized | 1.51x [1.50, 1.52] | 10.5x | failed | 38.8x | 39.0x | 5.6e-09 / 100%; 0 / 100% | 4890 | 10 | 10.4 |
| bert | 9.604 | litert_fp32 (2t) | 1.36x [1.26, 1.40] | bf16 | 1.90x [1.85, 1.93] | failed | 1.30x | 1.15x | 1.42x | 2.8e-06 / 100%; 1.9e-02 / 100% | 62 | 6 | 9.3 |
| mobilenetv2 | 21.45 | litert_full_int8 (2t) | 5.74x [4.97, 6.02] | bf16 | 2.33x [2.30, 2.37] | 0.77x | 1.29x | 0.92x | 2.58x | 4.9e-03 / 100%; 2.0e-03 / 100% | 55 | 2 | 8.3 |
| efficientnetb0 | 32.40 | litert_full_int8 (2t) | 4.40x [4.19, 4.53] | bf16 | 1.72x [1.68, 1.78] | 0.76x | 0.81x | 0.92x | 2.12x | 6.7e-03 / 100%; 1.5e-03 / 100% | 34 | 2 | 8.6 |
| resnet50 | 111.1 | bf16 | 2.58x [2.45, 2.72] | bf16 | 2.46x [2.35, 2.68] | 0.36x | 0.77x | 0.39x | 0.72x | 1.2e-02 / 100%; 1.2e-02 / 100% | 15 | 1 | 8.8 |

Fidelity is max abs diff / top-1 agreement with stock over 8 generated inputs (digits: top-1
on its held-out split). Failed by hand: LSTM on LiteRT (TensorList lowering), string on OpenVINO
(``HashTableV2``, ``LookupTableFindV2``), BERT on ONNX Runtime (tf2onnx's ``Erfc``,
INVALID_GRAPH). The target lines this run printed:

- FAIL at least as fast as the best by hand on every family: bert's litert_fp32 7.06 ms
  against LiteRT 2t by hand 6.75 ms, 0.97x [0.85, 0.99] (slower); lstm 0.97x [0.94, 1.01]
  against ORT by hand (a tie, counted as at least as fast); digits 2.20x, string 1.15x,
  mobilenetv2 2.28x, efficientnetb0 2.01x (LiteRT 2t by hand), resnet50 3.98x [2.89, 4.22]
  (OpenVINO by hand) faster;
- PASS faster on 5 of 7;
- PASS LSTM 20.4x the stock call;
- PASS savedmodel only, 1.5x everywhere (string 1.51x [1.50, 1.52] is the narrowest).

BERT's all-targets gate promoted bf16 (1.80x) and litert_fp32 (1.54x) and chose litert_fp32:
their intervals overlapped, and ``tfopt.optimizer.gate.near_ties`` then prefers float32. The same
bf16 is 1.90x here, as the savedmodel-only choice.

Preparation (``--prepare``, ``nice -n 19``, the load 10-17 from six developers' jobs): ResNet50
all targets 4290 s (optimize 156 s, candidates 1186 s: bf16 90, xla 120, the LiteRT group 294,
the ONNX group 469, the OpenVINO group 212; benchmark+evaluate 2579 s in 4 group processes of
456, 469, 1429 and 224 s, whose timed rounds were 46, 57, 224 s and under a minute; ``--tune``
367 s). The third group's 24 minutes were mostly its start and the thread choice of its eight
LiteRT/ONNX/OpenVINO candidates, each timed at 1 and 2 threads in 10 rounds of 11 calls
(about 220 ResNet50 calls a candidate); the thread choice now scales its blocks to the call
time as the benchmark does (one call a round for ResNet50). EfficientNetB0's all-targets run,
whose first group started after that change, benchmarked 10 candidates in one group in 263 s.
The ResNet50 ``savedmodel``-only run was reused from round 22 (``work/families_r22``, main at
ce3e99f, 3180 s). Other runs (s): digits 187 / 106, lstm 344 / 227, string 337 / 150, bert
1338 / 761, mobilenetv2 1252 / 311, efficientnetb0 1633 / 386 (all targets / savedmodel only).

Round 24, the string family on r24-strings (the runner's bound call without ``call_flat``'s
Python, for every model; ``fold_embedding_projections`` in the default recipe; the folded
lookup's search without its ``Minimum`` and its ``Shape``). Prepared with ``nice -n 19
.venv/bin/python benchmarks/families.py --families string --workdir work/families_r24 --prepare
--memory-gb 8`` (246 s), then 04:52:24-04:53:32 UTC (uptime before: load average 10.78, 11.07,
10.72; after: 11.06, 11.11, 10.76)::

    flock /work/wt/bench.lock .venv/bin/python benchmarks/families.py --families string \
        --workdir work/families_r24 --seconds 20 --rounds 10 --no-optimize

| family | stock p50 ms | all targets: chosen | x [95%] | savedmodel only: chosen | x [95%] | ORT | OpenVINO | LiteRT | LiteRT 2t | rounds | load |
|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|
| string | 0.066 | litert_fp32 (2t) | 23.61x [23.54, 23.71] | optimized | 1.52x [1.51, 1.52] | 5.50x | failed | 20.24x | 20.36x | 7754 | 11.67 |

The stock call is 0.066 ms where round 23 timed 0.104 (the bound call's Python gone). The
gates chose ``optimized`` (1.46x in its own benchmark) with ``savedmodel`` only (bf16 skipped:
nothing to convert; XLA 0.93x, rejected) and ``litert_fp32`` (25.5x; fp16 25.6x passed) with
all targets. PASS savedmodel only, 1.5x, narrowly: the same run before the ``Shape`` went
(04:42, load 15.0) gave 1.47x [1.47, 1.48]. Why the round-23 figure (1.51x) fell to 1.29x,
and what the optimized call still costs: ``benchmarks/string_lookup.py`` (its docstring).

Round 25, all seven families in ONE run on a quiet machine (nothing else running), every model
prepared again on main at cd003b5 (ONNX graph simplification, ``einsum_as_batch_matmul`` and
``constant_reshape_shapes`` in the default recipe, tuning sized by measurement), each with
``nice -n 5 .venv/bin/python benchmarks/families.py --families F --workdir /work/wt/fam
--prepare`` (07:08-07:36 UTC, load 1-5; all targets / savedmodel only, s: digits 60 / 24, lstm
103 / 23, string 79 / 22, bert 268 / 98, mobilenetv2 154 / 37, efficientnetb0 269 / 78,
resnet50 304 / 98). Then, 07:36:42-07:39:41 UTC (load average 0.92 before, 1.79 after)::

    .venv/bin/python benchmarks/families.py \
        --families digits,lstm,string,bert,mobilenetv2,efficientnetb0,resnet50 \
        --workdir /work/wt/fam --seconds 20 --rounds 10 --no-optimize

| family | stock p50 ms | all targets: chosen | x [95%] | savedmodel only: chosen | x [95%] | ORT | OpenVINO | LiteRT | LiteRT 2t | rounds | load |
|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|
| digits | 0.166 | litert_full_int8 (1t) | 59.60x [59.51, 59.71] | xla | 4.88x [4.87, 4.89] | 14.42x | 5.20x | 30.98x | 34.30x | 6055 | 0.93 |
| lstm | 0.584 | onnx_optimized (1t) | 4.92x [4.90, 4.93] | xla | 2.87x [2.86, 2.88] | 3.94x | 0.46x | failed | failed | 698 | 1.94 |
| string | 0.072 | litert_fp16 (2t) | 35.40x [35.19, 35.58] | optimized | 1.09x [1.08, 1.09] | 9.69x | failed | 30.83x | 30.80x | 10707 | 2.15 |
| bert | 3.390 | litert_dynamic_int8 (2t) | 6.82x [6.79, 6.84] | bf16 | 1.88x [1.86, 1.91] | failed | 3.32x | 1.72x | 3.06x | 171 | 1.82 |
| mobilenetv2 | 9.748 | litert_fp32 (2t) | 5.64x [5.58, 5.79] | bf16 | 2.72x [2.66, 2.82] | 4.91x | 4.93x | 2.98x | 5.60x | 126 | 1.79 |
| efficientnetb0 | 14.918 | litert_full_int8 (2t) | 9.43x [9.30, 9.69] | bf16 | 1.79x [1.75, 1.81] | 3.57x | 3.11x | 2.24x | 4.12x | 87 | 1.77 |
| resnet50 | 28.061 | openvino_int8 (2t) | 5.42x [5.38, 5.46] | bf16 | 2.23x [2.19, 2.26] | 1.58x | 2.26x | 0.83x | 1.57x | 50 | 1.82 |

Fidelity (max abs diff / top-1 agreement with stock, 8 inputs; digits top-1 on held-out data,
0.9889 for every model): lstm 1.1e-08 / 100% (all), 1.7e-08 / 100% (savedmodel); string
1.2e-05, 1.1e-08; bert 4.4e-02, 1.9e-02; mobilenetv2 5.4e-07, 2.0e-03; efficientnetb0 6.7e-03,
1.5e-03; resnet50 3.1e-02, 1.2e-02; all 100%. The target lines this run printed:

- PASS at least as fast as the best by hand on every family: digits 1.71x [1.70, 1.74], lstm
  1.38x [0.91, 1.83] (a tie: ORT by hand with its default spinning threads moved from 0.11 to
  0.21 ms between runs), string 1.15x, bert 2.06x, mobilenetv2 1.01x [1.01, 1.03], efficientnetb0
  2.29x, resnet50 2.37x;
- PASS faster on 6 of 7;
- FAIL LSTM 4.92x [4.90, 4.93] the stock call (target 5x). The same models at load 4.6
  (07:00, before the recipe changes) gave 5.90x [5.31, 7.46], ORT by hand 1.16x [1.12, 1.18]
  slower than ours: on a quiet machine TensorFlow's stock loop gets the idle second core
  (0.584 ms against 1.043), which the one-thread ONNX Runtime session does not use. Two more
  quiet runs of ``--families lstm`` right after (08:00, load 2.3): 4.92x and 4.90x, and ORT by
  hand (its default two threads, spinning) at 0.108 and 0.107 ms against ours at 0.118: 0.91x
  [0.89, 1.84] (a tie) and 0.90x [0.89, 0.90] (slower). So the LSTM's "at least as fast" line
  holds in some quiet processes and not in others; splitting the bidirectional LSTM into two
  LSTMs run in parallel (ORT_PARALLEL, exact) was 0.99x with spinning and 0.90x without;
- FAIL savedmodel only 1.5x on every family: string 1.09x. Every other family passes (bert 1.88x,
  efficientnetb0 1.79x the narrowest). Why the string model cannot: the same process's cost of
  calling any TensorFlow function, ``benchmarks/string_lookup.py --bindings`` on these models
  at load 1.0 (07:40): an identity function costs 61.3 us through the runner's bound call, the
  stock model 71.9 and the optimized 66.8 (1.08x); a graph that cost nothing would be 1.17x. At
  load 4.6 (07:15) the same command gave 17.9 / 27.3 / 22.4 us (1.20x; at most 1.53x).

Round 26 (2026-11-28). What changed: an ONNX Runtime session of more than one thread spins
between calls (ORT's default; the tagger alone: 2 threads spinning 93 us, 1 thread 118, 2 not
spinning 162), and after a block of such a session (ours or the default session by hand) the
harness waits until no other thread of the process runs (``tfopt.optimizer.benchmark.idle``); the
``lstm_trained`` family; a tagger's per-position labels scored per position. Every family
prepared again on main at 758a824 (the code that lands but docs), one after another with
``benchmarks/families.py --families F --workdir /work/wt/fam --prepare`` (10:16-10:45 UTC, load
1-2; s: digits 98, lstm 142, lstm_trained 144, string 90, bert 333, mobilenetv2 200,
efficientnetb0 347, resnet50 412). Then, 10:45:49-10:49:16 UTC (load 1.54 before, 1.78 after)::

    .venv/bin/python benchmarks/families.py --families \
        digits,lstm,lstm_trained,string,bert,mobilenetv2,efficientnetb0,resnet50 \
        --workdir /work/wt/fam --seconds 20 --rounds 10 --no-optimize

| family | stock p50 ms | all targets: chosen | x [95%] | savedmodel only: chosen | x [95%] | ORT | OpenVINO | LiteRT | LiteRT 2t | rounds | load |
|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|
| digits | 0.191 | litert_full_int8 (1t) | 67.30x [66.84, 67.81] | xla | 2.56x [2.45, 3.05] | 16.04x | 5.53x | 35.11x | 35.46x | 526 | 1.62 |
| lstm | 0.657 | onnx_optimized (2t) | 6.01x [3.40, 6.44] | xla | 2.75x [2.71, 2.80] | 5.17x | 0.45x | failed | failed | 199 | 1.73 |
| lstm_trained | 0.630 | onnx_dynamic_int8 (1t) | 10.95x [10.92, 11.02] | xla | 2.73x [2.72, 2.75] | 5.66x | 0.48x | failed | failed | 324 | 1.77 |
| string | 0.075 | litert_fp16 (2t) | 35.83x [35.64, 36.04] | optimized | 1.09x [1.09, 1.09] | 9.68x | failed | 30.76x | 31.16x | 8048 | 2.12 |
| bert | 4.037 | litert_dynamic_int8 (2t) | 7.28x [7.14, 7.55] | bf16 | 2.01x [1.97, 2.04] | failed | 3.43x | 1.86x | 3.33x | 151 | 1.80 |
| mobilenetv2 | 10.003 | litert_full_int8 (2t) | 11.80x [11.63, 11.88] | bf16 | 2.48x [2.43, 2.51] | 4.69x | 7.41x | 2.94x | 5.62x | 95 | 1.71 |
| efficientnetb0 | 15.876 | litert_full_int8 (2t) | 9.76x [9.60, 9.92] | bf16 | 1.72x [1.70, 1.76] | 3.47x | 4.71x | 2.31x | 4.04x | 73 | 1.66 |
| resnet50 | 29.046 | openvino_int8 (2t) | 5.58x [5.53, 5.66] | bf16 | 2.34x [2.30, 2.37] | 1.64x | 3.50x | 0.87x | 1.65x | 48 | 1.76 |

Quality: digits top-1 0.9889 and lstm_trained per-position top-1 0.9087 on held-out data for
every model; fidelity elsewhere (max abs diff, all targets / savedmodel only; top-1 agreement
100% everywhere): lstm 1.1e-08 / 1.7e-08, string 1.2e-05 / 1.1e-08, bert 4.4e-02 / 1.9e-02,
mobilenetv2 4.9e-03 / 2.0e-03, efficientnetb0 6.7e-03 / 1.5e-03, resnet50 3.1e-02 / 1.2e-02.
The target lines: PASS at least as fast as the best by hand on every family, and faster on 8 of
8 (lstm 1.12x [1.11, 1.15] against ORT by hand; the narrowest, string 1.15x against LiteRT 2t);
PASS LSTM 6.01x (random weights) and 10.95x (trained); FAIL savedmodel only: string 1.09x, the
rest 1.72x (efficientnetb0) and up. The random-weight LSTM's interval reaches down to 3.40x:
two more runs of ``--families lstm,lstm_trained`` right after (10:50, 10:51) gave 6.68x [6.48,
6.75] and 6.57x [6.46, 6.60], ORT by hand 1.14x slower than ours in both, and 10.91x / 10.80x
trained. Before the wait read thread states (an earlier version looked at CPU time, which the
kernel updates at its tick, and never saw ORT's worker), the same code path gave 4.37-4.51x:
most likely because one session's workers spun on through the next sessions' blocks.

Round 27 (2026-11-28): the same artifacts (round 26's preparation; no code that builds, converts
or calls a model changed since), with the ``floor`` row, the same command, 12:21:46-12:25:11 UTC
(load 0.38 before, 1.61 after):

| family | stock p50 ms | all targets: chosen | x [95%] | savedmodel only: chosen | x [95%] | ceiling (floor) | ORT | OpenVINO | LiteRT | LiteRT 2t | rounds |
|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|
| digits | 0.204 | litert_full_int8 (1t) | 74.09x [69.17, 80.12] | xla | 2.56x [2.48, 2.73] | 6.70x | 15.18x | 5.19x | 37.84x | 29.71x | 516 |
| lstm | 0.627 | onnx_optimized (2t) | 7.00x [6.95, 7.05] | xla | 2.89x [2.87, 2.92] | 21.85x | 6.07x | 0.51x | failed | failed | 220 |
| lstm_trained | 0.627 | onnx_dynamic_int8 (1t) | 11.23x [11.18, 11.28] | xla | 2.89x [2.89, 2.91] | 21.85x | 6.02x | 0.51x | failed | failed | 342 |
| string | 0.070 | litert_fp16 (2t) | 34.19x [33.81, 34.49] | optimized | 1.08x [1.08, 1.08] | 1.17x [1.17, 1.18] | 9.41x | failed | 29.76x | 30.11x | 6642 |
| bert | 3.622 | litert_dynamic_int8 (2t) | 7.11x [7.01, 7.20] | bf16 | 1.91x [1.89, 1.94] | 61.5x | failed | 3.28x | 1.74x | 3.14x | 163 |
| mobilenetv2 | 9.504 | litert_full_int8 (2t) | 11.37x [11.24, 11.45] | bf16 | 2.55x [2.52, 2.60] | 148x | 4.78x | 7.78x | 2.90x | 5.59x | 99 |
| efficientnetb0 | 14.542 | litert_full_int8 (2t) | 9.58x [9.45, 9.72] | bf16 | 1.78x [1.77, 1.80] | 228x | 3.53x | 5.21x | 2.22x | 4.12x | 80 |
| resnet50 | 28.418 | openvino_int8 (2t) | 5.47x [5.44, 5.50] | bf16 | 2.31x [2.30, 2.32] | 332x | 1.60x | 3.38x | 0.85x | 1.59x | 49 |

Quality as in round 26 (the same models). PASS at least as fast as the best by hand on every
family and faster on 8 of 8 (the narrowest: string 1.14x [1.13, 1.14] against LiteRT 2t, lstm
1.15x [1.15, 1.16] against ORT); PASS LSTM 7.00x (random weights) and 11.23x (trained); FAIL
savedmodel only: string 1.08x, under a ceiling of 1.17x. No SavedModel of that model, not even
one that does nothing, reaches 1.5x its stock call through the call every SavedModel here gets.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(REPO))
from common import export_keras_application, identity_call
from recurrent import TRAINED_TAGGER_EVAL, VOCABULARY, export_tagger, export_trained_tagger

VENV_BIN = REPO / ".venv" / "bin"
ALL_TARGETS = "savedmodel,litert,onnx,openvino"
SAVEDMODEL_ONLY = "savedmodel"
# the two tfopt optimize runs per family: label -> (output directory's name, targets)
OPTIMIZE_RUNS = {"all targets": ("opt_all", ALL_TARGETS),
                 "savedmodel only": ("opt_savedmodel", SAVEDMODEL_ONLY)}
RESULT_FILE = "families.json"
BLOCK_SIZE = 10
FIDELITY_INPUTS = 8
LSTM_TARGET, SAVEDMODEL_TARGET = 5.0, 1.5

BERT_LENGTH, BERT_VOCABULARY, BERT_HIDDEN, BERT_LAYERS, BERT_HEADS = 64, 8000, 256, 4, 4
STRING_VOCABULARY, STRING_LENGTH = 10000, 16


# --- the families -----------------------------------------------------------------------------

def _export_application(name: str) -> Callable[[Path], Path]:
    return lambda workdir: export_keras_application(name, workdir, random_batch_norm=True,
                                                    logits=True)


def export_encoder(workdir: Path) -> Path:
    """A BERT-style encoder, random weights (seeded): token + position embeddings, LayerNorm,
    ``BERT_LAYERS`` x (MultiHeadAttention, add & LayerNorm, GELU FFN, add & LayerNorm), a tanh
    pooler on the first token, 10 logits.

    Every weight is drawn, biases and LayerNorm offsets and scales included (``_draw_weights``),
    as in a trained encoder: Keras initializes biases and offsets to zeros, and Grappler drops a
    BiasAdd or Add of zeros before its remapper runs, so an untrained export is a model no one
    serves, whose matrix products fuse with nothing (docs/gelu.md). The stock call and every
    candidate run this same exported model."""
    path = workdir / "bert_encoder_drawn"
    if (path / "saved_model.pb").is_file():
        return path
    from tfopt.optimizer.tf_runtime import import_tensorflow

    import_tensorflow()
    import keras

    class PositionEmbedding(keras.layers.Layer):
        def build(self, input_shape):
            self.table = self.add_weight(shape=tuple(input_shape[1:]), name="positions",
                                         initializer=keras.initializers.RandomNormal(0, 0.02))

        def call(self, x):
            return x + self.table

    keras.utils.set_random_seed(0)
    layers = keras.layers
    ids = keras.Input((BERT_LENGTH,), dtype="int32", name="token_ids")
    x = layers.Embedding(BERT_VOCABULARY, BERT_HIDDEN)(ids)
    x = layers.LayerNormalization(epsilon=1e-12)(PositionEmbedding()(x))
    for _ in range(BERT_LAYERS):
        attended = layers.MultiHeadAttention(BERT_HEADS, BERT_HIDDEN // BERT_HEADS)(x, x)
        x = layers.LayerNormalization(epsilon=1e-12)(x + attended)
        hidden = layers.Dense(4 * BERT_HIDDEN, activation="gelu")(x)
        x = layers.LayerNormalization(epsilon=1e-12)(x + layers.Dense(BERT_HIDDEN)(hidden))
    pooled = layers.Dense(BERT_HIDDEN, activation="tanh")(x[:, 0, :])
    model = keras.Model(ids, layers.Dense(10)(pooled))
    _draw_weights(model)
    model.export(str(path), verbose=False)
    return path


def _draw_weights(model, scale: float = 0.05) -> None:
    """Biases and LayerNorm offsets (zeros at init) from N(0, ``scale``), LayerNorm scales (ones)
    from 1 + N(0, ``scale``), seeded; kernels and embeddings keep Keras's random init."""
    rng = np.random.default_rng(0)
    for weight in model.weights:
        value = np.asarray(weight.numpy())
        if np.all(value == 0) or np.all(value == 1):
            weight.assign((value + rng.normal(0, scale, value.shape)).astype(value.dtype))


def _string_tokens() -> np.ndarray:
    return np.array([f"token{i}" for i in range(STRING_VOCABULARY - 1)])


def _export_string(workdir: Path) -> Path:
    from string_lookup import export_classifier

    path = workdir / "string_classifier"
    if not (path / "saved_model.pb").is_file():
        export_classifier(path, STRING_VOCABULARY, STRING_LENGTH)
    return path


def _export_digits(workdir: Path) -> Path:
    from tfopt.components.demo.digits import train_digits_model

    path = workdir / "digits_savedmodel"
    if not ((path / "saved_model.pb").is_file() and (workdir / "digits_eval.npz").is_file()):
        train_digits_model(workdir, overwrite=True)
    return path


@dataclass(frozen=True)
class Family:
    name: str
    export: Callable[[Path], Path]  # family workdir -> stock SavedModel (cached)
    int_ranges: dict = field(default_factory=dict)
    vocabularies: Callable[[], dict] | None = None
    eval_data: str | None = None  # file name in the family workdir, labelled (x, y)

    def feeds(self, signature, seed: int) -> dict:
        from tfopt.optimizer.inputs.generated import make_inputs

        return make_inputs(signature, 1, seed, self.int_ranges,
                           vocabularies=self.vocabularies() if self.vocabularies else None)


# cheap ones first, so that a long run has results early
FAMILIES = {f.name: f for f in (
    Family("digits", _export_digits, eval_data="digits_eval.npz"),
    Family("lstm", export_tagger, int_ranges={"token_ids": (0, VOCABULARY)}),
    Family("lstm_trained", export_trained_tagger, int_ranges={"token_ids": (0, VOCABULARY)},
           eval_data=TRAINED_TAGGER_EVAL),
    Family("string", _export_string, vocabularies=lambda: {"tokens": _string_tokens()}),
    Family("bert", export_encoder, int_ranges={"token_ids": (0, BERT_VOCABULARY)}),
    Family("mobilenetv2", _export_application("MobileNetV2")),
    Family("efficientnetb0", _export_application("EfficientNetB0")),
    Family("resnet50", _export_application("ResNet50")),
)}


# --- tfopt optimize, as a user runs it ---------------------------------------------------------

def run_optimize(src: Path, dst: Path, targets: str, eval_data: Path | None, args,
                 say) -> dict:
    """``tfopt optimize SRC DST --targets ...`` in a subprocess (cached: a DST with its
    candidates.json, or the DST.candidates.json of a rejection, is reused). Returns what it
    chose: {"chosen": candidate dict or None, "rows": [...], "exit": code, "seconds": s,
    "threads": recorded thread count or None}."""
    beside = dst.parent / f"{dst.name}.candidates.json"
    record = dst.parent / f"{dst.name}.run.json"
    done = record.is_file() and json.loads(record.read_text())["exit"] in (0, 3) and (
        (dst / "candidates.json").is_file() or beside.is_file())
    if not done and not args.optimize:
        say(f"no finished tfopt optimize --targets {targets} in {dst.parent} (--no-optimize)")
        return {"exit": None, "seconds": None, "chosen": None, "rows": [], "threads": None,
                "error": "not run (--no-optimize)"}
    if not done:  # never run, or it failed (exit 1, 2, ...): run it (again)
        command = [str(VENV_BIN / "tfopt"), *(["-v"] if args.verbose else []), "optimize",
                   str(src), str(dst), "--targets", targets, "--overwrite"]
        if eval_data is not None:
            command += ["--eval-data", str(eval_data)]
        if args.tune and targets != SAVEDMODEL_ONLY:
            # a SavedModel runs on the process's thread pools, which this process sizes as
            # the optimize benchmark did; tuning them (a process per setting) adds minutes
            command.append("--tune")
        if args.quick:
            command += ["--seconds", "3"]
        if args.memory_gb:
            command += ["--memory-gb", str(args.memory_gb)]
        say(f"$ {' '.join(command)}")
        started = time.perf_counter()
        log = dst.parent / f"{dst.name}.log"
        with open(log, "w") as out:
            code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT,
                                  cwd=REPO, check=False).returncode
        seconds = time.perf_counter() - started
        tail = log.read_text().strip().splitlines()[-3:]
        say(f"  exit {code} in {seconds:.0f}s: {' | '.join(tail)[:300]}")
        record.write_text(json.dumps({"command": command, "exit": code, "seconds": seconds,
                                      "log": str(log)}, indent=2) + "\n")
    run = json.loads(record.read_text())
    if (dst / "candidates.json").is_file():
        selection = json.loads((dst / "candidates.json").read_text())
    elif beside.is_file():
        selection = json.loads(beside.read_text())
    else:
        return {**run, "chosen": None, "rows": [], "threads": None,
                "error": Path(run["log"]).read_text().strip().splitlines()[-1][:300]}
    threads = None
    settings = dst / "runtime_settings.json"
    if settings.is_file():
        threads = json.loads(settings.read_text()).get("num_threads")
    return {**run, "chosen": selection["chosen"], "rows": selection["candidates"],
            "threads": threads}


# --- the runtimes run by hand, with their defaults -----------------------------------------------

class Subject:
    """One model to time: ``call()`` is the hot path on the fixed timing input, ``predict(feeds)``
    its (first) output as a numpy array; ``spins``: its runtime's workers spin on after a call
    (ONNX Runtime with a pool), so the next model's block waits for them
    (:mod:`tfopt.optimizer.benchmark.idle`)."""

    def __init__(self, label: str, call: Callable[[], object],
                 predict: Callable[[dict], np.ndarray], note: str = "", spins: bool = False):
        self.label, self.call, self.predict, self.note = label, call, predict, note
        self.spins = spins


def _single_input(feeds: dict) -> np.ndarray:
    [value] = feeds.values()
    if value.dtype.kind in "SUO":
        value = np.array([[t.decode() if isinstance(t, bytes) else str(t) for t in row]
                          for row in value], dtype=object)
    return value


def runner_subject(label: str, runner, timing_feeds: dict, note: str = "") -> Subject:
    # bound, so that the chosen model is called as bare as the runtimes run by hand are
    call = runner.bind(runner.to_tensors(timing_feeds))
    key = runner.signature.output_keys[0]
    return Subject(label, call, lambda feeds: runner(feeds)[key], note,
                   spins=runner.spins_after_call)


FLOOR = "floor"


def floor_subject(stock, timing_feeds: dict) -> Subject:
    """The stock model's inputs through :func:`common.identity_call`: ``p50(stock) /
    p50(floor)`` is the most the savedmodel-only line can reach on a family
    (``benchmarks/string_lookup.py --bindings`` measures it alone)."""
    return Subject(FLOOR, identity_call(stock.to_tensors(timing_feeds)), lambda feeds: None,
                   note="an identity function of the inputs, called as the SavedModels are")


def _cached(path: Path, make: Callable[[Path], None]) -> Path:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(path.name + ".partial")
        if staging.is_dir():  # left by a conversion that failed or was stopped
            shutil.rmtree(staging)
        staging.unlink(missing_ok=True)
        make(staging)
        staging.rename(path)
    return path


def convert_ort(src: Path, directory: Path) -> Path:
    """``python -m tf2onnx.convert --saved-model SRC`` (cached)."""
    def convert(out: Path) -> None:
        log = directory / "tf2onnx.log"
        with open(log, "w") as f:
            code = subprocess.run([str(VENV_BIN / "python"), "-m", "tf2onnx.convert",
                                   "--saved-model", str(src), "--output", str(out)],
                                  stdout=f, stderr=subprocess.STDOUT, check=False).returncode
        if code != 0 or not out.is_file():
            errors = [line for line in log.read_text().splitlines() if "rror" in line]
            raise RuntimeError(f"tf2onnx exit {code}: "
                               f"{(errors or ['(see ' + str(log) + ')'])[-1][:300]}")

    return _cached(directory / "model.onnx", convert)


def convert_openvino(src: Path, directory: Path) -> Path:
    """``openvino.convert_model(SRC)`` saved as IR (cached), weights as converted."""
    import openvino as ov

    def convert(out: Path) -> None:
        out.mkdir(parents=True)
        ov.save_model(ov.convert_model(str(src)), str(out / "model.xml"),
                      compress_to_fp16=False)

    return _cached(directory / "openvino_ir", convert)


def convert_litert(src: Path, directory: Path) -> Path:
    """``TFLiteConverter.from_saved_model(SRC).convert()`` with no options (cached)."""
    import tensorflow as tf

    def convert(out: Path) -> None:
        out.write_bytes(tf.lite.TFLiteConverter.from_saved_model(str(src)).convert())

    return _cached(directory / "model.tflite", convert)


BY_HAND_CONVERSIONS = {"ort": convert_ort, "openvino": convert_openvino, "litert": convert_litert}


def ort_subject(src: Path, directory: Path, timing_feeds: dict) -> Subject:
    """tf2onnx's command line on the SavedModel, then a default ONNX Runtime session."""
    import onnxruntime as ort

    path = convert_ort(src, directory)
    session = ort.InferenceSession(str(path))
    name = session.get_inputs()[0].name
    fixed = {name: _single_input(timing_feeds)}
    # a default session spins where it has a pool (intra-op threads: all cores)
    return Subject("ort", lambda: session.run(None, fixed),
                   lambda feeds: session.run(None, {name: _single_input(feeds)})[0],
                   note=f"ORT {ort.__version__}, default session",
                   spins=session.get_session_options().intra_op_num_threads != 1)


def openvino_subject(src: Path, directory: Path, timing_feeds: dict) -> Subject:
    """``openvino.convert_model`` on the SavedModel, compiled for CPU with no config. The IR is
    cached with its weights as converted (``compress_to_fp16=False``: what convert_model hands
    to compile_model in memory)."""
    import openvino as ov

    path = convert_openvino(src, directory)
    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(path / "model.xml")), "CPU")
    request = compiled.create_infer_request()
    fixed = {0: _single_input(timing_feeds)}
    precision = compiled.get_property("INFERENCE_PRECISION_HINT")
    precision = precision.to_string() if hasattr(precision, "to_string") else str(precision)
    return Subject("openvino", lambda: request.infer(fixed, share_inputs=True),
                   lambda feeds: np.array(request.infer({0: _single_input(feeds)})[0]),
                   note=f"OpenVINO {ov.__version__.split('-')[0]}, CPU defaults "
                        f"(precision {precision}, {compiled.get_property('INFERENCE_NUM_THREADS')}"
                        f" threads)")


def litert_subjects(src: Path, directory: Path, timing_feeds: dict, cpus: int) -> list[Subject]:
    """``TFLiteConverter.from_saved_model`` with no options, then ai_edge_litert's Interpreter
    with its default threads and with ``num_threads`` = the CPUs available. Called as the
    chosen LiteRT model is (:class:`tfopt.optimizer.runtime.litert.SignatureCall`, bound): the
    interpreter's ``SignatureRunner`` spends ~4 us a call in Python (resize, re-allocate, dicts)
    on a 3 us model (``benchmarks/litert_calls.py``), which would compare call code, not
    models."""
    from ai_edge_litert.interpreter import Interpreter

    from tfopt.optimizer.runtime.litert import SignatureCall

    path = convert_litert(src, directory)
    subjects = []
    [key] = timing_feeds
    for label, threads in (("litert", None), (f"litert {cpus}t", cpus)):
        interpreter = Interpreter(model_path=str(path), num_threads=threads)
        signature_call = SignatureCall(interpreter, "serving_default", [key])

        def predict(feeds, signature_call=signature_call):
            return next(iter(signature_call.call([np.asarray(feeds[key])]).values()))

        predict(timing_feeds)
        subjects.append(Subject(label, signature_call.bind([np.asarray(timing_feeds[key])]),
                                predict, note=f"threads {threads or 'default'}, bound call"))
    return subjects


# --- measuring one family ---------------------------------------------------------------------

def _quality(family: Family, workdir: Path, stock_signature, subjects: list[Subject],
             quick: bool) -> dict:
    """Per label: held-out top-1 (digits, lstm_trained); else max abs diff and top-1 agreement
    vs stock."""
    if family.eval_data:
        from tfopt.optimizer.verify.evaluation import top1

        data = np.load(workdir / family.eval_data)
        x, y = data["x"], data["y"]
        if quick:
            x, y = x[:100], y[:100]
        key = stock_signature.inputs[0].key
        out = {}
        for s in subjects:
            scores = np.concatenate([s.predict({key: x[i:i + 1]}) for i in range(len(x))])
            out[s.label] = {"top1": top1(scores, y)}  # per row, or per position (a tagger's)
        return out
    inputs = [family.feeds(stock_signature, 100 + i)
              for i in range(2 if quick else FIDELITY_INPUTS)]
    reference = [np.asarray(subjects[0].predict(f), dtype=np.float64) for f in inputs]
    scale = max(float(np.max(np.abs(r))) for r in reference)
    out = {}
    for s in subjects[1:]:
        got = [np.asarray(s.predict(f), dtype=np.float64).reshape(r.shape)
               for f, r in zip(inputs, reference)]
        diff = max(float(np.max(np.abs(g - r))) for g, r in zip(got, reference))
        agree = np.concatenate([(np.argmax(g, -1) == np.argmax(r, -1)).ravel()
                                for g, r in zip(got, reference)])
        out[s.label] = {"max_abs_diff": diff, "max_rel_diff": diff / scale if scale else None,
                        "top1_agreement": float(np.mean(agree))}
    return out


def _chosen_subject(label: str, run: dict, feeds: dict, stock_signature, cpus: int,
                    timing_feeds: dict) -> tuple[Subject | None, dict]:
    from tfopt.optimizer.benchmark.thread_choice import choose_threads
    from tfopt.optimizer.runtime import load_runner, runtime_for

    chosen = run["chosen"]
    if chosen is None:
        return None, {"label": None, "why": run.get("error") or "the gate chose nothing"}
    fmt, path = chosen["format"], chosen["path"]
    threads, source = run["threads"], "runtime_settings.json"
    if runtime_for(fmt).per_model_threads and threads is None:
        threads, _ = choose_threads(path, "serving_default", fmt, feeds, cpus)
        source = "choose_threads here"
    runner = load_runner(path, format=fmt, num_threads=threads)
    row = next((r for r in run["rows"] if r["label"] == chosen["label"]), {})
    info = {"label": chosen["label"], "format": fmt, "path": path,
            "threads": runner.num_threads, "threads_from": source if runner.num_threads else None,
            "gate_speedup": row.get("speedup"), "optimize_seconds": run["seconds"]}
    return runner_subject(label, runner, timing_feeds,
                          note=f"{chosen['label']} ({fmt}, threads "
                               f"{runner.num_threads or 'process'})"), info


def prepare_family(family: Family, args, say) -> tuple[Path, dict]:
    """Everything but the timing, cached in the family's work directory: the stock model, the
    two ``tfopt optimize`` runs and the by-hand conversions (a conversion that fails is only
    reported here; the timing phase lists it). Returns the stock model and the runs."""
    workdir = args.workdir / family.name
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    src = family.export(workdir)
    eval_data = workdir / family.eval_data if family.eval_data else None
    say(f"stock model {src} ({time.perf_counter() - started:.0f}s)")
    suffix = "_quick" if args.quick else ""
    runs = {label: run_optimize(src, workdir / f"{name}{suffix}", targets, eval_data,
                                argparse.Namespace(**{**vars(args), "optimize": args.optimize
                                                      and label in args.runs}), say)
            for label, (name, targets) in OPTIMIZE_RUNS.items()}
    direct = workdir / "direct"
    direct.mkdir(exist_ok=True)
    for label, convert in BY_HAND_CONVERSIONS.items():
        try:
            convert(src, direct)
        except Exception as exc:  # noqa: BLE001 - listed as failed when timing
            say(f"{label} by hand: conversion failed: {_one_line(exc)}")
    return src, runs


def measure_family(family: Family, args, cpus: int, say) -> dict:
    from tfopt.optimizer.benchmark.interleaved import (
        DEFAULT_BLOCK_SECONDS,
        scaled_block_size,
        time_interleaved,
    )
    from tfopt.optimizer.benchmark.stats import p50_ratio_interval
    from tfopt.optimizer.runtime import load_runner

    workdir = args.workdir / family.name
    src, runs = prepare_family(family, args, say)
    stock = load_runner(src)
    timing_feeds = family.feeds(stock.signature, 1)
    subjects = [runner_subject("stock", stock, timing_feeds, note="SavedModel signature call")]
    chosen, failed = {}, {}
    for label, run in runs.items():
        try:
            subject, chosen[label] = _chosen_subject(label, run, timing_feeds, stock.signature,
                                                     cpus, timing_feeds)
            if subject is not None:
                subjects.append(subject)
        except Exception as exc:  # noqa: BLE001 - a benchmark lists what failed and goes on
            chosen[label] = {"label": run["chosen"]["label"], "why": _one_line(exc)}
            failed[label] = _one_line(exc)
    direct = workdir / "direct"
    for label, make in (("ort", lambda: [ort_subject(src, direct, timing_feeds)]),
                        ("openvino", lambda: [openvino_subject(src, direct, timing_feeds)]),
                        ("litert", lambda: litert_subjects(src, direct, timing_feeds, cpus))):
        try:
            made = make()
            for s in made:
                s.predict(timing_feeds)  # it runs, or it is listed as failed
            subjects += made
        except Exception as exc:  # noqa: BLE001
            failed[label] = _one_line(exc)
            if label == "openvino":  # its messages open with C++ source locations
                from tfopt.optimizer.runtime.openvino import condense_openvino_error

                named = [line.strip() for line in str(exc).splitlines()
                         if "Conversion is failed for:" in line]
                failed[label] = (f"{type(exc).__name__}: "
                                 f"{named[0] if named else condense_openvino_error(str(exc))}")
            say(f"{label} by hand failed: {failed[label]}")
            if args.verbose:
                traceback.print_exc()

    say("quality ...")
    quality = {}
    try:
        quality = _quality(family, workdir, stock.signature, subjects, args.quick)
    except Exception as exc:  # noqa: BLE001
        failed["quality"] = _one_line(exc)
        say(f"quality failed: {failed['quality']}")
    subjects.append(floor_subject(stock, timing_feeds))  # timed, not scored
    # as the gate's benchmark does: a slow model (ResNet50) is timed one call per round
    block_size = scaled_block_size([s.call for s in subjects], BLOCK_SIZE, DEFAULT_BLOCK_SECONDS)
    load_before = os.getloadavg()
    say(f"timing {', '.join(s.label for s in subjects)} in blocks of {block_size} for at least "
        f"{args.seconds:.0f}s and {args.rounds} rounds (load {load_before[0]:.2f}) ...")
    started = time.perf_counter()
    samples = time_interleaved({s.label: s.call for s in subjects}, warmup=5,
                               min_runs=args.rounds, min_seconds=args.seconds,
                               rotate_order=True, block_size=block_size,
                               progress=lambda r, t: say(f"  {r} rounds, {t:.0f}s"),
                               progress_every=30,
                               wait_idle_after=[s.label for s in subjects if s.spins])
    timed_seconds = time.perf_counter() - started
    base = samples["stock"].round_figures
    rows = []
    for s in subjects:
        interval = (p50_ratio_interval(base, samples[s.label].round_figures)
                    if s.label != "stock" else None)
        figures = samples[s.label].round_figures
        rows.append({"label": s.label, "note": s.note,
                     "p50_ms": float(np.median(figures)) * 1e3,
                     "round_ms": [round(float(x) * 1e3, 6) for x in figures],
                     "speedup": interval.speedup if interval else 1.0,
                     "speedup_ci95": [1 / interval.high, 1 / interval.low] if interval
                     else [1.0, 1.0],
                     **quality.get(s.label, {})})
    result = {"family": family.name, "stock": str(src), "rows": rows, "chosen": chosen,
              "failed": failed, "rounds": samples["stock"].rounds, "block_size": block_size,
              "timed_seconds": timed_seconds, "cpus": cpus,
              "load_average_before": load_before, "load_average_after": os.getloadavg(),
              "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "run": args.run}
    for s in subjects:
        s.call = s.predict = None
    del subjects, stock
    gc.collect()
    return result


def _one_line(exc: BaseException) -> str:
    """The exception's telling line: a converter's last ``error:`` line (its first ones are
    MLIR locations), else its first."""
    lines = [line.strip() for line in str(exc).replace("\\n", "\n").splitlines()
             if line.strip()]
    errors = [line for line in lines if "error:" in line and "loc(" not in line]
    return f"{type(exc).__name__}: {(errors or lines or [''])[-1 if errors else 0]}"[:300]


# --- printing and the targets -----------------------------------------------------------------

DIRECT = ("ort", "openvino", "litert")


def _row(result: dict, label: str) -> dict | None:
    return next((r for r in result["rows"] if r["label"] == label), None)


def _speedup(result: dict, label: str) -> float | None:
    row = _row(result, label)
    return row["speedup"] if row else None


def _best_direct(result: dict) -> dict | None:
    rows = [r for r in result["rows"] if r["label"].split(" ")[0] in DIRECT]
    return min(rows, key=lambda r: r["p50_ms"], default=None)


def _quality_text(row: dict | None) -> str:
    if row is None:
        return "-"
    if "top1" in row:
        return f"top1 {row['top1']:.4f}"
    if "max_abs_diff" in row:
        return f"{row['max_abs_diff']:.1e} / {row['top1_agreement']:.0%}"
    return "-"


def _cell(result: dict, label: str, interval: bool = False) -> str:
    row = _row(result, label)
    if row is None:
        why = result["failed"].get(label.split(" ")[0]) or \
            result["chosen"].get(label, {}).get("why", "not run")
        if why == "not run":
            return "-"
        if why == "the gate chose nothing":
            return "1.00x (stock)"
        return "not run" if why.startswith("not run") else "failed"
    return _interval_text(row) if interval else f"{row['speedup']:.2f}x"


def print_table(results: dict) -> None:
    print("| family | stock p50 ms | all targets: chosen | speedup | savedmodel only: chosen | "
          "speedup | ORT | OpenVINO | LiteRT | LiteRT all CPUs | quality (stock; all; "
          "savedmodel; ORT; OpenVINO; LiteRT) | rounds | load |")
    print("|---|---:|---|---:|---|---:|---:|---:|---:|---:|---|---:|---|")
    for name, r in results.items():
        stock = _row(r, "stock")
        chosen = {k: (v.get("label") or "none") + (f" ({v['threads']}t)" if v.get("threads")
                                                    else "")
                  for k, v in r["chosen"].items()}
        litert_all = next((x["label"] for x in r["rows"] if x["label"].startswith("litert ")),
                          f"litert {r['cpus']}t")
        quality = "; ".join(_quality_text(_row(r, label)) for label in
                            ("stock", "all targets", "savedmodel only", "ort", "openvino",
                             "litert"))
        load = r["load_average_before"]
        print(f"| {name} | {stock['p50_ms']:.3f} | {chosen.get('all targets', '-')} | "
              f"{_cell(r, 'all targets', True)} | {chosen.get('savedmodel only', '-')} | "
              f"{_cell(r, 'savedmodel only', True)} | {_cell(r, 'ort')} | {_cell(r, 'openvino')} | "
              f"{_cell(r, 'litert')} | {_cell(r, litert_all)} | {quality} | {r['rounds']} | "
              f"{load[0]:.2f} |")
    for name, r in results.items():
        for label, why in r["failed"].items():
            print(f"{name}: {label} failed: {why}")
        for label, c in r["chosen"].items():
            if c.get("label") is None:
                print(f"{name}: {label}: nothing chosen: {c.get('why')}")
    print()
    for line in check_targets(results):
        print(line)


def _not_run(result: dict, label: str) -> bool:
    """Whether the ``tfopt optimize`` run behind ``label`` was not run (``--no-optimize``)."""
    return str(result["chosen"].get(label, {}).get("why", "")).startswith("not run")


def versus_best_by_hand(result: dict) -> dict | None:
    """Our all-targets choice (the stock call when the gate chose nothing or it failed to
    load) against the fastest runtime run by hand (lowest p50), paired round by round in the
    family's one timing group: ``p50(best by hand) / p50(ours)`` as the median of per-round
    ratios, with its 95% block-bootstrap interval (:func:`p50_ratio_interval`, as the gate's).

    The verdict: ``faster`` when the whole interval is above 1, ``slower`` when it is all
    below 1, else ``tie`` (the interval reaches 1: at least as fast, not shown faster)."""
    from tfopt.optimizer.benchmark.stats import p50_ratio_interval

    best = _best_direct(result)
    ours = _row(result, "all targets") or _row(result, "stock")
    if best is None or "round_ms" not in best:
        return None
    interval = p50_ratio_interval(best["round_ms"], ours["round_ms"])
    low, high = 1 / interval.high, 1 / interval.low
    verdict = "faster" if low > 1 else "slower" if high < 1 else "tie"
    return {"ours": ours["label"], "ours_ms": ours["p50_ms"], "best": best["label"],
            "best_ms": best["p50_ms"], "ratio": interval.speedup, "ci95": [low, high],
            "verdict": verdict}


def _ceiling_text(result: dict) -> str:
    floor = _row(result, FLOOR)
    if floor is None:
        return ""
    return (f" (ceiling: an identity function through the same call is "
            f"{_interval_text(floor)} the stock call)")


def _interval_text(row: dict) -> str:
    low, high = row["speedup_ci95"]
    return f"{row['speedup']:.2f}x [{low:.2f}, {high:.2f}]"


def check_targets(results: dict) -> list[str]:
    """Issue 12's targets on these rows (one run's, when printed at the end of a run)."""
    lines, verdicts = [], []
    for name, r in results.items():
        if _not_run(r, "all targets"):
            lines.append(f"  {name}: tfopt optimize with all targets not run; not counted")
            continue
        versus = versus_best_by_hand(r)
        if versus is None:
            lines.append(f"  {name}: no runtime by hand timed (or no rounds saved); "
                         f"not counted")
            continue
        verdicts.append(versus["verdict"])
        ours = r["chosen"].get("all targets", {}).get("label") or "stock (nothing chosen)"
        low, high = versus["ci95"]
        lines.append(f"  {name}: ours {ours} {versus['ours_ms']:.4g} ms vs best by hand "
                     f"{versus['best']} {versus['best_ms']:.4g} ms: {versus['ratio']:.2f}x "
                     f"[{low:.2f}, {high:.2f}] -> {versus['verdict']} "
                     f"({'ok' if versus['verdict'] != 'slower' else 'FAIL'})")
    counted = len(verdicts)
    out = [(f"{'PASS' if 'slower' not in verdicts else 'FAIL'} all targets: on every family "
            f"ours is at least as fast as the best runtime run by hand (p50(best)/p50(ours), "
            f"paired 95% interval: 'faster' all above 1, 'slower' all below 1, else a tie, "
            f"which counts as at least as fast)") if counted else
           "NOT CHECKED all targets: at least as fast as the best by hand", *lines]
    wins = verdicts.count("faster")
    if counted:
        out.append(f"{'PASS' if wins * 2 >= counted else 'FAIL'} all targets: faster than "
                   f"the best by hand on {wins} of {counted} families (target: at least "
                   f"half; a tie is not faster)")
    for name, what in (("lstm", "LSTM (random weights, fidelity-gated)"),
                       ("lstm_trained", "LSTM (trained, held-out accuracy)")):
        if name in results and not _not_run(results[name], "all targets"):
            row = _row(results[name], "all targets")
            s = row["speedup"] if row else 1.0
            out.append(f"{'PASS' if s >= LSTM_TARGET else 'FAIL'} all targets: {what} "
                       f"{_interval_text(row) if row else '1.00x (stock)'} the stock call "
                       f"(target {LSTM_TARGET:g}x, on the point estimate)")
    speedups = {name: _row(r, "savedmodel only") for name, r in results.items()
                if not _not_run(r, "savedmodel only")}
    if speedups:
        misses = [k for k, row in speedups.items()
                  if (row["speedup"] if row else 1.0) < SAVEDMODEL_TARGET]
        out.append(f"{'PASS' if not misses else 'FAIL'} savedmodel only: at least "
                   f"{SAVEDMODEL_TARGET:g}x the stock call on every family (point estimate; "
                   f"below: {', '.join(misses) or 'none'})")
        out += [f"  {k}: {_interval_text(row) if row else '1.00x (nothing chosen: stock)'}"
                f"{' FAIL' if k in misses else ''}{_ceiling_text(results[k])}"
                for k, row in speedups.items()]
    runs = {r.get("run") for r in results.values()}
    if len(runs) > 1:
        out.append(f"NOTE: these rows come from {len(runs)} runs, not one: "
                   + ", ".join(sorted(str(x) for x in runs)))
    return out


# --- main -------------------------------------------------------------------------------------

def _families(parser, text: str) -> list[Family]:
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        parser.error(f"unknown famil{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown)}; "
                     f"choose from {', '.join(FAMILIES)}")
    return [FAMILIES[n] for n in names]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--workdir", type=Path, default=REPO / "work" / "families",
                        help="exported models, conversions, optimize outputs and results")
    parser.add_argument("--seconds", type=float, default=30.0,
                        help="least timed seconds of each family's group")
    parser.add_argument("--rounds", type=int, default=20,
                        help="least rounds (a block of 10 calls of every model each)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 3 timed seconds, 5 rounds, fewer quality inputs, "
                             "optimize's benchmark 3 s (kept apart from the full run's)")
    parser.add_argument("--no-tune", action="store_false", dest="tune",
                        help="run tfopt optimize without --tune (threads: the benchmark's "
                             "1-or-all-CPUs rule, run here)")
    parser.add_argument("--no-optimize", action="store_false", dest="optimize",
                        help="time what is prepared: a tfopt optimize run not finished in "
                             "the work directory is shown as not run, not started")
    parser.add_argument("--prepare", action="store_true",
                        help="export, run tfopt optimize and convert by hand, time nothing: "
                             "run it outside the benchmark lock, then time under it")
    parser.add_argument("--runs", default=",".join(OPTIMIZE_RUNS),
                        type=lambda text: {x.strip() for x in text.split(",")},
                        help="which tfopt optimize runs this invocation may start (the others "
                             "are only read if finished): 'all targets', 'savedmodel only' or "
                             "both; two --prepare processes can then run one each")
    parser.add_argument("--print-only", action="store_true", dest="print_only",
                        help="print the saved results in WORKDIR/families.json, measure nothing")
    parser.add_argument("--memory-gb", type=float, default=None,
                        help="passed to tfopt optimize: its memory budget (a model estimated "
                             "not to fit is refused, a benchmark is timed in groups that fit)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="tracebacks here, and tfopt -v optimize (stage progress in "
                             "DST.log)")
    args = parser.parse_args()
    families = _families(parser, args.families)
    if not args.runs <= set(OPTIMIZE_RUNS):
        parser.error(f"unknown --runs {', '.join(sorted(args.runs - set(OPTIMIZE_RUNS)))}; "
                     f"choose from {', '.join(OPTIMIZE_RUNS)}")
    args.workdir = args.workdir.resolve()
    result_path = args.workdir / RESULT_FILE
    if args.print_only:
        saved = json.loads(result_path.read_text())
        print_table({f.name: saved["families"][f.name] for f in families
                     if f.name in saved["families"]})
        return 0
    if args.quick:
        args.seconds, args.rounds = min(args.seconds, 3.0), min(args.rounds, 5)

    from tfopt.optimizer.system.cpu_threads import apply_runtime_settings, default_runtime_settings

    args.run = time.strftime("%Y-%m-%dT%H:%M:%S%z")  # which rows were timed in one run
    runtime = apply_runtime_settings(default_runtime_settings())  # before TensorFlow starts
    from tfopt.optimizer.tf_runtime import import_tensorflow

    import_tensorflow()
    cpus = runtime.cpus.available
    args.workdir.mkdir(parents=True, exist_ok=True)
    saved = (json.loads(result_path.read_text()) if result_path.is_file()
             else {"families": {}})
    measured = {}
    for family in families:
        def say(message, name=family.name):
            print(f"[{time.strftime('%H:%M:%S')}] {name}: {message}", flush=True)

        started = time.perf_counter()
        if args.prepare:
            try:
                prepare_family(family, args, say)
                say(f"prepared in {time.perf_counter() - started:.0f}s")
            except Exception as exc:  # noqa: BLE001 - the next family still runs
                say(f"FAILED: {_one_line(exc)}")
                traceback.print_exc()
            continue
        try:
            measured[family.name] = measure_family(family, args, cpus, say)
        except Exception as exc:  # noqa: BLE001 - the next family still runs
            say(f"FAILED: {_one_line(exc)}")
            traceback.print_exc()
            continue
        measured[family.name]["quick"] = args.quick
        saved["families"][family.name] = measured[family.name]
        saved.update(command=sys.argv, cpus=cpus)
        result_path.write_text(json.dumps(saved, indent=2) + "\n")
        say(f"done in {time.perf_counter() - started:.0f}s")
    if args.prepare:
        return 0
    print()
    print(f"batch 1, {cpus} CPUs, timed in blocks of up to {BLOCK_SIZE} (one call for a call "
          f"of 50 ms or more), one group per family, all in this one process; "
          f"load average now {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print_table(measured)
    print(f"\nresults: {result_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
