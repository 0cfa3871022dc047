"""First contact: one CUDA install command everywhere, and the extra really brings NVRTC and the
headers it needs; build's docstring lists every option; dir(tdsl) lists each name once."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import pathlib
import re

import pytest

import tdsl

ROOT = pathlib.Path(__file__).resolve().parent.parent
INSTALL = 'pip install "tdsl[cuda]"'


def _texts():
    yield ROOT / "README.md"
    yield from sorted((ROOT / "tutorials").glob("*.py"))
    yield from sorted((ROOT / "tdsl").rglob("*.py"))


def test_every_cuda_install_instruction_is_the_extra():
    named = []
    for path in _texts():
        text = path.read_text()
        for line in text.splitlines():
            if "pip install" in line and "cuda" in line.lower():
                # the extra, from an index or (README's set-up) from this checkout
                assert INSTALL in line or re.search(r'-e "\.\[[a-z,]*cuda[a-z,]*\]"', line), f"{path}: {line}"
                named.append(path.name)
        assert "cuda-python>=" not in text and "cuda-toolkit[" not in text, path
    assert "README.md" in named and "nvrtc.py" in named and "runtime.py" in named


def test_the_cuda_extra_lists_nvrtc_and_the_header_wheels():
    tomllib = pytest.importorskip("tomllib")
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["cuda"]
    names = {re.split(r"[<>=\[ ]", req, maxsplit=1)[0] for req in extra}
    assert names == {"cuda-python", "nvidia-cuda-nvrtc", "nvidia-cuda-runtime", "nvidia-cuda-crt"}


def _files(dist: str) -> list[str]:
    try:
        return [str(f) for f in importlib.metadata.files(dist) or []]
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"the CUDA extra is not installed ({dist} missing): {INSTALL}")


def test_the_installed_extra_brings_nvrtc_and_its_headers():
    if importlib.util.find_spec("cuda") is None:
        pytest.skip(f"the CUDA extra is not installed: {INSTALL}")
    assert any(re.search(r"libnvrtc\.so", f) for f in _files("nvidia-cuda-nvrtc"))
    runtime = _files("nvidia-cuda-runtime")
    assert any(f.endswith("/cuda_fp16.h") for f in runtime) and any(f.endswith("/cuda_runtime.h") for f in runtime)
    assert any(f.endswith("crt/host_defines.h") for f in _files("nvidia-cuda-crt"))
    from tdsl.backends.cuda import nvrtc

    assert nvrtc.nvrtc_version() >= (12, 0)            # the library loads
    include = pathlib.Path(nvrtc.include_dir())
    assert (include / "cuda_fp16.h").is_file() and (include / "crt" / "host_defines.h").is_file()


def test_build_docstring_lists_every_option():
    from tdsl.backends import cuda
    from tdsl.target import CPU_OPTIONS

    doc = tdsl.build.__doc__
    for name in (*CPU_OPTIONS, *cuda._OPTIONS):
        assert re.search(rf"^\s+{name}=", doc, re.MULTILINE), name


def test_dir_lists_each_name_once():
    _ = tdsl.Schedule, tdsl.build   # lazy names, now loaded: they must not appear twice
    names = dir(tdsl)
    assert len(names) == len(set(names))
    assert set(tdsl.__all__) <= set(names)


def test_attrs_are_pairs_as_documented():
    lowered = tdsl.lower(tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((4,), "float32")):
    for i in T.vectorized(4):
        with T.block("A"):
            vi = T.axis.spatial(4, i)
            A[vi] = A[vi] * T.float32(2)
'''))
    assert isinstance(lowered.attrs, tuple) and all(len(pair) == 2 for pair in lowered.attrs)
    assert "dict(func.attrs)" in tdsl.PrimFunc.__doc__
    assert dict(lowered.attrs)["tdsl.flat_params"][0].name == "A"
