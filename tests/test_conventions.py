"""The ecosystem's conventions on the CPU: accumulate= spellings, one name per option (the old one deprecated),
Matmul as a context manager with close(), explain() for a stated GPU without one, torch-like Event timing and
Stream.record()/wait(), typed public signatures with parameter sections."""
from __future__ import annotations

import inspect
import typing

import numpy as np
import pytest

import hgemm_rt as hg
from hgemm_rt import api, device, planner
from hgemm_rt.call import validate_call
from hgemm_rt.validate import accumulate_code


def host_operands(M=128, N=256, K=64, dtype=np.float16):
    return np.zeros((M, K), dtype), np.zeros((K, N), dtype)


# -- accumulate= ------------------------------------------------------------------------------------------

class FakeTorchDtype:
    """Reads as torch.float32 does (its module and its str), without torch."""

    __module__ = "torch"

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"torch.{self.name}"


@pytest.mark.parametrize("spelling,code", [
    (None, None), ("f32", "f32"), ("fp32", "f32"), ("FP32", "f32"), ("float32", "f32"), ("float", "f32"),
    ("f16", "f16"), ("fp16", "f16"), ("float16", "f16"), ("half", "f16"), ("tf32", "tf32"),
    (np.float32, "f32"), (np.dtype(np.float16), "f16"), (FakeTorchDtype("float32"), "f32"),
    (FakeTorchDtype("float16"), "f16"),
])
def test_accumulate_takes_the_names_and_dtypes_of_torch_and_numpy(spelling, code):
    assert accumulate_code(spelling, "matmul") == code


def test_accumulate_takes_real_torch_dtypes():
    torch = pytest.importorskip("torch")
    assert accumulate_code(torch.float32, "matmul") == "f32" and accumulate_code(torch.float16, "matmul") == "f16"


def test_an_accumulate_alias_makes_the_same_call_as_its_code(manifest):
    a, b = host_operands()
    for alias in ("fp32", np.float32, FakeTorchDtype("float32")):
        assert validate_call(a, b, None, 1.0, 0.0, alias, "auto", None).acc == "f32"
    assert validate_call(a, b, None, 1.0, 0.0, "fp16", "auto", None).acc == "f16"
    assert hg.explain(a, b, accumulate="fp16") == hg.explain(a, b, accumulate="f16")


@pytest.mark.parametrize("bad,error,needle", [
    ("fp64", hg.ValidationError, "is not an accumulation"),
    (np.float64, hg.ValidationError, "is not an accumulation"),
    (3, TypeError, "accumulate must be a string or None"),
    (["f32"], TypeError, "accumulate must be a string or None"),
])
def test_an_unknown_accumulation_is_refused_before_the_operands(bad, error, needle):
    with pytest.raises(error, match=needle):
        validate_call(object(), object(), None, 1.0, 0.0, bad, "auto", None)


def test_an_alias_for_a_dtype_it_does_not_fit_names_the_request(manifest):
    a, b = host_operands(dtype=np.float32)
    with pytest.raises(hg.ValidationError, match="accumulate='f16' is not available for f32 inputs"):
        validate_call(a, b, None, 1.0, 0.0, "fp16", "auto", None)


# -- one name per option -----------------------------------------------------------------------------------

class RecordingMatmul:
    made: list = []

    def __init__(self, *args, **kwargs):
        self.kwargs = kwargs

    def autotune(self, **kwargs):
        RecordingMatmul.made.append(kwargs)
        return []


def test_autotune_takes_save_as_matmul_autotune_does_and_save_result_is_deprecated(monkeypatch):
    monkeypatch.setattr(api, "Matmul", RecordingMatmul)
    RecordingMatmul.made.clear()
    hg.autotune(None, None, save=False)
    with pytest.warns(DeprecationWarning, match="save_result.*use save="):
        hg.autotune(None, None, save_result=False)
    hg.autotune(None, None)
    assert [m["save"] for m in RecordingMatmul.made] == [False, False, True]
    assert "save" in inspect.signature(hg.Matmul.autotune).parameters


# -- Matmul.close() and the context manager --------------------------------------------------------------

class FakeExecution:
    def __init__(self):
        self.closes = 0

    def close(self):
        self.closes += 1


class FakePlan:
    def __init__(self, execution):
        self.execution = execution


class FakeBound:
    def __init__(self, execution):
        self.plan = FakePlan(execution) if execution is not None else None


@pytest.fixture
def cpu_matmul(monkeypatch, manifest):
    """Matmul planned for an H100 without one (the plan cache's recipe() reads the GPU)."""
    def recipe(prob, dev, kernel):
        return planner.heuristic_recipe(prob, manifest, (9, 0), 132, kernel)

    monkeypatch.setattr(api.plans, "recipe", recipe)
    return lambda: hg.Matmul(*host_operands())


def test_close_releases_the_executions_its_calls_ran_once_each_and_refuses_to_run(cpu_matmul):
    mm = cpu_matmul()
    shared, other = FakeExecution(), FakeExecution()
    for key, bound in (("k1", FakeBound(shared)), ("k2", FakeBound(shared)), ("k3", FakeBound(other)),
                       ("k4", FakeBound(None))):  # (a bound that never ran has no plan)
        mm._calls.put(key, bound)
    mm.close()
    assert mm.closed and (shared.closes, other.closes) == (1, 1) and not mm._bound
    mm.close()  # safe twice
    assert (shared.closes, other.closes) == (1, 1)
    with pytest.raises(hg.ValidationError, match="this Matmul is closed"):
        mm()
    with pytest.raises(hg.ValidationError, match="this Matmul is closed"):
        mm(*host_operands())
    with pytest.raises(hg.ValidationError, match="this Matmul is closed"):
        mm.autotune()


def test_matmul_is_a_context_manager_that_closes(cpu_matmul):
    with cpu_matmul() as mm:
        ex = FakeExecution()
        mm._calls.put("k", FakeBound(ex))
        assert not mm.closed and mm.explain()
    assert mm.closed and ex.closes == 1


# -- explain() without a GPU ---------------------------------------------------------------------------------

def test_explain_without_a_gpu_plans_for_the_default_kind(manifest, monkeypatch):
    monkeypatch.setattr(api, "gpu_available", lambda: False)
    a, b = host_operands(4096, 4096, 4096)
    line = hg.explain(a, b)
    assert line.endswith("[planned for H100: sm_90, 132 SMs]")
    assert line == hg.explain(a, b, device="h100")  # a kind's name in any case
    assert hg.explain(a, b, cc=(9, 0), sm_count=132).split("  [")[0] == line.split("  [")[0]
    assert hg.explain(a, b, device="A100").endswith("[planned for A100: sm_80, 108 SMs]")
    assert "sm90" not in hg.explain(a, b, device="A100").split("  [")[0]  # (no Hopper kernel on an A100)
    assert hg.explain(a, b, cc=(8, 9), sm_count=58).endswith("[planned for sm_89, 58 SMs]")


def test_explain_on_a_gpu_machine_is_the_matmul_plan_unless_a_kind_is_stated(manifest, monkeypatch):
    class GpuMatmul:
        def __init__(self, *args, **kwargs):
            pass

        def explain(self):
            return "the GPU's plan"

    monkeypatch.setattr(api, "gpu_available", lambda: True)
    monkeypatch.setattr(api, "Matmul", GpuMatmul)
    a, b = host_operands()
    assert hg.explain(a, b) == "the GPU's plan"
    assert hg.explain(a, b, device="H200").endswith("[planned for H200: sm_90, 132 SMs]")


@pytest.mark.parametrize("kw,error,needle", [
    ({"device": "B300"}, hg.ValidationError, "unknown device kind 'B300'"),
    ({"device": 0}, TypeError, "device must be a GPU kind's name"),
    ({"cc": (9, 0)}, hg.ValidationError, "cc= and sm_count= together"),
    ({"sm_count": 132}, hg.ValidationError, "cc= and sm_count= together"),
    ({"cc": "90", "sm_count": 132}, TypeError, "cc must be a"),
    ({"cc": (9, 0), "sm_count": 0}, TypeError, "sm_count must be a positive integer"),
    ({"device": "H100", "cc": (9, 0), "sm_count": 132}, hg.ValidationError, "not both"),
])
def test_a_stated_device_is_checked(kw, error, needle, manifest):
    with pytest.raises(error, match=needle):
        hg.explain(*host_operands(), **kw)


# -- Event and Stream ----------------------------------------------------------------------------------------

class FakeDriver:
    """The driver calls Event and Stream make (cuda-python's (CUresult, value) returns)."""

    class CUevent_flags:
        CU_EVENT_DEFAULT = 0

    def __init__(self):
        self.calls, self.times, self.next = [], {}, 100

    def cuEventCreate(self, flags):
        self.next += 1
        return 0, self.next

    def cuEventDestroy(self, handle):
        return (0,)

    def cuEventRecord(self, event, stream):
        self.calls.append(("record", event, stream))
        self.times[event] = 2.5 * len(self.calls)
        return (0,)

    def cuEventElapsedTime(self, start, end):
        return 0, self.times[end] - self.times[start]

    def cuStreamWaitEvent(self, stream, event, flags):
        self.calls.append(("wait", stream, event))
        return (0,)


@pytest.fixture
def fake_driver(monkeypatch):
    drv = FakeDriver()
    monkeypatch.setattr(device, "driver", lambda: drv)
    return drv


def fake_stream(handle: int) -> hg.Stream:
    s = hg.Stream.__new__(hg.Stream)  # (a Stream over a given handle: no device)
    s.handle = handle
    return s


def test_event_timing_reads_like_torch_and_elapsed_ms_stays(fake_driver):
    start, end = hg.Event(), hg.Event()
    assert start.record(7) is start and end.record(7) is end
    assert start.elapsed_time(end) == end.elapsed_ms(start) == 2.5
    with pytest.raises(TypeError, match="takes the end Event"):
        start.elapsed_time(1.0)


def test_stream_record_and_wait(fake_driver):
    s, other = fake_stream(11), fake_stream(22)
    ev = s.record()
    assert isinstance(ev, hg.Event) and fake_driver.calls[-1] == ("record", ev.handle, 11)
    mine = hg.Event()
    assert s.record(mine) is mine and fake_driver.calls[-1] == ("record", mine.handle, 11)
    s.wait(mine)
    assert fake_driver.calls[-1] == ("wait", 11, mine.handle)
    s.wait(other)  # another stream: an event recorded on it, waited for here
    (_, recorded, on), (_, waiter, waited) = fake_driver.calls[-2:]
    assert on == 22 and waiter == 11 and waited == recorded
    s.wait(33)  # a raw handle
    assert fake_driver.calls[-2][2] == 33 and fake_driver.calls[-1][:2] == ("wait", 11)
    with pytest.raises(TypeError, match="Stream.record takes an hgemm_rt Event"):
        s.record(5)


# -- typed signatures and parameter sections -----------------------------------------------------------------

PUBLIC = {"matmul": hg.matmul, "Matmul": hg.Matmul, "launch": hg.launch, "explain": hg.explain,
          "autotune": hg.autotune}


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_entries_have_typed_operands_and_a_parameters_section(name):
    fn = PUBLIC[name]
    hints = typing.get_type_hints(fn.__init__ if inspect.isclass(fn) else fn)
    for arg in ("a", "b"):
        assert hints[arg] is not typing.Any and "ndarray" in str(hints[arg])
    if "stream" in hints:
        assert "Stream" in str(hints["stream"])
    doc = inspect.getdoc(fn)
    assert "Parameters\n----------" in doc
    for arg in ("a, b", "accumulate" if name != "launch" else "stream"):
        assert arg in doc.split("Parameters\n----------")[1]


def test_version_is_exported():
    assert isinstance(hg.__version__, str) and "__version__" in hg.__all__


def test_out_is_keyword_only_and_a_positional_out_is_deprecated(monkeypatch):
    """matmul, explain, Matmul, Matmul.__call__, grouped_matmul and autotune take out= by keyword, as torch's
    functions do: a positional out still works, with a DeprecationWarning; one given both ways, or more positional
    arguments, is a TypeError before anything runs."""
    import inspect
    import hgemm_rt as hg
    from hgemm_rt.errors import ArgumentTypeError
    from hgemm_rt.validate import positional_out

    for fn in (hg.matmul, hg.explain, hg.grouped_matmul, hg.autotune, hg.Matmul.__init__, hg.Matmul.__call__):
        assert inspect.signature(fn).parameters["out"].kind is inspect.Parameter.KEYWORD_ONLY, fn
    with pytest.warns(DeprecationWarning, match=r"matmul\(a, b, out\): pass out= by keyword"):
        assert positional_out(("c",), None, "matmul") == "c"
    with pytest.raises(ArgumentTypeError, match="4 positional arguments"):
        positional_out(("c", "d"), None, "matmul")
    with pytest.raises(ArgumentTypeError, match="and out="):
        positional_out(("c",), "c", "matmul")
    seen = []
    monkeypatch.setattr(hg.api, "_first_call", lambda a, b, out, *rest: seen.append(out) or out)
    with pytest.warns(DeprecationWarning):
        assert hg.matmul(object(), object(), "C") == "C"  # (an operand without a cheap identity: the full path)
    assert seen == ["C"]
