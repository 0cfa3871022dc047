"""tdsl.tune for CUDA. Without a GPU: every candidate is built for the architecture, verified in
the emulator, statically checked and stored unmeasured; build(database=) uses it. The GPU path
(CUDA events, warm-up, L2 flush, a check on the device, records keyed by the GPU) runs here
against a fake `cuda.bindings.driver` whose device memory is host memory and whose launches
compute the product with numpy (so the tuner's logic is tested; bench/gpu_check.py runs the
real thing on a GPU)."""
import ctypes
import sqlite3
import sys
import warnings

import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.tuner import Database, gpu
from tdsl.tuner.apply import NoTuningRecord
from tdsl.tuner.space import load, replay

pytest.importorskip("cuda.bindings")
from fake_cuda_driver import FakeDriver as BaseFakeDriver


@T.prim_func
def mm(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
    for i, j, k in T.grid(64, 64, 64):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


@T.prim_func
def hmm(A: T.Buffer((64, 64), "float16"), B: T.Buffer((64, 64), "float16"), C: T.Buffer((64, 64), "float32")):
    for i, j, k in T.grid(64, 64, 64):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")


@T.prim_func
def big(A: T.Buffer((1024, 1024), "float32"), B: T.Buffer((1024, 1024), "float32"),
        C: T.Buffer((1024, 1024), "float32")):
    for i, j, k in T.grid(1024, 1024, 1024):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


@pytest.fixture
def no_gpu(monkeypatch, tmp_path):
    from tdsl.backends.cuda import runtime

    monkeypatch.setattr(runtime, "has_gpu", lambda: False)
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TDSL_EMU_OPT", "0")      # small emulated problems: -O0 builds faster
    return tmp_path


def test_without_a_gpu_candidates_are_verified_in_the_emulator_and_stored_unmeasured(no_gpu):
    db_path = no_gpu / "tune.db"
    result = tdsl.tune(mm, target="cuda -arch=sm_80", trials=3, database=db_path, verbose=0)
    task = result.tasks[0]
    assert len(task.records) == 3 and result.best is None          # nothing measured
    for r in task.records:
        assert r.error is None, r.error
        assert r.time is None and r.status == "verified-unmeasured" and r.unmeasured
        assert r.where.startswith("emulator on ")
    assert len(task.verified) == 3 and not task.failures
    with Database(db_path) as db:
        (wl,) = db.workloads()
        assert wl.machine == "unmeasured-sm_80" and wl.target == "cuda -arch=sm_80"
        stored = db.records(wl)
        assert [r.status for r in stored] == ["verified-unmeasured"] * 3 and all(r.time is None for r in stored)
    # a second run adds new candidates, never a record twice
    again = tdsl.tune(mm, target="cuda -arch=sm_80", trials=2, database=db_path, verbose=0)
    keys = [r.candidate for r in again.records]
    assert len(keys) == len(set(keys)) == 5
    # build(database=) takes the first verified record: its schedule, not auto_schedule's fallback
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoTuningRecord)
        kernel = tdsl.build(mm, target="cuda -arch=sm_80", database=db_path)
    first = replay(load(stored[0].trace), mm).func
    assert tdsl.ir.structural_hash(kernel.func) == tdsl.ir.structural_hash(first)


def test_tensor_core_gemm_passes_the_static_checks(no_gpu):
    result = tdsl.tune(hmm, target="cuda -arch=sm_80", trials=1, verbose=0)
    (r,) = result.records
    assert r.error is None and r.status == "verified-unmeasured", r.error
    scheduled = replay(load(r.trace), hmm).func
    kernel = tdsl.build(scheduled, target="cuda -arch=sm_80", emulate=True)
    a, b = (np.random.default_rng(0).standard_normal((64, 64)).astype("float16") for _ in range(2))
    c = np.zeros((64, 64), "float32")
    kernel(a, b, c)
    np.testing.assert_allclose(c, a.astype("float32") @ b.astype("float32"), rtol=1e-2, atol=1e-2)
    problems, _ = gpu.static_problems(kernel, "sm_80")
    assert problems == []
    assert kernel.stats.shared                    # the counters the bank-conflict check read


class _Resources:
    def __init__(self, **r):
        self.resources = {"k": {"registers": 32, "stack": 0, "shared": 0, "local": 0, **r}}
        self.shared = []


class _Kernel:
    def __init__(self, **r):
        self.stats = _Resources(**r)
        self.kernels = []


def test_static_checks_refuse_spills_registers_and_shared_memory():
    assert gpu.static_problems(_Kernel(), "sm_80")[0] == []
    (p,) = gpu.static_problems(_Kernel(registers=256), "sm_80")[0]
    assert "256 registers" in p
    (p,) = gpu.static_problems(_Kernel(local=16, stack=16), "sm_80")[0]
    assert "spills" in p
    (p,) = gpu.static_problems(_Kernel(shared=200 << 10), "sm_80")[0]
    assert "shared memory" in p and "sm_80" in p
    assert gpu.static_problems(_Kernel(shared=200 << 10), "sm_90a")[0] == []


def test_too_large_to_emulate_is_checked_statically_and_says_why(no_gpu):
    result = tdsl.tune(big, target="cuda -arch=sm_80", trials=1, verbose=0)
    (r,) = result.records
    assert r.error is None and r.status == "checked-unmeasured" and r.unmeasured
    assert "too large to emulate" in r.where


def test_without_a_gpu_the_architecture_must_be_named(no_gpu):
    with pytest.raises(tdsl.TargetError, match="-arch=sm_80"):
        tdsl.tune(mm, target="cuda", trials=1, verbose=0)


def test_old_databases_gain_the_status_columns(tmp_path):
    path = tmp_path / "old.db"
    with Database(path):
        pass
    conn = sqlite3.connect(path)          # a file written before CUDA tuning: no status columns
    conn.execute("ALTER TABLE records DROP COLUMN status")
    conn.execute("ALTER TABLE records DROP COLUMN measured_on")
    conn.commit()
    conn.close()
    with Database(path) as db:
        wl = db.workload(mm, "cpu")
        db.add(wl, tdsl.tuner.Record("c", "[]", time=1.0, status="measured", where="here"))
        (r,) = db.records(wl)
        assert (r.status, r.where) == ("measured", "here")


# ---------------------------------------------------------------------------- a fake GPU
class FakeDriver(BaseFakeDriver):
    """The fake driver for tuning: a launch writes A @ B (or a wrong answer) into C, events time
    each launch at 1 us x threads, and flushes and events are logged."""

    def __init__(self):
        super().__init__()
        self.log: list = []          # ("launch", threads) / ("flush", bytes) / ("event",)
        self.wrong = False
        self.pending = 0.0

    def cuEventSynchronize(self, event):
        return self.OK

    def cuMemsetD8(self, ptr, value, n):
        self.log.append(("flush", n))
        return super().cuMemsetD8(ptr, value, n)

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        a, b, c = ((ctypes.c_void_p * 3).from_address(params))
        arrays = [np.frombuffer((ctypes.c_uint8 * (64 * 64 * 4)).from_address(ctypes.c_void_p.from_address(p).value),
                                dtype="float32").reshape(64, 64) for p in (a, b, c)]
        arrays[2][...] = arrays[0] @ arrays[1] + (1.0 if self.wrong else 0.0)
        threads = bx * by * bz
        self.log.append(("launch", threads))
        self.pending = 0.001 * threads
        return self.OK

    def cuEventRecord(self, event, stream):
        self.log.append(("event",))
        return self.OK

    def cuEventElapsedTime(self, start, end):
        return self.OK + (self.pending,)


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    import cuda.bindings

    from tdsl.backends.cuda import runtime
    from tdsl.backends.cuda.nvrtc import nvrtc_version

    nvrtc_version()      # load cuda.bindings.nvrtc (it imports the real driver) first
    drv = FakeDriver()
    monkeypatch.setattr(cuda.bindings, "driver", drv, raising=False)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", drv)
    for attr in ("info", "context", "device", "error"):
        monkeypatch.setattr(runtime._State, attr, None)
    monkeypatch.setattr(runtime._State, "local", __import__("threading").local())
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path / "cache"))
    return drv


def test_on_a_gpu_candidates_are_checked_then_timed_with_events_after_an_l2_flush(fake_gpu, tmp_path):
    result = tdsl.tune(mm, target="cuda", trials=2, database=tmp_path / "gpu.db", verbose=0, repeats=4)
    records = result.records
    assert [r.status for r in records] == ["measured"] * 2, [r.error for r in records]
    for r in records:
        assert r.where == "Fake H200 (sm_90)" and len(r.times) == 4 and r.time == min(r.times)
    assert result.best.record.time == min(r.time for r in records)
    log = fake_gpu.log
    flushes = [k for k, e in enumerate(log) if e[0] == "flush"]
    assert len(flushes) == 8 and all(log[k][1] >= 2 * FakeDriver.L2 for k in flushes)
    for k in flushes:            # each repeat: flush, event, one launch, event
        assert log[k + 1] == ("event",) and log[k + 2][0] == "launch" and log[k + 3] == ("event",)
    with Database(tmp_path / "gpu.db") as db:
        (wl,) = db.workloads()
        assert wl.machine == "Fake H200 (sm_90)" and wl.target == "cuda -arch=sm_90"


def test_a_wrong_result_on_the_gpu_fails_the_candidate(fake_gpu):
    fake_gpu.wrong = True
    result = tdsl.tune(mm, target="cuda", trials=1, verbose=0)
    (r,) = result.records
    assert r.status == "failed" and r.time is None and r.error.startswith("wrong result: C differs")
    assert not [e for e in fake_gpu.log if e[0] == "flush"]      # a wrong candidate is never timed


def test_a_gpu_run_measures_the_records_verified_without_one(no_gpu, monkeypatch, tmp_path):
    db_path = tmp_path / "shared.db"
    tdsl.tune(mm, target="cuda -arch=sm_90", trials=2, database=db_path, verbose=0)
    with Database(db_path) as db:
        pending = [r.candidate for r in db.records(db.workloads()[0])]
    from tdsl.backends.cuda import runtime

    monkeypatch.undo()
    drv = FakeDriver()
    import cuda.bindings

    monkeypatch.setattr(cuda.bindings, "driver", drv, raising=False)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", drv)
    for attr in ("info", "context", "device", "error"):
        monkeypatch.setattr(runtime._State, attr, None)
    monkeypatch.setattr(runtime._State, "local", __import__("threading").local())
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path / "cache2"))
    result = tdsl.tune(mm, target="cuda", trials=2, database=db_path, verbose=0)
    measured = result.records
    assert [r.candidate for r in measured] == pending             # only those, nothing new
    assert all(r.status == "measured" and r.time is not None for r in measured)
    assert all("verified: emulator on" in r.where for r in measured)
    with Database(db_path) as db:
        machines = sorted(w.machine for w in db.workloads())
        assert machines == ["Fake H200 (sm_90)", "unmeasured-sm_90"]
        kernel = tdsl.build(mm, target="cuda", database=db)        # the measured record wins
    best = min(measured, key=lambda r: r.time)
    want = replay(load(best.trace), mm).func
    assert tdsl.ir.structural_hash(kernel.func) == tdsl.ir.structural_hash(want)


def test_without_a_gpu_a_result_that_differs_from_the_unscheduled_function_fails(no_gpu, monkeypatch):
    real = gpu._reference

    def off_by_one(func, seed):
        inputs, want = real(func, seed)
        return inputs, [w + 1 if k == 2 else w for k, w in enumerate(want)]

    monkeypatch.setattr(gpu, "_reference", off_by_one)
    (r,) = tdsl.tune(mm, target="cuda -arch=sm_80", trials=1, verbose=0).records
    assert r.status == "failed" and not r.unmeasured and r.error.startswith("wrong result: C differs")


def test_the_summary_says_what_was_verified_where(no_gpu, capsys):
    tdsl.tune(mm, target="cuda -arch=sm_80", trials=1, verbose=1)
    assert "mm: 1 verified-unmeasured (unmeasured-sm_80)" in capsys.readouterr().out


@T.prim_func
def smm(A: T.Buffer(("n", 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer(("n", 64), "float32")):
    for i, j, k in T.grid(n, 64, 64):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


def rows_per_thread_space(sch):
    c = sch.get_block("C")
    i, _, _ = sch.get_loops(c)
    i0, i1 = sch.split(i, factors=[None, sch.sample_categorical([8, 16], [0.5, 0.5])])
    sch.bind(i0, "blockIdx.x")
    sch.bind(i1, "threadIdx.x")


def test_a_size_too_large_to_emulate_is_verified_at_a_small_size_of_its_symbolic_function(no_gpu):
    db_path = no_gpu / "sym.db"
    result = tdsl.tune(smm, target="cuda -arch=sm_80", trials=2, sizes={"n": [64, 4096]}, space=rows_per_thread_space,
                       database=db_path, verbose=0)
    small, large = (t.records[0] for t in result.tasks)
    assert small.status == large.status == "verified-unmeasured", (small.error, large.error)
    assert large.where.startswith("emulator at n=64 on ") and small.where.startswith("emulator on ")
    # build(database=) dispatches on the size with the verified records (run here in the emulator)
    kernel = tdsl.build(smm, target="cuda -arch=sm_80", database=db_path, emulate=True)
    assert "n=4096" in repr(kernel)
    a = np.random.default_rng(1).standard_normal((64, 64)).astype("float32")
    b = np.random.default_rng(2).standard_normal((64, 64)).astype("float32")
    c = np.zeros((64, 64), "float32")
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_one_measurement_at_a_time_per_gpu():
    import threading
    import time

    events = []

    def measure(name):
        with gpu.gpu_lock(0):
            events.append(("start", name))
            time.sleep(0.05)
            events.append(("end", name))

    threads = [threading.Thread(target=measure, args=(n,)) for n in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [e[0] for e in events] == ["start", "end", "start", "end"]
    assert events[0][1] == events[1][1]


def test_export_and_import_keep_where_each_record_was_checked(tmp_path):
    with Database(tmp_path / "a.db") as db:
        wl = db.workload(mm, "cuda -arch=sm_80", machine=gpu.unmeasured_machine("sm_80"))
        db.add(wl, tdsl.tuner.Record("c1", "[]", status="verified-unmeasured", where="emulator on x"))
        db.export_jsonl(tmp_path / "r.jsonl")
    with Database(tmp_path / "b.db") as db:
        assert db.import_jsonl(tmp_path / "r.jsonl") == 1
        (wl,) = db.workloads()
        (r,) = db.records(wl)
        assert r.unmeasured and (r.status, r.where, r.time) == ("verified-unmeasured", "emulator on x", None)
        assert wl.machine == "unmeasured-sm_80"
