"""Every kernel of the shared corpus, lowered (as written, and with vectorize/parallel/unroll
schedules), computes what the reference says when the interpreter runs the lowered IR."""
import contextlib

import pytest
from corpus import CORPUS, check_case

import tdsl
from tdsl.ir import Block, collect
from tdsl.ir.verify import verify


def _lower(func, target):
    if target != "cuda":
        return tdsl.lower(func, target=target)
    # the corpus is CPU-style (no thread bindings): run the CUDA pipeline's transforming passes,
    # not its first two, which check that the function is valid for a GPU
    for p in tdsl.lower.passes_for("cuda"):
        if p.name not in ("verify_thread_bindings", "check_thread_exchange"):
            func = p(func)
    return func


def run_lowered(target):
    def runner(func, *args):
        lowered = _lower(func, target)
        assert not collect(lowered.body, Block)
        verify(lowered)
        return tdsl.interpret(lowered, *args)

    return runner


def vectorize_and_parallelize(func):
    """Vectorize each block's innermost loop, unroll the one above, parallelize the outermost,
    wherever the schedule allows it."""
    sch = tdsl.Schedule(func)
    for name in [b.name for b in collect(func.body, Block) if b.name != "root"]:
        loops = sch.get_loops(sch.get_block(name))
        steps = [(sch.vectorize, loops[-1:]), (sch.unroll, loops[-2:-1] if len(loops) > 2 else []),
                 (sch.parallel, loops[:1] if len(loops) > 1 else [])]
        for step, targets in steps:
            for loop in targets:
                with contextlib.suppress(tdsl.ScheduleError):
                    step(loop)
    return sch.func


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.name)
@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_corpus_lowered(case, target):
    check_case(case, run_lowered(target))


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.name)
def test_corpus_scheduled_lowered(case):
    scheduled = vectorize_and_parallelize(case.func)
    check_case(case, lambda func, *args: run_lowered("cpu")(scheduled, *args))
