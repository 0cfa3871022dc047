"""Every corpus kernel, interpreted, equals its numpy reference."""
from __future__ import annotations

import numpy as np
import pytest
from corpus import CASES, CORPUS, SYMBOLIC_SIZES, check_case

import tdsl

REQUIRED = {"add_broadcast", "relu", "scale", "matmul", "batch_matmul", "matmul_nt", "transpose", "row_sum", "row_max",
            "row_argmax", "softmax", "layernorm", "conv2d_nchw", "depthwise_conv2d", "max_pool2d", "avg_pool2d",
            "im2col", "gather_rows", "matmul_i8", "matmul_u8i8", "fma_f16", "matmul_f16_f32acc", "axpy_f64",
            "add_symbolic", "row_sum_symbolic", "clip_scalars", "let_poly", "leaky_relu_if", "matvec_accumulate",
            "predicated_split", "floor_div_mod", "compare_mask", "math_funcs", "two_stage_root_alloc",
            "nested_blocks"}


def test_corpus_is_complete():
    assert len(CORPUS) >= 30
    assert REQUIRED <= set(CASES)
    assert len(CASES) == len(CORPUS), "case names must be unique"


@pytest.mark.parametrize("name", sorted(CASES))
def test_interpret_matches_numpy(name, rng):
    check_case(CASES[name], tdsl.interpret, rng)


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c.symbolic))
@pytest.mark.parametrize("size", SYMBOLIC_SIZES)
def test_symbolic_kernels_at_several_sizes(name, size, rng):
    case = CASES[name]
    check_case(case, tdsl.interpret, args=case.sizes(size)(rng))


@pytest.mark.parametrize("name", ["matmul", "softmax", "conv2d_nchw", "row_argmax", "add_symbolic"])
def test_outputs_can_be_left_out(name, rng):
    # The outputs of these cases are their trailing parameters and are written before read.
    case = CASES[name]
    args = case.inputs(rng)
    inputs = args[:min(case.outputs)]
    expected = case.reference(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    result = tdsl.interpret(case.func, *inputs)
    results = result if isinstance(result, tuple) else (result,)
    assert len(results) == len(case.outputs)
    for got, want in zip(results, expected):
        np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=case.rtol,
                                   atol=case.atol)


def test_check_case_catches_a_wrong_runner():
    with pytest.raises(AssertionError):
        check_case(CASES["relu"], lambda func, *args: None)

    def clobber_input(func, *args):
        tdsl.interpret(func, *args)
        args[0][0] += 1

    with pytest.raises(AssertionError, match="input 0 was modified"):
        check_case(CASES["relu"], clobber_input)


def test_interpret_takes_a_schedule(rng):
    case = CASES["matmul"]
    check_case(case, lambda func, *args: tdsl.interpret(tdsl.Schedule(func), *args), rng)
