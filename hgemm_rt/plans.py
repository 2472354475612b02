"""The plan cache: the recipe chosen per (device, problem, kernel), the Execution per (device, stream,
problem, route) and the validated repeat calls, under one eviction rule (cache.py: each cache takes its own lock)."""
from __future__ import annotations

import logging
from typing import Any

from . import planner, tuned, tuning
from .cache import EXECUTIONS_LIMIT, Cache
from .device import get_device
from .errors import ValidationError
from .executor import Execution
from .logs import route_log
from .problem import Problem, Recipe
from .registry import get_registry
from .streams import is_capturing

__all__ = ["PlanCache", "plans"]


class PlanCache:
    """Recipes chosen per (device, problem, kernel), executions per (device, stream, problem, route) and
    validated repeat calls: three dicts under cache.py's rule (executions: EXECUTIONS_LIMIT, the others
    CACHE_LIMIT); clear() frees every execution's temporaries."""

    def __init__(self) -> None:
        self._recipes, self._calls = Cache(None), Cache(None)
        self._executions = Cache(limit=EXECUTIONS_LIMIT)  # (evicted: closed, their GPU buffers freed)
        self.recipes, self.executions = self._recipes.entries, self._executions.entries
        self.calls = self._calls.entries  # (the repeat call's one lookup: plans.calls[key])

    def recipe(self, prob: Problem, device: int, kernel: str | None) -> Recipe:
        """The autotuned route if the tuning cache has one for this device and build, else the shipped table's
        for this GPU (hgemm_rt/tuned/), else the cost model's cheapest; a route that cannot run this problem is
        passed over."""
        key = (device, prob.key_str, kernel)
        hit = self.recipes.get(key)
        if hit is not None:
            return hit
        dev = get_device(device)
        manifest = get_registry().manifest
        recipe, source = None, "the cost model"
        if kernel is None:  # measured routes first: the user's autotune cache, then the table shipped for this GPU
            for where, find in (("the tuning cache", lambda: tuning.lookup(dev.info, manifest, prob.key_str)),
                                ("the shipped table", lambda: tuned.lookup(dev.info, manifest, prob))):
                route = find()
                recipe = planner.recipe_for(route, prob, manifest) if route is not None else None
                if recipe is not None:
                    source = where
                    break
        if recipe is None:
            recipe = planner.heuristic_recipe(prob, manifest, dev.info.cc, dev.info.sm_count, kernel)
        if recipe is None and prob.swiglu and prob.batched:
            raise ValidationError(f"matmul: a batched activation='swiglu' runs on the fused Hopper kernels only: out "
                                  f"row-major with rows of a multiple of 16 bytes, on an sm_90 GPU ({prob.key()}); "
                                  "fold the batch into rows, or call it per matrix")
        if recipe is None:
            raise ValidationError(f"matmul: cannot run {prob.key()} on {dev.info.name}: "
                                  f"{planner.why_no_recipe(prob, manifest, dev.info.cc, kernel)}")
        if route_log.isEnabledFor(logging.INFO):
            route_log.info("%s on %s: %s (%s%s)", prob.key(), dev.info.name, planner.describe(recipe), source,
                           f", kernel={kernel}" if kernel else "")
        return self._recipes.put(key, recipe)

    def execution(self, recipe: Recipe, prob: Problem, device: int, stream: int) -> Execution:
        """The Execution of `recipe` for calls on `stream` (made on first use: its temporaries allocated)."""
        key = (device, stream, prob.key_str, recipe.route)
        ex = self._executions.hit(key)
        if ex is not None and not ex.closed:
            return ex
        if recipe.temps and is_capturing(stream):
            raise ValidationError("matmul: this call needs temporary buffers that are allocated on its first run; "
                                  "call it once outside the CUDA-graph capture, then capture it")
        return self._executions.put(key, Execution(recipe, prob.dtype, device, get_registry().manifest))

    def remember(self, key: tuple, bound: Any) -> None:
        self._calls.put(key, bound)

    def clear(self) -> None:
        """Forget every choice and call, and free every execution's temporaries."""
        self._executions.close()
        self.recipes.clear()
        self.calls.clear()


plans = PlanCache()
