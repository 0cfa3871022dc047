"""build(f, "cuda", arch=..., database=db) applies the records of the architecture it builds for: the
`arch=` option or the target string's -arch select them (measured on this GPU first where it is of
that architecture, else the records verified without a GPU, unmeasured-<arch>); a record tuned for
one architecture is never applied to a build for another, whatever GPU the machine has."""
import sys
import warnings

import pytest

import tdsl
from tdsl import T
from tdsl.tuner import Database
from tdsl.tuner.apply import NoTuningRecord, lookup_target
from tdsl.tuner.database import Record
from tdsl.tuner.space import trace_text

pytest.importorskip("cuda.bindings")
from fake_cuda_driver import FakeDriver  # noqa: E402


@T.prim_func
def mm(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
    for i, j, k in T.grid(64, 64, 64):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


def rows_per_block(threads: int):
    """A schedule of mm whose blocks have `threads` threads (how a test tells records apart)."""
    sch = tdsl.Schedule(mm)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    bx, tx = sch.split(i, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch


# (target, machine, threads of its record, measured time or None)
RECORDS = [("cuda -arch=sm_80", "unmeasured-sm_80", 16, None),
           ("cuda -arch=sm_90a", "unmeasured-sm_90a", 32, None),
           ("cuda -arch=sm_90a", "Fake H200 (sm_90)", 8, 1e-5),
           ("cuda -arch=sm_90", "Fake H200 (sm_90)", 64, 1e-5)]


def make_db(path, records=RECORDS):
    with Database(path) as db:
        for target, machine, threads, time in records:
            sch = rows_per_block(threads)
            wl = db.workload(mm, target, machine=machine)
            status = "measured" if time else "verified-unmeasured"
            db.add(wl, Record(f"{machine}-{threads}", trace_text(sch.trace), {}, time=time,
                              times=[time] if time else [], status=status))
    return path


@pytest.fixture
def db_path(tmp_path, monkeypatch):
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path / "cache"))
    return make_db(tmp_path / "archs.db")


def threads(kernel) -> int:
    (spec,) = kernel.plan.kernels
    return int(spec.launch["threadIdx.x"].value)


def build(path, target, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoTuningRecord)        # a record must be found
        return tdsl.build(mm, target=target, database=path, **options)


@pytest.fixture
def no_gpu(monkeypatch):
    from tdsl.backends.cuda import runtime

    monkeypatch.setattr(runtime, "has_gpu", lambda: False)


@pytest.fixture
def fake_h200(monkeypatch):
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
    assert runtime.has_gpu() and runtime.device_info().arch == "sm_90"


def test_the_arch_given_to_build_or_in_the_target_selects_its_records(db_path, no_gpu):
    assert threads(build(db_path, "cuda", arch="sm_80")) == 16
    assert threads(build(db_path, "cuda -arch=sm_80")) == 16
    # sm_90a: the record a GPU of that architecture measured first, then the unmeasured one
    assert threads(build(db_path, "cuda", arch="sm_90a")) == 8
    assert threads(build(db_path, "cuda -arch=sm_90a", arch="sm_90a")) == 8
    unmeasured_only = make_db(db_path.parent / "unmeasured.db", [r for r in RECORDS if r[3] is None])
    assert threads(build(unmeasured_only, "cuda", arch="sm_90a")) == 32
    assert threads(build(unmeasured_only, "cuda", arch="sm_80")) == 16
    # an architecture without records: auto-scheduled, never another architecture's record
    with pytest.warns(NoTuningRecord, match="cuda -arch=sm_86"):
        tdsl.build(mm, target="cuda", arch="sm_86", database=db_path)
    with pytest.raises(tdsl.TargetError, match="give the architecture once"):
        tdsl.build(mm, target="cuda -arch=sm_80", arch="sm_90a", database=db_path)


def test_on_a_gpu_the_arch_built_for_selects_the_records_not_the_gpus(db_path, fake_h200):
    # this GPU (sm_90) measured records for sm_90 and sm_90a: the build's arch picks among them
    assert threads(build(db_path, "cuda")) == 64                      # this GPU's arch: measured here
    assert threads(build(db_path, "cuda", arch="sm_90a")) == 8        # measured here for sm_90a first
    assert threads(build(db_path, "cuda -arch=sm_90a")) == 8
    assert threads(build(db_path, "cuda", arch="sm_80")) == 16        # not this GPU's: sm_80's own record


def test_lookup_target_spells_the_arch_into_cuda_targets_only():
    assert lookup_target("cuda", {"arch": "sm_80"}) == "cuda -arch=sm_80"
    assert lookup_target("cuda -arch=sm_90a", {}) == "cuda -arch=sm_90a"
    assert lookup_target("cuda", {}) == "cuda"
    assert lookup_target("cpu", {"bounds_check": True}) == "cpu"
