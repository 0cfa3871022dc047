"""The package surface: public names resolve, import is light, the demo entry point exists."""
import subprocess
import sys

import tdsl


def test_public_names_resolve():
    for name in tdsl.__all__:
        assert getattr(tdsl, name) is not None, name


def test_error_classes():
    assert issubclass(tdsl.ScriptError, SyntaxError)
    assert issubclass(tdsl.ArgumentError, TypeError) and issubclass(tdsl.ArgumentError, ValueError)
    assert issubclass(tdsl.BoundsError, IndexError)
    assert tdsl.prim_func is tdsl.T.prim_func


def test_import_does_not_load_heavy_modules():
    code = ("import sys, tdsl; heavy = [m for m in ('llvmlite', 'cuda', 'rich', 'pygments', 'torch') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_prim_func_is_not_callable_like_a_kernel():
    @tdsl.T.prim_func
    def f(A: tdsl.T.Buffer((4,), "float32")):
        for i in range(4):
            A[i] = tdsl.T.float32(1)

    try:
        f(None)
    except TypeError as exc:
        assert "tdsl.build" in str(exc) and "tdsl.interpret" in str(exc)
    else:
        raise AssertionError("calling a PrimFunc must explain how to run it")
