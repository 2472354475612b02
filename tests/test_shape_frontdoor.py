"""The shape of the runtime's front doors and hot path, read from the source (CPU only):

- launch(), matmul and grouped_matmul describe their arrays with the one operand type (operands.describe)
  and check them with the one validator (validate.py); grouped.py imports nothing from api;
- the launch state of a call lives in one launch plan per (execution, stream), its caches under one rule
  (cache.py: CACHE_LIMIT); the hot driver calls have one backend (ctypes) each;
- the modules of this part stay within the size rules (600 lines a module, 80 a function unless its
  docstring says why it stays whole) and carry no timing logs.

A LaunchPlan over a fake execution then shows its parameter sets: packed once per address set, and the
reusable arrays of transient() holding what pack() builds.
"""
from __future__ import annotations

import ast
import ctypes
import re
from pathlib import Path

import pytest

import hgemm_rt

PKG = Path(hgemm_rt.__file__).resolve().parent
# the modules of the front doors and the hot path
FRONT = ("api", "bound", "cache", "call", "device", "dlpack", "_driver", "errors", "grouped", "launcher",
         "launchplan", "memory", "operands", "plans", "registry", "streams", "torch", "validate", "__init__")


def _tree(mod: str) -> ast.Module:
    return ast.parse((PKG / f"{mod}.py").read_text())


def _function(mod: str, qualname: str) -> ast.FunctionDef:
    node: ast.AST = _tree(mod)
    for part in qualname.split("."):
        node = next(n for n in ast.iter_child_nodes(node)
                    if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part)
    return node  # type: ignore[return-value]


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def _imports(mod: str) -> list[tuple[str, str]]:
    out = []
    for node in ast.walk(_tree(mod)):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            out += [(node.module or "", a.name) for a in node.names]
    return out


# -- one operand type, one validator -----------------------------------------------------------------

@pytest.mark.parametrize("mod,fn", [("launcher", "launch_spec"), ("registry", "CublasKernel.__call__"),
                                    ("call", "validate_call"), ("grouped", "grouped_matmul")])
def test_every_front_door_describes_its_arrays_with_the_one_operand_type(mod, fn):
    used = _names_used(_function(mod, fn))
    assert used & {"describe", "describe_device"}, f"{mod}.{fn} does not go through operands.describe"
    assert not used & {"as_device_array", "from_cai", "from_dlpack"}, f"{mod}.{fn} builds its own descriptor"


@pytest.mark.parametrize("mod,fn,rules", [
    ("launcher", "launch_spec", {"validate_operands", "check_flag"}),
    ("registry", "CublasKernel.__call__", {"validate_operands"}),
    ("call", "validate_call", {"fp32_scalar", "validate_out", "one_device", "check_activation", "check_option",
                               "accumulate_code"}),
    ("grouped", "grouped_matmul", {"fp32_scalar", "validate_out", "one_device", "check_activation", "accumulate_code",
                                   "check_group_index"}),
])
def test_every_front_door_checks_with_the_one_validator(mod, fn, rules):
    assert rules <= _names_used(_function(mod, fn)), rules - _names_used(_function(mod, fn))
    imported = {name for src, name in _imports(mod) if src == "validate"}
    assert rules <= imported, f"{mod} takes {rules - imported} from elsewhere than validate.py"


def test_grouped_imports_nothing_from_api_and_nothing_private():
    edges = _imports("grouped")
    assert not [e for e in edges if e[0] == "api"], edges
    assert not [e for e in edges if e[1].startswith("_")], edges


def test_the_shared_rules_are_defined_once():
    rules = {"fp32_scalar", "validate_out", "self_overlapping", "one_device", "check_activation", "cai_stream"}
    where: dict[str, list[str]] = {}
    for path in PKG.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") in rules:
                where.setdefault(node.name.lstrip("_"), []).append(path.stem)
    assert all(len(v) == 1 for v in where.values()) and set(where) == rules, where


def test_the_cai_stream_is_read_in_one_place():
    readers = [p.stem for p in PKG.glob("*.py") if re.search(r"""\.get\(["']stream["']\)""", p.read_text())]
    assert readers == ["streams"], readers


# -- one launch plan, one cache rule, one backend per hot call ---------------------------------------

def test_no_cache_of_its_own_in_the_hot_path_modules():
    """Every cache of these modules is a cache.Cache (one eviction rule, CACHE_LIMIT); none of the old
    per-object limits, OrderedDicts or lru_caches remain."""
    for mod in ("api", "bound", "plans", "launchplan", "launcher", "operands"):
        text = (PKG / f"{mod}.py").read_text()
        assert "OrderedDict" not in text and "lru_cache" not in text and "popitem" not in text, mod
        assert not re.search(r"^\s*(MAX_\w+|\w+_PER_\w+|REUSED_\w+)\s*=", text, re.M), mod
    execution = ast.get_source_segment((PKG / "executor.py").read_text(), _function("executor", "Execution"))
    assert "OrderedDict" not in execution and "threading.local" not in execution


def test_the_hot_driver_calls_have_one_backend():
    """The per-call driver functions go through ctypes (native()) only, with no cuda-python fallback beside
    them: no function calls one of them both ways, and the launch path calls none through cuda-python."""
    from hgemm_rt._driver import NATIVE_PROTOTYPES

    for mod in ("api", "bound", "launcher", "launchplan", "operands", "streams", "device", "memory"):
        text = (PKG / f"{mod}.py").read_text()
        assert "lib is None" not in text and "via_bindings" not in text, mod
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.FunctionDef):
                continue
            calls = [n for n in ast.walk(node) if isinstance(n, ast.Attribute) and n.attr in NATIVE_PROTOTYPES]
            native = {n.attr for n in calls if not (isinstance(n.value, ast.Call) and _names_used(n.value) == {"driver"})
                      and not (isinstance(n.value, ast.Name) and n.value.id == "drv")}
            bindings = {n.attr for n in calls} - native
            assert not native & bindings, f"{mod}.{node.name} calls {native & bindings} both ways"
    for mod in ("bound", "launchplan", "streams", "operands"):
        text = (PKG / f"{mod}.py").read_text()
        assert not re.search(r"(driver\(\)|drv)\.(cuLaunchKernelEx|cuGraphLaunch|cuStreamIsCapturing|cuEventRecord|"
                             r"cuStreamWaitEvent)", text), mod


def test_no_module_of_this_part_imports_another_ones_privates():
    for mod in FRONT:
        bad = [e for e in _imports(mod) if e[1].startswith("_") and not e[1].startswith("__")]
        assert not bad, (mod, bad)


# -- sizes and comments ------------------------------------------------------------------------------

@pytest.mark.parametrize("mod", FRONT + ("executor",))
def test_module_and_function_sizes(mod):
    path = PKG / f"{mod}.py"
    lines = path.read_text().splitlines()
    assert len(lines) <= 600, f"{mod}.py has {len(lines)} lines"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            size = node.end_lineno - node.lineno + 1
            doc = ast.get_docstring(node) or ""
            assert size <= 80 or "stays whole" in doc, f"{mod}.{node.name} is {size} lines"


@pytest.mark.parametrize("mod", FRONT + ("executor",))
def test_no_timing_log_in_comments(mod):
    comments = [line.split("#", 1)[1] for line in (PKG / f"{mod}.py").read_text().splitlines() if "#" in line]
    logs = [c for c in comments if re.search(r"\d\s*->\s*[\d.]+", c) and re.search(r"\bus\b", c)]
    assert not logs, logs


# -- a launch plan over a fake execution -------------------------------------------------------------

class _FakeLaunch:
    """A KernelLaunch stand-in: records the (parameter address, config) of each launch."""

    def __init__(self):
        self.launched: list = []
        self.configs = 0

    def config(self, stream):
        self.configs += 1
        return object(), ctypes.c_void_p(stream or None)

    def bind(self, params, config):
        return lambda: self.launched.append((params.address, config)) or 0

    def check_launch(self, code):
        raise AssertionError(code)


def _fake_execution():
    from hgemm_rt.launcher import ArrayRef
    from hgemm_rt.manifest import kernel_spec_from_dict

    spec = kernel_spec_from_dict({
        "name": "hgemm_fake", "family": "t", "ladder": "mma", "layout": "NN", "dtype": "f16", "out": "f16",
        "block": [128], "tile": [64, 64, 32], "grid": "tiles", "params": ["ptr:A", "ptr:B", "ptr:C", "i32:M"]})

    class Step:
        refs = {"A": (0, (4, 4), (8, 2), [0, 64]), "B": (1, (4, 4), (8, 2), [0, 0]), "C": (2, (4, 4), (8, 2), [0, 32])}

    class Execution:  # the parts of executor.Execution a LaunchPlan uses
        dtype, parts, steps, closed = "f16", 2, [Step()], False

        def __init__(self):
            kl = _FakeLaunch()
            self.launches = [kl, kl]

        def packers_for(self, alpha, beta):
            from hgemm_rt.launcher import ParamPacker

            return [ParamPacker(spec, {"M": 7})]

        def base(self, ptrs, where):
            return ptrs[where] if isinstance(where, int) and where < len(ptrs) else 0

        def pack(self, ptrs, alpha, beta):
            packers = self.packers_for(alpha, beta)
            return [packers[0].pack({n: ArrayRef(self.base(ptrs, w) + off[part], s, st, "f16")
                                     for n, (w, s, st, off) in Step.refs.items()}) for part in range(self.parts)]

    return Execution()


def _words(packed):  # the three pointers and the int32, read through the void* array a launch passes
    return [ctypes.string_at(packed.array[i], 8 if i < 3 else 4) for i in range(4)]


def test_a_launch_plan_packs_once_per_address_set_and_builds_its_configs_once():
    from hgemm_rt.launchplan import LaunchPlan

    ex = _fake_execution()
    plan = LaunchPlan(ex, 0x77)
    assert ex.launches[0].configs == 1  # (one kernel launched twice: one config for the stream)
    first = plan.packed_set((0x1000, 0x2000, 0x3000, 0), 1.0, 0.0)
    assert plan.packed_set((0x1000, 0x2000, 0x3000, 0), 1.0, 0.0) is first
    assert first.key == (0x1000, 0x2000, 0x3000, 0, 0x77)  # (Bound.run's key of a repeat on these buffers)
    assert first.plan is plan and len(first.launches) == 2
    other = plan.packed_set((0x1100, 0x2000, 0x3000, 0), 1.0, 0.0)
    assert other is not first
    for launch, _kernel in first.launches:
        assert launch() == 0
    assert [config for _, config in ex.launches[0].launched] == plan.configs


def test_transient_parameter_arrays_hold_what_pack_builds():
    from hgemm_rt.launchplan import LaunchPlan

    ex = _fake_execution()
    plan = LaunchPlan(ex, 0)
    for ptrs in ((0x1000, 0x2000, 0x3000, 0), (0x5000, 0x6000, 0x7000, 0)):
        launches = plan.transient(ptrs, 2.0, 0.0)
        launches[0][0]()
        launches[1][0]()
        reused = plan._reused.sets.entries[(2.0, 0.0)][2]
        assert [_words(p) for p in reused] == [_words(p) for p in ex.pack(ptrs, 2.0, 0.0)]
    assert plan.transient((1, 2, 3, 0), 2.0, 0.0) is launches  # (the same arrays, set in place)


class Closable:
    """A cache value that notes its closing in `closed`."""

    def __init__(self, i, closed):
        self.i, self.closed = i, closed

    def close(self):
        self.closed.append(self.i)


def test_the_cache_rule_evicts_the_oldest_and_closes_it():
    from hgemm_rt.cache import CACHE_LIMIT, Cache

    closed = []
    cache = Cache()
    for i in range(CACHE_LIMIT + 2):
        cache.put(i, Closable(i, closed))
    assert closed == [0, 1] and len(cache.entries) == CACHE_LIMIT
    cache.hit(2)  # refreshed: the next eviction takes 3
    cache.put("new", Closable("new", closed))
    assert closed == [0, 1, 3]
    cache.close()
    assert len(closed) == CACHE_LIMIT + 3 and not cache.entries


def test_the_plan_cache_keeps_at_most_executions_limit_executions_allocated():
    """Executions own GPU buffers: the plan cache closes the oldest past EXECUTIONS_LIMIT (the other caches keep
    CACHE_LIMIT), so many distinct shapes do not pile up temporaries."""
    from hgemm_rt.cache import CACHE_LIMIT, EXECUTIONS_LIMIT
    from hgemm_rt.plans import PlanCache

    assert EXECUTIONS_LIMIT < CACHE_LIMIT
    closed = []
    cache = PlanCache()
    for i in range(EXECUTIONS_LIMIT + 3):
        cache._executions.put(i, Closable(i, closed))
    assert closed == [0, 1, 2] and len(cache.executions) == EXECUTIONS_LIMIT
    assert cache._recipes.limit == cache._calls.limit == CACHE_LIMIT


def test_bound_run_sets_new_addresses_in_place_packs_a_repeat_then_launches_its_graph(monkeypatch):
    """Bound.run's states on a fake launch plan: new addresses launch through the transient arrays, the same
    ones twice in a row through their kept parameter set, and from GRAPH_AFTER_REPEATS repeats on through
    one graph; a closed plan is never launched again."""
    from hgemm_rt import bound as bound_mod
    from hgemm_rt.launchplan import LaunchPlan, PackedSet

    ex = _fake_execution()
    plans_made = []

    def plan(stream):
        plans_made.append(LaunchPlan(ex, stream))
        return plans_made[-1]

    ex.plan = plan
    monkeypatch.setattr(bound_mod.plans, "execution", lambda recipe, prob, device, stream: ex)
    monkeypatch.setattr(bound_mod, "may_capture", lambda stream: False)
    graphs = []

    def build_graph(self, stream):
        graphs.append(self)
        self.graph, self.graph_launch = "graph", lambda: graphs.append("launch") or 0
    monkeypatch.setattr(PackedSet, "build_graph", build_graph)

    b = object.__new__(bound_mod.Bound)
    b.fixed_stream, b.stream_fn, b.waits, b.device, b.plan, b.graph_pays = 5, None, False, 0, None, True
    b.alpha, b.beta, b.recipe, b.problem = 1.0, 0.0, None, None
    b.extents = ((0, 32), (0, 32), (0, 32), None)
    b.last = PackedSet((None,), None, None, ())
    kl = ex.launches[0]
    out = object()
    states = []
    for i in range(8):
        before = len(kl.launched)
        assert b.run(0x1000, 0x2000, out, 0x3000) is out
        states.append("graph" if graphs and graphs[-1] == "launch" and len(kl.launched) == before else
                      "packed" if b.last.packed is not None else "transient")
    assert states == ["transient", "packed", "packed", "packed", "graph", "graph", "graph", "graph"]
    assert len(plans_made) == 1 and b.last.key == (0x1000, 0x2000, 0x3000, 0, 5)
    b.run(0x1100, 0x2000, out, 0x3000)  # new addresses: the transient arrays again
    assert b.last.packed is None and len(plans_made) == 1
    plans_made[0].close()
    b.run(0x1100, 0x2000, out, 0x3000)  # its plan closed (plans.clear()): a new plan
    assert len(plans_made) == 2 and b.plan is plans_made[1]
    with pytest.raises(hgemm_rt.ValidationError, match="out overlaps an input"):
        b.run(0x1000, 0x2000, out, 0x1010)


def test_two_threads_first_calls_on_one_stream_get_the_one_plan_close_closes(monkeypatch):
    """Two threads making an execution's plan for one stream at once get the same LaunchPlan: a second plan,
    replaced in the cache, would stay open after Execution.close() and launch on the freed temporaries."""
    import threading
    import time

    from hgemm_rt.cache import Cache
    from hgemm_rt.executor import Execution

    slow = _FakeLaunch()

    def config(stream):  # (a slow first plan: both threads inside plan() at once)
        time.sleep(0.05)
        return object(), ctypes.c_void_p(stream or None)

    monkeypatch.setattr(slow, "config", config)
    ex = object.__new__(Execution)
    ex.launches, ex.plans, ex.temps, ex.closed = [slow], Cache(), {}, False
    ex._plan_lock = threading.Lock()
    start, got = threading.Barrier(2), []

    def first_call():
        start.wait()
        got.append(ex.plan(9))

    threads = [threading.Thread(target=first_call) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got[0] is got[1]
    ex.close()
    assert all(plan.closed for plan in got)
