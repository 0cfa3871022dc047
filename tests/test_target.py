"""tdsl.target: one parser of target names (TVM's strings included) for lower and build, and the
host CPU facts the LLVM backend, the intrinsics and lowering share."""
import numpy as np
import pytest

import tdsl
from tdsl import TargetError
from tdsl.target import (
    CPU_TARGET_ENV,
    KNOWN_CPUS,
    Target,
    cpu_feature_string,
    cpu_features,
    cpu_name,
    cpu_target,
    host_cpu_name,
    host_features,
    parse_target,
)

AVX2 = "llvm -mcpu=x86-64-v3"


@pytest.fixture(autouse=True)
def _cpu_means_the_host(monkeypatch):
    """Here "cpu" is the host ($TDSL_CPU_TARGET, which .ci/run's second pass sets, is tested below)."""
    monkeypatch.delenv(CPU_TARGET_ENV, raising=False)

needs_avx2 = pytest.mark.skipif("avx2" not in host_features() or "fma" not in host_features(),
                                reason="this CPU cannot run AVX2 code")

SRC = '''
@T.prim_func
def double(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for i in range(64):
        with T.block("b"):
            vi = T.axis.spatial(64, i)
            B[vi] = A[vi] * T.float32(2)
'''


@pytest.mark.parametrize("text, kind, attrs", [
    ("cpu", "cpu", ()),
    ("llvm", "cpu", ()),
    ("  Host ", "cpu", ()),
    ("llvm -mcpu=znver3", "cpu", (("mcpu", "znver3"),)),
    ("llvm -keys=cpu -mcpu=native", "cpu", (("keys", "cpu"), ("mcpu", "native"))),
    ("cuda", "cuda", ()),
    ("gpu", "cuda", ()),
    ("cuda -arch=sm_90", "cuda", (("arch", "sm_90"),)),
])
def test_parse_target_strings(text, kind, attrs):
    t = parse_target(text)
    assert (t.kind, t.attrs) == (kind, attrs)
    assert parse_target(str(t)) == t  # str() is a target string again


def test_parse_target_objects():
    assert parse_target(Target("cuda")) == Target("cuda")

    class Kind:
        name = "llvm"

    class TvmLike:  # tvm.target.Target has .kind.name
        kind = Kind()

    assert parse_target(TvmLike()).kind == "cpu"


@pytest.mark.parametrize("text, message", [
    ("tpu", "unknown target 'tpu'"),
    ("", "unknown target ''"),
    ("llvm mcpu=znver3", "'mcpu=znver3' is not an attribute; write -key=value"),
    ("llvm -mcpu", "is not an attribute"),
    ("llvm -arch=sm_90", "unknown attribute -arch for a cpu target; tdsl understands -mcpu"),
    ("cuda -mcpu=znver3", "unknown attribute -mcpu for a cuda target; tdsl understands -arch"),
    ("llvm -mcpu=a -mcpu=b", "-mcpu is given twice"),
])
def test_bad_target_strings_say_what_is_right(text, message):
    with pytest.raises(TargetError, match=message):
        parse_target(text)
    with pytest.raises(TargetError, match=message):
        tdsl.lower(tdsl.parse(SRC), target=text)


def test_lower_takes_what_build_takes():
    f = tdsl.parse(SRC)
    cpu = tdsl.lower(f, target="cpu")
    for name in ("llvm", "llvm -mcpu=znver3", Target("cpu")):
        tdsl.assert_structural_equal(tdsl.lower(f, target=name), cpu)
    assert [p.name for p in tdsl.lower.passes_for("cuda -arch=sm_90")] == \
        [p.name for p in tdsl.lower.passes_for("cuda")]


def test_build_with_a_tvm_string_for_this_cpu(rng):
    a = rng.standard_normal(64).astype(np.float32)
    for name in ("llvm", f"llvm -mcpu={host_cpu_name()}", "llvm -mcpu=native"):
        np.testing.assert_array_equal(tdsl.build(tdsl.parse(SRC), target=name)(a), a * 2)


def test_build_refuses_an_unknown_cpu_naming_the_known_ones():
    with pytest.raises(TargetError, match="unknown CPU -mcpu=cortex-a53; tdsl knows x86-64-v2, x86-64-v3"):
        tdsl.build(tdsl.parse(SRC), target="llvm -mcpu=cortex-a53")
    with pytest.raises(TargetError, match="-mtriple=aarch64-linux-gnu"):
        tdsl.build(tdsl.parse(SRC), target="llvm -mtriple=aarch64-linux-gnu")


def test_cuda_arch_in_the_string_and_the_options_must_agree():
    with pytest.raises(TargetError, match="-arch=sm_90 but the build options say arch='sm_80'"):
        tdsl.build(tdsl.parse(SRC), target="cuda -arch=sm_90", arch="sm_80")


def test_host_features_asked_once():
    assert host_features() is host_features()
    assert isinstance(host_cpu_name(), str) and host_cpu_name()


# targets by CPU -------------------------------------------------------------------------------

def test_parse_cpu_and_features():
    t = parse_target("llvm -mcpu=x86-64-v3 -mattr=+avx512f,-fma")
    assert t == Target("cpu", (("mcpu", "x86-64-v3"), ("mattr", "+avx512f,-fma")))
    assert cpu_name(t) == "x86-64-v3" and cpu_name("cpu") == host_cpu_name() == cpu_name("llvm -mcpu=native")


def test_cpu_features_of_named_cpus_and_mattr():
    v3 = cpu_features(AVX2)
    assert {"avx2", "fma", "f16c", "bmi2", "sse4.2"} <= v3 and not any(f.startswith("avx512") for f in v3)
    v4 = cpu_features("llvm -mcpu=x86-64-v4")
    assert v3 < v4 and {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"} <= v4
    assert {"avx512vnni", "avx512bf16", "avx512fp16", "avxvnni", "amx-int8"} <= cpu_features(
        "llvm -mcpu=sapphirerapids")
    zen4 = cpu_features("llvm -mcpu=znver4")
    assert {"avx512vnni", "avx512bf16"} <= zen4 and "avx512fp16" not in zen4 and "avxvnni" not in zen4
    assert "avxvnni" in cpu_features("llvm -mcpu=znver5")
    assert cpu_features("cpu") == cpu_features("llvm -mcpu=native") == host_features()
    # implied features stay consistent
    plus = cpu_features(AVX2 + " -mattr=+avx512vnni")
    assert {"avx512vnni", "avx512f"} <= plus
    no512 = cpu_features("llvm -mcpu=sapphirerapids -mattr=-avx512f")
    assert not any(f.startswith("avx512") for f in no512) and {"avxvnni", "avx2"} <= no512
    no_avx2 = cpu_features("llvm -mcpu=sapphirerapids -mattr=-avx2")
    assert not any(f.startswith("avx512") for f in no_avx2) and "avxvnni" not in no_avx2 and "avx" in no_avx2
    assert cpu_features("cpu -mattr=-avx512f") == host_features() - {f for f in host_features()
                                                                     if f.startswith(("avx512", "avx10", "amx-avx512"))}


def test_every_known_cpu_is_described_in_llvm_names():
    from tdsl.target import _llvm_feature_names

    if "avx2" not in _llvm_feature_names():
        pytest.skip("not an x86 host")
    for name, feats in KNOWN_CPUS.items():
        assert feats <= _llvm_feature_names(), (name, sorted(feats - _llvm_feature_names()))
        assert feats == cpu_features(f"llvm -mcpu={name}") or name == host_cpu_name()


@pytest.mark.parametrize("text, message", [
    ("llvm -mcpu=pentium4", r"unknown CPU -mcpu=pentium4; tdsl knows x86-64-v2, .*znver5, 'native'"),
    ("llvm -mattr=avx2", "write each feature as \\+name or -name"),
    ("llvm -mattr=+avx9000", "unknown CPU feature 'avx9000'"),
    ("llvm -mattr=-sse2", "would take away sse2, which every x86-64 CPU has"),
])
def test_bad_cpu_targets_say_what_is_right(text, message):
    with pytest.raises(TargetError, match=message):
        cpu_features(text)
    with pytest.raises(TargetError, match=message):
        tdsl.build(tdsl.parse(SRC), target=text)


def test_a_build_needing_features_this_cpu_lacks_is_refused_naming_them():
    lacking = [f for f in ("avx512vp2intersect", "avx512fp16", "amx-tile", "avxvnni", "avx512f", "xop", "fma4")
               if f not in host_features()]
    target = f"llvm -mcpu=x86-64-v3 -mattr=+{lacking[0]}"
    with pytest.raises(TargetError, match=f"may use the CPU features .*{lacking[0]}.* which this CPU .* lacks"):
        tdsl.build(tdsl.parse(SRC), target=target)
    uncovered = [name for name, feats in KNOWN_CPUS.items() if not feats <= host_features()]
    if uncovered:
        with pytest.raises(TargetError, match="does not cross-compile"):
            tdsl.build(tdsl.parse(SRC), target=f"llvm -mcpu={uncovered[0]}")


@needs_avx2
def test_avx2_build_runs_here_without_zmm_registers(rng):
    sch = tdsl.Schedule(tdsl.parse(SRC))
    _, vec = sch.split(sch.get_loops(sch.get_block("b"))[0], factors=[None, 16])
    sch.vectorize(vec)
    a = rng.standard_normal(64).astype(np.float32)
    kernel = tdsl.build(sch, target=AVX2)
    np.testing.assert_array_equal(kernel(a), a * 2)
    assert kernel.target == "cpu -mcpu=x86-64-v3" and "target='cpu -mcpu=x86-64-v3'" in repr(kernel)
    assert "ymm" in kernel.asm and "zmm" not in kernel.asm
    host = tdsl.build(sch)
    assert host.target == "cpu"
    if "avx512f" in host_features():   # the host's own build uses its 16-lane registers
        assert "zmm" in host.asm


@needs_avx2
def test_the_cache_key_differs_per_target():
    from tdsl.backends.llvm import jit

    func = tdsl.parse(SRC)
    host, avx2 = tdsl.build(func), tdsl.build(func, target=AVX2)
    assert host._compiled is not avx2._compiled
    assert host._compiled.meta["symbol"] != avx2._compiled.meta["symbol"]
    assert tdsl.build(func, target="llvm -mcpu=x86-64-v3")._compiled is avx2._compiled   # memory cache
    assert jit.machine_for(AVX2) == jit.Machine("x86-64-v3", cpu_feature_string(AVX2))
    assert "+avx2" in cpu_feature_string(AVX2) and "-avx512f" in cpu_feature_string(AVX2)
    from tdsl.backends import cache

    assert cache.disk_key("k", "p", machine=jit.machine_for(AVX2)) != cache.disk_key("k", "p")


@needs_avx2
def test_the_avx2_build_of_an_avx2_target_comes_back_from_the_disk_cache(tmp_path, monkeypatch, rng):
    """The disk entry of a target's build is read back for that target (and not for the host)."""
    import subprocess
    import sys

    code = ("import numpy as np, tdsl; k = tdsl.build(tdsl.parse(SRC), target=T); "
            "a = np.arange(64, dtype='float32'); assert (k(a) == 2 * a).all(); print(k.from_cache, 'zmm' in k.asm)")
    env = {**__import__("os").environ, "TDSL_CACHE_DIR": str(tmp_path)}
    env.pop("TDSL_DISABLE_DISK_CACHE", None)
    env.pop(CPU_TARGET_ENV, None)
    prelude = f"SRC = {SRC!r}; T = {AVX2!r}\n"
    runs = [subprocess.run([sys.executable, "-c", prelude + code], env=env, capture_output=True, text=True,
                           timeout=120) for _ in range(2)]
    assert [r.stdout.split() for r in runs] == [["False", "False"], ["True", "False"]], [r.stderr for r in runs]


@needs_avx2
def test_tensor_intrinsics_follow_the_target():
    from tdsl.intrinsics import x86

    assert x86.available(AVX2) == ["avx2"]
    assert x86.fp32_microkernel(16, target=AVX2) == "x86.avx2.fp32_4x16x16"
    assert x86.int8_dot_any(AVX2) == x86.AVX2_DOT
    with pytest.raises(TargetError, match="no AVX512-VNNI and no AVX-VNNI"):
        x86.int8_dot(target=AVX2)
    # an AVX-512 micro-kernel built for an AVX2 CPU: refused at build (on any host), naming what is missing
    from tdsl.script import parse

    gemm = parse(GEMM)
    sch = tdsl.Schedule(gemm)
    sch.auto_tensorize(sch.get_block("C"), x86.register_fp32("avx512", 8, 32, 16))
    with pytest.raises(TargetError, match="needs the CPU features avx512f that the target's CPU .x86-64-v3. lacks"):
        tdsl.build(sch, target=AVX2)


@needs_avx2
def test_auto_schedule_follows_the_target():
    from tdsl.auto.hardware import hardware

    assert (hardware(AVX2).isa, hardware(AVX2).lanes) == ("avx2", 8)
    assert hardware("llvm -mcpu=x86-64-v4").lanes == 16   # scheduling for a CPU needs no such host
    sch = tdsl.auto_schedule(tdsl.parse(GEMM), AVX2)
    assert "x86.avx2.fp32_" in str(sch.trace) and "avx512" not in str(sch.trace)
    wide = str(tdsl.auto_schedule(tdsl.parse(GEMM), "llvm -mcpu=x86-64-v4").trace)
    assert "x86.avx512.fp32_" in wide and "x86.avx2" not in wide


def test_auto_schedule_on_avx512_takes_avx2_micro_kernels_for_columns_of_whole_ymm_vectors(rng):
    """24 columns are 3 AVX2 vectors but no whole AVX-512 ones: the AVX2 micro-kernel (which an
    AVX-512 CPU runs) instead of no micro-kernel; built for the host where it has AVX2."""
    func = tdsl.parse(GEMM_N.format(n=24))
    sch = tdsl.auto_schedule(func, "llvm -mcpu=x86-64-v4")
    assert "x86.avx2.fp32_" in str(sch.trace)
    if {"avx2", "fma"} <= host_features():
        a, b = rng.standard_normal((32, 32), dtype=np.float32), rng.standard_normal((32, 24), dtype=np.float32)
        np.testing.assert_allclose(tdsl.build(sch)(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_the_environment_sets_what_cpu_means(monkeypatch):
    monkeypatch.setenv(CPU_TARGET_ENV, "llvm -mcpu=x86-64-v3")
    assert cpu_target("cpu") == Target("cpu", (("mcpu", "x86-64-v3"),))
    assert cpu_target("cpu -mattr=-fma") == Target("cpu", (("mcpu", "x86-64-v3"), ("mattr", "-fma")))
    assert cpu_target("llvm -mcpu=x86-64-v2") == Target("cpu", (("mcpu", "x86-64-v2"),))   # explicit wins
    assert "avx512f" not in cpu_features("cpu") and "avx2" in cpu_features("cpu")
    if "avx2" in host_features():
        kernel = tdsl.build(tdsl.parse(SRC))
        assert kernel.target == "cpu -mcpu=x86-64-v3" and "zmm" not in kernel.asm
    monkeypatch.setenv(CPU_TARGET_ENV, "cuda")
    with pytest.raises(TargetError, match=f"\\${CPU_TARGET_ENV}='cuda' is not a CPU target"):
        cpu_features("cpu")
    monkeypatch.setenv(CPU_TARGET_ENV, "")
    assert cpu_features("cpu") == host_features()


GEMM_N = '''
@T.prim_func
def gemm(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32, {n}), "float32"), C: T.Buffer((32, {n}), "float32")):
    for i, j, k in T.grid(32, {n}, 32):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''
GEMM = GEMM_N.format(n=32)
