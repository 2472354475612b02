"""api.direct_first / direct_repeat, the direct entries hgemm_rt.torch calls (CPU: nothing here launches).

A direct entry's first call takes only the operands of its product (refused before anything is described or
planned); its repeat calls are kept under keys of their own, apart from matmul's and from each other's, with the
linear entry's weight keyed as it is; a repeat runs the kept call at the new addresses."""
from __future__ import annotations

import numpy as np
import pytest

import hgemm_rt as hg
from hgemm_rt import api
from hgemm_rt.errors import ValidationError


def _f16(*shape):
    return np.zeros(shape, dtype=np.float16)


REFUSED = {  # entry, a, b, bias: refused by the entry itself (matmul would take some of them)
    "mm 3-D a": ("mm", _f16(2, 4, 5), _f16(5, 3), None),
    "mm 1-D b": ("mm", _f16(4, 5), _f16(5), None),
    "mm bias": ("mm", _f16(4, 5), _f16(5, 3), _f16(3)),
    "linear 3-D weight": ("linear", _f16(4, 5), _f16(2, 3, 5), None),
    "linear bias (1, N)": ("linear", _f16(4, 5), _f16(3, 5), _f16(1, 3)),
    "linear bias (M, 1)": ("linear", _f16(4, 5), _f16(3, 5), _f16(4, 1)),
    "linear bias of K": ("linear", _f16(4, 5), _f16(3, 5), _f16(5)),
    "no such entry": ("matmul", _f16(4, 5), _f16(5, 3), None),
}


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_a_direct_entry_refuses_what_its_product_does_not_take(case, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("described or planned before the refusal")

    monkeypatch.setattr(api, "Matmul", never)
    entry, a, b, bias = REFUSED[case]
    with pytest.raises(ValidationError, match="direct|entry"):
        api.direct_first(entry, a, b, bias)


class _Kept:
    """A stand-in for a kept call (bound.Bound): records the addresses it is run at."""

    def __init__(self):
        self.runs = []

    def run(self, pa, pb, out, pc, pbias=0):
        self.runs.append((pa, pb, out, pc, pbias))
        return "result"


class _Array:
    """An operand of a type with a cheap identity (as operands.KEYERS reads a framework's arrays)."""

    def __init__(self, ptr, shape, strides):
        self.ptr, self.shape, self.strides = ptr, shape, strides

    @property
    def T(self):
        return _Array(self.ptr, self.shape[::-1], self.strides[::-1])


@pytest.fixture
def keyed(monkeypatch):
    """_Array's identity in operands.KEYERS: (address, (shape, strides))."""
    monkeypatch.setitem(hg.operands.KEYERS, _Array, lambda x: (x.ptr, (x.shape, x.strides)))


@pytest.mark.usefixtures("keyed")
def test_a_repeat_runs_the_call_kept_under_its_entrys_key(monkeypatch):
    x, w, bias = _Array(0x1000, (4, 8), (16, 2)), _Array(0x2000, (3, 8), (16, 2)), _Array(0x3040, (3,), (2,))
    assert api.direct_repeat("linear", x, w, bias) is None  # nothing kept: nothing runs
    kept = _Kept()
    key = api.direct_identity("linear", x, w, bias)[3]
    monkeypatch.setitem(hg.plans.calls, key, kept)
    x2 = _Array(0x5100, (4, 8), (16, 2))  # a new activation of the same description and alignment
    assert api.direct_repeat("linear", x2, w, bias) == "result"
    assert kept.runs == [(0x5100, 0x2000, None, 0, 0x3040)]
    # another alignment, another description, another entry, no bias: other keys
    for args in (("linear", _Array(0x5102, (4, 8), (16, 2)), w, bias), ("linear", _Array(0x5100, (5, 8), (16, 2)), w,
                 bias), ("mm", x2, w, bias), ("linear", x2, w, None)):
        assert api.direct_repeat(*args) is None, args
    assert len(kept.runs) == 1


@pytest.mark.usefixtures("keyed")
def test_the_entries_keys_are_apart_from_matmuls_and_the_weight_is_keyed_as_it_is():
    x, w = _Array(0x1000, (4, 8), (16, 2)), _Array(0x2000, (3, 8), (16, 2))
    linear = api.direct_identity("linear", x, w)[3]
    mm = api.direct_identity("mm", x, w.T)[3]
    plain = api.repeat_key(x, w.T)
    assert len({linear, mm, plain}) == 3
    assert linear[0] == "linear" and linear[3] == ((3, 8), (16, 2))  # w's description, not its transpose's
    assert mm[0] == "mm" and mm[3] == ((8, 3), (2, 16))


def test_operands_without_a_cheap_identity_are_validated_every_call():
    a, b = _f16(4, 5), _f16(5, 3)  # numpy: copied to the GPU each call, never kept
    assert api.direct_repeat("mm", a, b) is None


class _Plan:
    """A stand-in launch plan on stream 0: records the addresses transient() sets, launches nothing."""

    stream, closed, execution = 0, False, None

    def __init__(self):
        self.ptrs = []

    def transient(self, ptrs, alpha, beta):
        self.ptrs.append(ptrs)
        return ()

    def packed_set(self, ptrs, alpha, beta):
        self.ptrs.append(("packed", *ptrs))
        return hg.launchplan.PackedSet((*ptrs, self.stream), None, ["params"], (), self)


@pytest.mark.parametrize("explicit", [False, True])
def test_a_repeat_allocates_a_torch_result_as_new_result_does(explicit, monkeypatch):
    """Bound.run's torch result on torch's current stream: the template's new_empty of the call's shape, at the
    address the launch is given; with stream= given, ops.new_result (which tells the allocator who writes it)."""
    torch = pytest.importorskip("torch")
    from hgemm_rt.bound import Bound
    from hgemm_rt.operands import Operand

    template = torch.empty(0, dtype=torch.bfloat16)
    like = Operand("A", 0x1000, (4, 8), (16, 2), "bf16", 0, obj=template, framework="torch")
    call = type("Call", (), {"a": like, "b": like, "explicit_stream": explicit, "result_shape": (2, 4, 3),
                            "device": 0})()
    made = []
    monkeypatch.setattr(hg.operands, "new_result",
                        lambda lk, shape, device, stream, foreign: made.append(shape) or lk.obj.new_empty(shape))
    bound = Bound.__new__(Bound)
    bound._describe(call)
    bound.stream_fn, bound.fixed_stream, bound.device, bound.waits = None, 0, 0, False
    bound.alpha, bound.beta, bound.plan = 1.0, 0.0, _Plan()
    bound.last = hg.launchplan.PackedSet((None,), None, None, ())
    out = bound.run(0x1000, 0x2000, None, 0, 0x3000)
    assert out.shape == (2, 4, 3) and out.dtype == torch.bfloat16 and out.is_contiguous()
    assert bound.plan.ptrs == [(0x1000, 0x2000, out.data_ptr(), 0x3000)]
    assert made == ([(2, 4, 3)] if explicit else [])


def test_new_addresses_rewrite_the_transient_record_and_a_repeat_packs():
    """Bound.run on new addresses: the parameters set in place, the last key kept in the Bound's own record (one
    object, rewritten); the same addresses twice in a row: packed for keeps, and the next new ones a new record."""
    from hgemm_rt.bound import Bound

    bound = Bound.__new__(Bound)
    bound.stream_fn, bound.fixed_stream, bound.device, bound.waits = None, 0, 0, False
    bound.alpha, bound.beta, bound.plan, bound.extents = 1.0, 0.0, _Plan(), ((0, 16), (0, 16), (0, 16), None)
    record = bound.last = hg.launchplan.PackedSet((None,), None, None, ())
    out = object()
    for pa in (0x1000, 0x2000):
        assert bound.run(pa, 0x9000, out, 0x5000) is out
    assert bound.last is record and record.key == (0x2000, 0x9000, 0x5000, 0, 0) and record.repeats == 0
    bound.run(0x2000, 0x9000, out, 0x5000)
    packed = bound.last
    assert packed is not record and packed.packed == ["params"] and packed.repeats == 1
    bound.run(0x3000, 0x9000, out, 0x5000)
    assert bound.last is not packed and bound.last.packed is None and packed.key == (0x2000, 0x9000, 0x5000, 0, 0)
    assert bound.plan.ptrs == [(0x1000, 0x9000, 0x5000, 0), (0x2000, 0x9000, 0x5000, 0),
                               ("packed", 0x2000, 0x9000, 0x5000, 0), (0x3000, 0x9000, 0x5000, 0)]
