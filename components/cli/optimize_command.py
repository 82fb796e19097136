"""tfopt optimize SRC DST: freeze, apply a GTT recipe or search for a cheaper equivalent graph,
check the outputs, write if they match."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import get_args

from tfopt.components.cli.call_deadline_flag import (
    add_model_call_seconds_argument,
    apply_call_deadline,
)
from tfopt.components.cli.model_scan_flags import add_allow_op_argument, scan_policy
from tfopt.components.cli.optimize_targets import add_arguments as add_target_arguments
from tfopt.components.cli.output import human_bytes, op_histogram_table, table
from tfopt.components.cli.settings_flags import setting_flag
from tfopt.optimizer.benchmark.settings import BenchmarkConfig
from tfopt.optimizer.optimize.recipe import RECIPES
from tfopt.optimizer.search.settings import SearchSettings
from tfopt.optimizer.verify.tolerance import Tolerance

STRATEGIES = get_args(SearchSettings.model_fields["strategy"].annotation)
COSTS = get_args(SearchSettings.model_fields["cost"].annotation)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "optimize", help="apply a Graph Transform Tool recipe to a SavedModel",
        description="Freeze one signature of SRC, apply a recipe of graph transforms (GTT's "
                    "--transforms syntax, or a YAML recipe file), compare the result with SRC "
                    "on the same inputs, and write it to DST with the same signature only if "
                    "the outputs agree within the tolerance.",
        epilog='Example: tfopt optimize model/ fast/ --transforms "strip_unused_nodes '
               'remove_nodes(op=Identity, op=CheckNumerics) fold_constants(ignore_errors=true) '
               'fold_batch_norms fold_old_batch_norms"; or, searching graph substitutions: '
               'tfopt optimize model/ fast/ --strategy relaxed --alpha 1.05 --budget 500 '
               '--time-budget 600')
    p.add_argument("src", help="SavedModel directory")
    p.add_argument("dst", help="SavedModel directory to create (with --targets: a directory "
                               "holding the chosen candidate)")
    recipe = p.add_mutually_exclusive_group()
    recipe.add_argument("--recipe", choices=tuple(RECIPES), metavar="NAME",
                        help=f"a named recipe: {', '.join(RECIPES)} (default: inference; "
                             "gtt_inference with --backend native)")
    recipe.add_argument("--transforms", metavar="RECIPE",
                        help="transforms in GTT syntax, e.g. 'fold_constants(ignore_errors=true) "
                             "fold_batch_norms'")
    recipe.add_argument("--recipe-file", dest="recipe_file", metavar="FILE.yaml",
                        help="YAML recipe: a list of transforms, or a mapping with transforms, "
                             "tolerance and backend")
    # the flag's old name: `tfopt run` and `tfopt step` take --config as the pipeline's file
    recipe.add_argument("--config", dest="recipe_file", help=argparse.SUPPRESS)
    p.add_argument("--strategy", choices=("recipe", *STRATEGIES), default="recipe",
                   help="recipe (default): apply --recipe, --transforms or --recipe-file; "
                        "greedy: substitution "
                        "search keeping only cheaper graphs; relaxed: also keep graphs up to "
                        "--alpha x the best cost, which can enable later wins")
    # --alpha and the tolerance default to None: given or not matters (greedy refuses an alpha;
    # a recipe file's tolerance applies unless a flag overrides it). Their help names the
    # setting's default.
    p.add_argument("--alpha", type=float, **setting_flag(
        SearchSettings, "alpha", "{description}; >= 1", default=None))
    p.add_argument("--budget", type=int, **setting_flag(SearchSettings, "budget"))
    p.add_argument("--time-budget", type=float, dest="time_budget", metavar="SECONDS",
                   **setting_flag(SearchSettings, "time_budget"))
    p.add_argument("--cost", choices=COSTS, **setting_flag(
        SearchSettings, "cost", "search: per-op cost model, cached on disk, or every candidate "
                                "measured end to end"))
    p.add_argument("--remeasure-top", type=int, dest="remeasure_top", metavar="K",
                   **setting_flag(SearchSettings, "remeasure_top",
                                  "search: time the returned graph, the input and the next K-1 "
                                  "cheapest end to end and keep the fastest (0: trust the "
                                  "cost)"))
    p.add_argument("--signature", **setting_flag(BenchmarkConfig, "signature",
                                                 "signature to optimize"))
    p.add_argument("--overwrite", action="store_true", help="replace DST if it exists")
    p.add_argument("--atol", type=float, **setting_flag(
        Tolerance, "atol", "largest absolute output difference accepted: the {description}, "
                           "unless the recipe file gives one", default=None))
    p.add_argument("--rtol", type=float, default=None,
                   help=Tolerance.model_fields["rtol"].description)
    p.add_argument("--min-top1", type=float, default=None, dest="min_top1",
                   help=Tolerance.model_fields["min_top1"].description)
    p.add_argument("--backend", choices=("python", "native"), default=None,
                   help="run the transforms in this package (python, default) or through "
                        "TensorFlow's C++ Graph Transform Tool (native)")
    p.add_argument("--trace", metavar="FILE.json",
                   help="write what each transform did (nodes, ops, bytes, seconds) as JSON")
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of text")
    p.add_argument("--memory-gb", type=float, default=None, dest="memory_gb", metavar="GIB",
                   help="memory budget where no cgroup limit applies (default: the machine's "
                        "memory); a model estimated not to fit is refused (exit 7), a "
                        "benchmark that does not fit is timed in groups that do")
    add_allow_op_argument(p)
    add_model_call_seconds_argument(p)
    add_target_arguments(p)
    p.set_defaults(run=run)


def _search_settings(args):
    """None for the recipe strategy; else the checked settings (a bad value is exit 2)."""
    from tfopt.optimizer.transforms.base import TransformConfigError

    if args.strategy == "recipe":
        return None
    if args.recipe is not None or args.transforms is not None or args.recipe_file is not None:
        raise TransformConfigError("--recipe, --transforms and --recipe-file apply only to "
                                   "--strategy recipe")
    if args.backend is not None:
        raise TransformConfigError("--backend applies only to --strategy recipe")
    if args.strategy == "greedy" and args.alpha not in (None, 1.0):
        raise TransformConfigError("--strategy greedy is alpha = 1; --alpha applies only to "
                                   "--strategy relaxed")
    chosen = {"alpha": args.alpha} if args.alpha is not None else {}
    return SearchSettings(strategy=args.strategy, budget=args.budget,
                          time_budget=args.time_budget, cost=args.cost,
                          remeasure_top=args.remeasure_top, **chosen)


def _recipe(args):
    """The recipe the flags name; none named: the inference recipe (GTT's own with the native
    backend, whose C++ tool lacks this package's transforms)."""
    from tfopt.optimizer.optimize.recipe import Recipe
    from tfopt.optimizer.optimize.recipe_yaml import load_recipe_file
    from tfopt.optimizer.transforms.base import TransformConfigError

    if args.recipe_file is not None:
        return load_recipe_file(args.recipe_file)
    if args.transforms is not None:
        if args.transforms.strip() in RECIPES:
            raise TransformConfigError(f"{args.transforms.strip()!r} is a named recipe, not a "
                                       f"transform: use --recipe {args.transforms.strip()}")
        return Recipe.from_string(args.transforms)
    if args.recipe is not None:
        return Recipe.named(args.recipe)
    return Recipe.default(args.backend)


def _tolerance(args, recipe):
    given = {k: getattr(args, k) for k in ("atol", "rtol", "min_top1")
             if getattr(args, k) is not None}
    return (recipe.tolerance or Tolerance()).replaced(**given)


def _trace_table(trace) -> str:
    rows = []
    for step in trace:
        ops = " ".join(f"{op}{d:+d}" for op, d in step.op_delta.items()) or "-"
        rows.append([step.transform, f"{step.nodes_before} -> {step.nodes_after}",
                     f"{human_bytes(step.bytes_before)} -> {human_bytes(step.bytes_after)}",
                     f"{step.seconds:.2f}", ops])
    return table(["transform", "nodes", "graph size", "seconds", "ops"], rows)


def _search_trace_table(trace, input_cost: float) -> str:
    rows = [["0", "(input)", f"{input_cost:.4g}"]]
    rows += [[str(i), step.substitution, f"{step.cost:.4g}"]
             for i, step in enumerate(trace, start=1)]
    return table(["step", "substitution", "cost after"], rows)


def _print_search(search: dict, trace) -> None:
    stats = search["stats"]
    print(f"search       {stats['expansions']} expansions, {stats['generated']} candidates "
          f"generated, {stats['kept']} kept, {stats['duplicates']} duplicates, "
          f"{stats['invalid']} invalid, {stats['oversized']} oversized in "
          f"{stats['wall_seconds']:.1f}s (stopped by {stats['stopped_by']})")
    print(f"cost         {search['cost_name']}: {search['input_cost']:.4g} (input) -> "
          f"{search['cost']:.4g}")
    print(f"returned     {search['returned']}" + (f" ({len(search['rejected'])} candidates "
                                                   f"failed the equivalence check)"
                                                   if search["rejected"] else ""))
    if search["measured"]:
        measured = ", ".join(f"{m['graph']} {m['measured_seconds'] * 1e3:.3g} ms"
                             for m in search["measured"])
        print(f"measured     p50 end to end: {measured}")
    print("substitutions")
    print(_search_trace_table(trace, search["input_cost"]))


def _print_result(result) -> None:
    original, candidate = result.original, result.candidate.model
    print(f"recipe       {result.candidate.recipe}")
    print(f"backend      {result.candidate.backend}")
    print(f"signature    {original.signature.describe()}")
    if result.candidate.search is not None:
        _print_search(result.candidate.search, result.candidate.trace)
    else:
        print("trace")
        print(_trace_table(result.candidate.trace))
    print("ops (frozen graph)")
    print(op_histogram_table(original.op_counts(), candidate.op_counts()))
    print(f"graph        {len(original.graph_def.node)} -> {len(candidate.graph_def.node)} nodes, "
          f"{human_bytes(original.size_bytes)} -> {human_bytes(candidate.size_bytes)}")
    print(f"equivalence  {result.report.summary()}")
    print(f"tolerance    {result.tolerance.describe()}: "
          f"{'within' if result.accepted else 'EXCEEDED'}")


def _write_trace(path: str, result) -> None:
    from tfopt.optimizer.errors import DestinationError

    trace = {"recipe": result.candidate.recipe, "backend": result.candidate.backend,
             "steps": [step.to_dict() for step in result.candidate.trace]}
    if result.candidate.search is not None:
        trace["search"] = result.candidate.search
    try:
        Path(path).write_text(json.dumps(trace, indent=2) + "\n")
    except OSError as exc:
        raise DestinationError(f"cannot write trace {path}: {exc.strerror or exc}") from None


def _print_costs(costs: dict, model_bytes: int) -> None:
    """What each stage cost: wall time and the peak memory of the process tree."""
    rows = [[stage, f"{cost.wall_seconds:.1f} s",
             human_bytes(cost.peak_rss_bytes) if cost.peak_rss_bytes is not None else "-"]
            for stage, cost in costs.items()]
    print(f"cost         model {human_bytes(model_bytes)} on disk")
    print(table(["stage", "wall", "peak memory (process tree)"], rows))


def run(args) -> int:
    from tfopt.optimizer.system.process_tree import TreeMeter

    apply_call_deadline(args)  # before any model is called
    costs: dict = {}
    document: dict = {}  # what the text says, for --json: printed once, even on exit 3 or 4
    try:
        with TreeMeter() as whole:
            code = _run(args, costs, document)
    finally:
        if costs:
            costs["total"] = whole.cost
        if args.json and document:
            document["costs"] = {stage: cost.to_dict() for stage, cost in costs.items()}
            print(json.dumps(document, indent=2))
    if not args.json and costs:
        from tfopt.optimizer.model.savedmodel import directory_size

        _print_costs(costs, directory_size(args.src))
    return code


def _stage_of(stages):
    """The library's stages as the command's stage lines name them."""
    from tfopt.optimizer.optimize.with_targets import OPTIMIZE_STAGE, TENSORFLOW_STAGE

    def around(stage: str):
        if stage == TENSORFLOW_STAGE:
            return stages.stage(stage, announce=True)
        return stages.stage("optimize (freeze, transform, check)" if stage == OPTIMIZE_STAGE
                            else stage)

    return around


def _run(args, costs: dict, document: dict) -> int:
    from tfopt.components.cli.optimize_targets import print_outcome, print_precision
    from tfopt.components.cli.stage_lines import stages_of
    from tfopt.optimizer.candidates.build import parse_targets
    from tfopt.optimizer.model.savedmodel import directory_size
    from tfopt.optimizer.optimize.recipe import Recipe
    from tfopt.optimizer.optimize.with_targets import optimize_with_targets

    targets = parse_targets(args.targets) if args.targets is not None else None
    search = _search_settings(args)
    recipe = _recipe(args) if search is None else None
    tolerance = _tolerance(args, recipe or Recipe(()))

    def optimized(result) -> None:
        if args.trace:
            _write_trace(args.trace, result)
        document.update(result.to_dict())
        document.update(saved_model_bytes_before=directory_size(args.src),
                        saved_model_bytes_after=None, written=None)
        if not args.json:
            _print_result(result)
            if not result.accepted:
                print(f"SavedModel   {human_bytes(directory_size(args.src))} (source); "
                      f"nothing written")

    outcome = optimize_with_targets(
        args.src, args.dst, recipe=recipe, search=search, tolerance=tolerance,
        backend=args.backend, signature=args.signature, overwrite=args.overwrite,
        targets=targets, eval_data=args.eval_data, calibration_data=args.calibration_data,
        accuracy_budget=args.accuracy_budget, min_speedup=args.min_speedup,
        seconds=args.seconds, precision_search=args.precision_search, tune=args.tune,
        memory_gb=args.memory_gb, policy=scan_policy(args), around=_stage_of(stages_of(args)),
        on_optimized=optimized, on_precision=None if args.json else print_precision,
        costs=costs)
    document.update(outcome.to_dict())
    if args.json:
        return outcome.exit_code
    if targets is not None:
        print_outcome(outcome, args.src, args.dst)
    else:
        print(f"SavedModel   {human_bytes(outcome.saved_model_bytes_before)} -> "
              f"{human_bytes(outcome.saved_model_bytes_after)}")
        print(f"wrote        {outcome.written}")
    return outcome.exit_code
