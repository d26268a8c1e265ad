"""A program that writes into its inputs, run as the reference on the harness's buffers: the guard
finds it at the first call, puts the inputs back as they were filled, and hands every later call
copies; one that does not is called on the buffers themselves, untouched. CPU tensors stand in for
the GPU's (the guard is the same code on both)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from cuco_tui.workload.program.inplace import InputGuard  # noqa: E402


def in_place(grad, x):
    grad.mul_(2.0)  # an all_reduce in place, as PKB's 30 does
    return grad, x + 1


def pure(grad, x):
    return grad * 2.0, x + 1


def test_a_program_writing_into_its_inputs_gets_copies_and_the_inputs_stay_as_filled():
    grad, x = torch.tensor([1.0, 2.0]), torch.tensor([5.0])
    guard = InputGuard(torch, ["grad", "x"])
    for _ in range(3):  # every call sees the inputs as filled: the answer never drifts
        out, _ = guard.call(in_place, [grad, x])
        assert out.tolist() == [2.0, 4.0]
        assert grad.tolist() == [1.0, 2.0] and x.tolist() == [5.0]
    assert guard.mutates is True
    assert guard.warning() == ("solution writes into its input(s) grad: each call is given copies of its inputs, "
                               "and the copy is timed with it")
    # refilled buffers (the next check's inputs) reach the copies
    grad.copy_(torch.tensor([3.0, 4.0]))
    assert guard.call(in_place, [grad, x])[0].tolist() == [6.0, 8.0]


def test_a_program_that_leaves_its_inputs_alone_runs_on_them_without_copies():
    grad, x = torch.tensor([1.0, math.nan]), torch.tensor([5], dtype=torch.int32)
    guard = InputGuard(torch, ["grad", "x"])
    guard.call(lambda g, y, n: pure(g, y), [grad, x, 3])  # NaNs in place and a plain value: no write seen
    assert guard.mutates is False and guard.warning() == "" and guard.copies == []
    calls = []
    guard.call(lambda *a: calls.append(a), [grad, x])
    assert calls[0][0] is grad  # the buffer itself, not a copy


def test_a_named_tuple_result_that_is_a_written_input_comes_back_as_what_was_computed():
    from collections import namedtuple

    Grads = namedtuple("Grads", "a b")
    grad = torch.tensor([1.0, 2.0])

    def named(g):
        g.add_(1.0)
        return Grads(g, g * 10)

    out = InputGuard(torch, ["grad"]).call(named, [grad])
    assert isinstance(out, Grads) and out.a.tolist() == [2.0, 3.0] and out.b.tolist() == [20.0, 30.0]
    assert grad.tolist() == [1.0, 2.0]
