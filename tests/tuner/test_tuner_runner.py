"""Measuring in an isolated process: a correct candidate is timed, a wrong one fails with the
reason, a hanging one times out, a crash (the child killed) is recorded; the fresh-process pool."""
import os
import signal
import threading
import time

import pytest

import tdsl
from tdsl import T
from tdsl.tuner.pool import LocalPool, WorkerCrashed
from tdsl.tuner.runner import Runner


@T.prim_func
def scale(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    for i in range(256):
        with T.block("B"):
            vi = T.axis.spatial(256, i)
            B[vi] = A[vi] * T.float32(2)


@T.prim_func
def scale_wrong(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    for i in range(256):
        with T.block("B"):
            vi = T.axis.spatial(256, i)
            B[vi] = A[vi] * T.float32(2) + T.float32(0.01)


@T.prim_func
def scale_hang(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    # 2^62 passes: hangs on any host (floats do not reassociate: LLVM keeps every step)
    for r, i in T.grid(T.int64(1 << 62), 256):
        with T.block("B"):
            _vr, vi = T.axis.remap("SS", [r, i])
            B[vi] = B[vi] + A[vi]


def _request(candidate):
    return {"func": scale.script(), "func_hash": tdsl.structural_hash(scale), "candidate": candidate.script(),
            "repeats": 2, "min_sample_s": 0.001, "measure_s": 0.0}


def test_measure_right_wrong_hanging_and_crashing():
    runner = Runner()
    try:
        ok = runner.measure(_request(scale))
        assert "error" not in ok and ok["time"] > 0 and len(ok["times"]) == 2 and ok["machine"]
        wrong = runner.measure(_request(scale_wrong))
        assert wrong["error"].startswith("wrong result: B differs")
        hung = runner.measure(_request(scale_hang), timeout=1.5)
        assert hung["error"].startswith("timeout")
        again = runner.measure(_request(scale))              # a fresh child after the kill
        assert "error" not in again

        def kill_soon():
            time.sleep(1.0)
            os.kill(runner._child.pid, signal.SIGSEGV)

        threading.Thread(target=kill_soon).start()
        crashed = runner.measure(_request(scale_hang), timeout=60)
        assert crashed["error"].startswith("crashed: the measuring process died (signal SIGSEGV)")
    finally:
        runner.close()


def _local():
    return 1


def test_local_pool_runs_calls_and_survives_a_dead_worker():
    with LocalPool(2) as pool:
        assert pool.submit(pow, 2, 10).result(timeout=60) == 1024
        with pytest.raises(WorkerCrashed, match="exit code 3"):
            pool.submit(os._exit, 3).result(timeout=60)
        with pytest.raises(ZeroDivisionError):
            pool.submit(divmod, 1, 0).result(timeout=60)
        slow = pool.submit(time.sleep, 30)
        time.sleep(1.0)
        assert pool.kill_worker(slow)
        with pytest.raises(WorkerCrashed):
            slow.result(timeout=30)
        with pytest.raises(ModuleNotFoundError):                # not importable there: an error, not a hang
            pool.submit(_local).result(timeout=60)
        assert [f.result(timeout=60) for f in [pool.submit(abs, -k) for k in range(4)]] == [0, 1, 2, 3]


def test_retime_times_candidates_in_turns_and_fails_a_wrong_one():
    runner = Runner()
    try:
        answer = runner.measure({"func": scale.script(), "func_hash": tdsl.structural_hash(scale),
                                 "candidates": [scale.script(), scale_wrong.script(), scale.script()],
                                 "rounds": 2, "block_s": 0.0, "min_sample_s": 0.0005})
    finally:
        runner.close()
    assert answer["times"][0] > 0 and answer["times"][2] > 0 and answer["times"][1] is None
    assert answer["errors"]["1"].startswith("wrong result: B differs")
    assert len(answer["rounds"][0]) == 2 and min(answer["rounds"][0]) == answer["times"][0]
