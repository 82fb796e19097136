"""The substitution search's defaults, in one place: the search loop
(:func:`optimizer.search.search.relaxed_search`), the library's ``SearchSettings``
(:mod:`optimizer.optimize.flow`), the pipeline config (``optimize.alpha``, ``optimize.budget``,
``optimize.time_budget_seconds``) and ``tfopt optimize``'s flags all read them from here.

No imports: the CLI reads these while it builds its parser, before any command runs.
"""

# Relaxation: keep graphs up to 5 % costlier than the best found, enough to take the one
# costlier step (a 1x1 convolution enlarged to 3x3) that a later merge pays back.
DEFAULT_ALPHA = 1.05
# Expansions: a ResNet50-sized graph settles well within 500 under the op cost model.
DEFAULT_BUDGET = 500
DEFAULT_TIME_BUDGET_SECONDS = 600.0
