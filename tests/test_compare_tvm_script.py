"""bench/compare_tvm.py without TVM: one line saying how to install it, exit status 0 (TVM is
never a dependency). The comparison itself needs apache-tvm and is run by hand."""
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import compare_tvm  # after the repository root is on the path


def _run_without_tvm(tmp_path: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    """The script in a subprocess where `import tvm` fails even if apache-tvm is installed."""
    (tmp_path / "tvm.py").write_text("raise ImportError('No module named tvm (blocked by the test)')\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}
    return subprocess.run([sys.executable, str(ROOT / "bench" / "compare_tvm.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("args", [(), ("--quick", "--threads", "2")])
def test_without_tvm_prints_one_line_and_exits_0(tmp_path, args):
    done = _run_without_tvm(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines == [compare_tvm.NOT_INSTALLED]
    assert "not installed" in lines[0] and "pip install apache-tvm" in lines[0]
    assert done.stderr == ""


def test_check_refuses_a_wrong_result():
    want = np.arange(12, dtype=np.float64).reshape(3, 4)
    compare_tvm.check(want.astype(np.float32), want, "same")
    wrong = want.copy()
    wrong[2, 3] += 1.0
    with pytest.raises(AssertionError, match="TVM gemm: relative error"):
        compare_tvm.check(wrong, want, "TVM gemm")


def test_interleaved_gives_each_function_its_own_minimum():
    calls = {"a": 0, "b": 0}

    def tick(name):
        calls[name] += 1

    clock_values = iter(range(10 ** 6))
    best = compare_tvm.interleaved([lambda: tick("a"), lambda: tick("b")], repeat=3,
                                   clock=lambda: next(clock_values) * 0.05)
    assert len(best) == 2 and all(b > 0 for b in best)
    # warm-up, one calibration sample, then 3 rounds of 3 samples (each turn takes >= 3)
    assert calls["a"] == calls["b"] == 1 + 1 + 3 * 3
