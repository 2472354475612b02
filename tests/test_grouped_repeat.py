"""grouped_matmul's repeat path (hgemm_rt/grouped.py: repeat_key, GroupedCall) on the CPU: a fake Hopper device, a
fake build (one grouped kernel, its recipe a placeholder) and a fake execution that records every launch, so what a
repeat call checks, skips and launches is seen without a GPU or a build. (The grouped recipe itself:
tests/test_shape_roles.py.)

A call is kept under the operands' cheap identities (operands.KEYERS), the low address bits and the options; a
repeat launches the kept plan on the new addresses, checks out against the inputs, and refuses what the first call
refuses. (On the GPU: tests/test_grouped.py.)
"""
from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

import hgemm_rt as hg
from hgemm_rt import DeviceArray, grouped
from hgemm_rt import operands as ops
from hgemm_rt.errors import ArgumentTypeError, ValidationError
from hgemm_rt.grouped import repeat_key
from hgemm_rt.launchplan import PackedSet

E, T, K, N = 4, 100, 64, 32


class FakeIndex:
    """A device int32 vector (its __cuda_array_interface__), with a cheap identity registered in operands.KEYERS."""

    def __init__(self, ptr, stream=None):
        self.ptr = ptr
        self.__cuda_array_interface__ = {"data": (ptr, False), "typestr": "<i4", "shape": (E,), "version": 3}
        if stream is not None:
            self.__cuda_array_interface__["stream"] = stream


class FakePlan:
    """A launch plan that records (addresses, alpha, beta, stream) per launch instead of launching."""

    def __init__(self, execution, stream):
        self.execution, self.stream, self.closed = execution, stream, False

    def packed_set(self, ptrs, alpha, beta):
        log = self.execution.log
        return PackedSet((*ptrs, self.stream), self.execution, [],
                         ((lambda: log.append((ptrs, alpha, beta, self.stream)) or 0, None),), self)


class FakeExecution:
    def __init__(self, log, device):
        self.log, self.device, self.plans = log, device, {}

    def plan(self, stream):
        return self.plans.setdefault(stream, FakePlan(self, stream))

    def run(self, ptrs, alpha, beta, stream):
        self.log.append((ptrs, alpha, beta, stream))


@pytest.fixture
def gpu(monkeypatch, fresh_plans):
    """The fake Hopper: `gpu.log` the launches, `gpu.planned` how many calls were planned in full, `gpu.waits` the
    producer streams waited for; results of out=None at `gpu.next_result` (then 4 KiB further each)."""
    state = SimpleNamespace(log=[], planned=0, waits=[], next_result=7 << 36)
    dev = SimpleNamespace(info=SimpleNamespace(cc=(9, 0), name="H100", sm_count=132))
    monkeypatch.setattr(grouped, "get_device", lambda device=0: dev)
    monkeypatch.setattr(grouped, "get_registry", lambda: SimpleNamespace(manifest=None))
    monkeypatch.setattr(grouped, "grouped_kernel", lambda manifest, dtype, layout: SimpleNamespace(name="grouped"))
    monkeypatch.setattr(grouped, "grouped_recipe", lambda prob, manifest: SimpleNamespace(prob=prob))
    executions = {}

    def execution(recipe, prob, device, stream):
        state.planned += 1
        return executions.setdefault(device, FakeExecution(state.log, device))

    def empty(cls, shape, dtype="f16", device=0):
        ptr, state.next_result = state.next_result, state.next_result + 4096
        return DeviceArray(ptr, tuple(shape), dtype)

    monkeypatch.setattr(hg.plans, "execution", execution)
    monkeypatch.setattr(DeviceArray, "empty", classmethod(empty))
    monkeypatch.setattr(grouped, "wait_for", lambda s, producer, device: state.waits.append((s, producer)))
    monkeypatch.setitem(ops.KEYERS, FakeIndex, lambda g: (g.ptr, ("fake int32", g.__cuda_array_interface__["shape"],
                                                                  g.__cuda_array_interface__.get("stream"))))
    return state


def _x(ptr=1 << 36):
    return DeviceArray(ptr, (T, K), "f16")


def _w(ptr=2 << 36):
    """(E, K, N) as the transposed view of an (E, N, K) weight stack."""
    return DeviceArray(ptr, (E, K, N), "f16", (N * K * 2, 2, K * 2))


def _out(ptr=3 << 36):
    return DeviceArray(ptr, (T, N), "f16")


def test_a_repeat_call_is_launched_without_being_validated_or_planned_again(gpu):
    x, w, out, ends = _x(), _w(), _out(), FakeIndex(5 << 36)
    for _ in range(3):
        assert hg.grouped_matmul(x, w, out=out, offsets=ends, alpha=0.5) is out
    assert gpu.planned == 1 and repeat_key(x, w, out, offsets=ends, alpha=0.5) in hg.plans.calls
    assert gpu.log == [((x.ptr, w.ptr, out.ptr, 0, ends.ptr), 0.5, 0.0, 0)] * 3
    # new arrays of the same descriptions and alignments: the kept call, on their addresses
    x2, w2, out2, ends2 = _x(9 << 36), _w(10 << 36), _out(11 << 36), FakeIndex(12 << 36)
    hg.grouped_matmul(x2, w2, out=out2, offsets=ends2, alpha=0.5)
    assert gpu.planned == 1 and gpu.log[-1] == ((x2.ptr, w2.ptr, out2.ptr, 0, ends2.ptr), 0.5, 0.0, 0)


@pytest.mark.parametrize("change", ["alignment", "alpha", "stream", "counts", "activation"])
def test_another_alignment_or_option_is_another_call(gpu, change):
    x, w, out, ends = _x(), _w(), _out(), FakeIndex(5 << 36)
    hg.grouped_matmul(x, w, out=out, offsets=ends)
    if change == "alignment":
        hg.grouped_matmul(_x((1 << 36) + 16), w, out=out, offsets=ends)
    elif change == "alpha":
        hg.grouped_matmul(x, w, out=out, offsets=ends, alpha=2.0)
    elif change == "stream":
        hg.grouped_matmul(x, w, out=out, offsets=ends, stream=7)
        assert gpu.log[-1][3] == 7
    elif change == "counts":
        hg.grouped_matmul(DeviceArray(1 << 36, (E, 25, K), "f16"), w, out=DeviceArray(3 << 36, (E, 25, N), "f16"),
                          counts=ends)
    else:
        hg.grouped_matmul(x, w, out=DeviceArray(3 << 36, (T, N // 2), "f16"), offsets=ends, activation="swiglu")
    assert gpu.planned == 2


def test_out_overlapping_an_input_on_a_repeat_is_refused_as_on_a_first_call(gpu):
    x, w, ends = _x(), _w(), FakeIndex(5 << 36)
    inside_x = _out(x.ptr + 1024)  # (the same low address bits as the kept call's out)
    with pytest.raises(ValidationError) as first:
        hg.grouped_matmul(x, w, out=inside_x, offsets=ends)
    hg.grouped_matmul(x, w, out=_out(), offsets=ends)
    for bad, what in ((inside_x, "A"), (_out(w.ptr), "B")):
        with pytest.raises(ValidationError, match=re.escape(f"grouped_matmul: out overlaps {what} in memory")) as e:
            hg.grouped_matmul(x, w, out=bad, offsets=ends)
        if what == "A":
            assert str(e.value) == str(first.value)
    assert len(gpu.log) == 1  # (nothing launched for a refused call)


def test_a_repeat_still_refuses_what_the_first_call_refuses(gpu):
    x, w, out, ends = _x(), _w(), _out(), FakeIndex(5 << 36)
    hg.grouped_matmul(x, w, out=out, offsets=ends, alpha=1)
    with pytest.raises(ArgumentTypeError, match="alpha must be a real number"):
        hg.grouped_matmul(x, w, out=out, offsets=ends, alpha=True)  # (True == 1: the key holds the scalars' types)
    with pytest.raises(ValidationError, match="exactly one of"):
        hg.grouped_matmul(x, w, out=out, offsets=ends, counts=ends, alpha=1)
    out.memory_live[0] = False
    with pytest.raises(ValidationError, match="closed"):
        hg.grouped_matmul(x, w, out=out, offsets=ends, alpha=1)
    assert len(gpu.log) == 1


def test_out_none_returns_a_new_result_each_call(gpu):
    x, w, ends = _x(), _w(), FakeIndex(5 << 36)
    results = [hg.grouped_matmul(x, w, offsets=ends) for _ in range(3)]
    assert len({r.ptr for r in results}) == 3 and all(r.shape == (T, N) for r in results)
    assert [launch[0][2] for launch in gpu.log] == [r.ptr for r in results] and gpu.planned == 1
    gpu.next_result += 16  # a result of other low address bits: planned for it in full
    odd = hg.grouped_matmul(x, w, offsets=ends)
    assert gpu.planned == 2 and gpu.log[-1][0][2] == odd.ptr and odd.ptr % 256 == 16


def test_an_index_that_names_a_producer_stream_is_waited_for_on_every_call(gpu):
    x, w, out = _x(), _w(), _out()
    for _ in range(3):
        hg.grouped_matmul(x, w, out=out, offsets=FakeIndex(5 << 36, stream=9))
    assert gpu.waits.count((0, 9)) == 3 and gpu.planned == 1


def test_a_closed_launch_plan_or_cleared_plans_are_planned_again(gpu):
    x, w, out, ends = _x(), _w(), _out(), FakeIndex(5 << 36)
    hg.grouped_matmul(x, w, out=out, offsets=ends)
    hg.plans.calls[repeat_key(x, w, out, offsets=ends)].plan.closed = True  # (its execution evicted)
    hg.grouped_matmul(x, w, out=out, offsets=ends)
    assert gpu.planned == 2 and len(gpu.log) == 2
    hg.plans.clear()
    assert repeat_key(x, w, out, offsets=ends) not in hg.plans.calls
    hg.grouped_matmul(x, w, out=out, offsets=ends)
    assert gpu.planned == 3 and len(gpu.log) == 3


def test_calls_without_a_cheap_identity_are_not_kept(gpu):
    x, w, out = _x(), _w(), _out()
    assert repeat_key(x, w, out, offsets=np.array([10, 20, 30, 100], np.int32)) is None  # (uploaded every call)
    assert repeat_key(x, w, out, offsets=FakeIndex(5 << 36)) is not None
    assert repeat_key(np.zeros((T, K), np.float16), w, out, offsets=FakeIndex(5 << 36)) is None
    assert repeat_key(x, w, out, offsets=FakeIndex(5 << 36), stream=[7]) is None  # (unhashable)
    key = repeat_key(x, w, out, offsets=FakeIndex(5 << 36))
    assert key[0] == grouped.GROUPED and key not in hg.plans.calls  # (apart from matmul's keys: theirs start
    # with a description)
