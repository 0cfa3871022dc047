"""tdsl.target: one parser of target names (TVM's strings included) for lower and build, and the
host CPU facts the LLVM backend, the intrinsics and lowering share."""
import numpy as np
import pytest

import tdsl
from tdsl import TargetError
from tdsl.target import Target, host_cpu_name, host_features, parse_target

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


def test_build_refuses_another_cpu():
    other = "cortex-a53" if host_cpu_name() != "cortex-a53" else "znver3"
    with pytest.raises(TargetError, match=f"compiles for the host CPU .*not for -mcpu={other}"):
        tdsl.build(tdsl.parse(SRC), target=f"llvm -mcpu={other}")
    with pytest.raises(TargetError, match="-mtriple=aarch64-linux-gnu"):
        tdsl.build(tdsl.parse(SRC), target="llvm -mtriple=aarch64-linux-gnu")


def test_build_mattr_must_match_the_host():
    have = sorted(host_features())
    tdsl.build(tdsl.parse(SRC), target=f"llvm -mattr=+{have[0]}")
    with pytest.raises(TargetError, match=f"asks for '-{have[0]}'"):
        tdsl.build(tdsl.parse(SRC), target=f"llvm -mattr=-{have[0]}")


def test_cuda_arch_in_the_string_and_the_options_must_agree():
    with pytest.raises(TargetError, match="-arch=sm_90 but the build options say arch='sm_80'"):
        tdsl.build(tdsl.parse(SRC), target="cuda -arch=sm_90", arch="sm_80")


def test_host_features_asked_once():
    assert host_features() is host_features()
    assert isinstance(host_cpu_name(), str) and host_cpu_name()
