"""CUDA C++ -> CUBIN (and optionally PTX) with NVRTC through `cuda.bindings.nvrtc`.

No GPU is needed: the architecture is given (`"sm_80"`, `"sm_90"`, ...) or read from the
device. Compiled images are cached on disk with the CPU backend's cache (`TDSL_CACHE_DIR`),
keyed by the source, the architecture, the options and the NVRTC version.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
from dataclasses import dataclass

from ...errors import TargetError

# the one install instruction (README, tutorials, every message): the extra brings cuda-python,
# NVRTC and the runtime and crt headers NVRTC needs
INSTALL_HINT = 'install the CUDA extra: pip install "tdsl[cuda]"'
_INSTALL_HINT = INSTALL_HINT


@dataclass(frozen=True)
class CompiledModule:
    cubin: bytes
    ptx: str | None
    arch: str
    log: str


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise TargetError(f"building for CUDA needs cuda-python, which is not installed: {_INSTALL_HINT}") from exc
    return nvrtc


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library; TargetError when it cannot be loaded."""
    nvrtc = _nvrtc()
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except RuntimeError as exc:  # DynamicLibNotFoundError: cuda-python without libnvrtc
        raise TargetError(f"the NVRTC library could not be loaded ({exc}); {_INSTALL_HINT}") from exc
    _check(nvrtc, err, "nvrtcVersion")
    return major, minor


def _check(nvrtc, err, what: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, msg = nvrtc.nvrtcGetErrorString(err)
        text = msg.decode() if isinstance(msg, bytes) else str(msg)
        raise TargetError(f"NVRTC {what} failed: {text}")


def include_dir() -> str | None:
    """The directory holding cuda_fp16.h etc. from the NVIDIA wheels (never /usr/local/cuda first)."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        for sub in ("cu13/include", "cu12/include", "cuda_runtime/include"):
            path = os.path.join(root, sub)
            if os.path.isfile(os.path.join(path, "cuda_fp16.h")):
                return path
    try:
        from cuda import pathfinder

        return pathfinder.find_nvidia_header_directory("cudart")
    except Exception:  # noqa: BLE001 (pathfinder finding nothing means no headers)
        return None


def check_arch(arch: str) -> str:
    if not re.fullmatch(r"sm_\d{2,3}[a-z]?", arch):
        raise TargetError(f"unknown CUDA architecture {arch!r}; expected a name such as 'sm_80' or 'sm_90'")
    return arch


def _options(arch: str, source: str) -> list[str]:
    opts = [f"--gpu-architecture={arch}", "--std=c++17"]
    if "#include" in source:
        inc = include_dir()
        if inc is None:
            raise TargetError(f"the generated CUDA code includes CUDA headers (cuda_fp16.h / cuda_bf16.h) but none "
                              f"were found; {_INSTALL_HINT}")
        opts.append(f"--include-path={inc}")
    return opts


def cache_key(source: str, arch: str, want_ptx: bool) -> str:
    from ...version import __version__

    major, minor = nvrtc_version()
    parts = ["cuda", __version__, f"nvrtc{major}.{minor}", arch, str(want_ptx), source]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def compile_cuda(source: str, arch: str, *, want_ptx: bool = False, name: str = "tdsl_kernel.cu",
                 use_cache: bool = True) -> CompiledModule:
    """Compile `source` for `arch`; TargetError with the NVRTC log and the offending lines on failure."""
    from .. import cache
    from .sm90 import check_arch_features

    check_arch(arch)
    check_arch_features(source, arch)
    key = cache_key(source, arch, want_ptx)
    if use_cache:
        hit = cache.memory_get(key)
        if hit is not None:
            return hit
        entry = cache.disk_load(key)
        if entry is not None and entry.meta.get("arch") == arch:
            mod = CompiledModule(entry.obj, entry.meta.get("ptx"), arch, entry.meta.get("log", ""))
            cache.memory_put(key, mod)
            return mod
    mod = _compile(source, arch, want_ptx, name)
    if use_cache:
        cache.memory_put(key, mod)
        cache.disk_store(key, mod.cubin, {"arch": arch, "ptx": mod.ptx, "log": mod.log})
    return mod


def _compile(source: str, arch: str, want_ptx: bool, name: str) -> CompiledModule:
    nvrtc = _nvrtc()
    opts = [o.encode() for o in _options(arch, source)]
    try:
        err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    except RuntimeError as exc:
        raise TargetError(f"the NVRTC library could not be loaded ({exc}); {_INSTALL_HINT}") from exc
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        log = _log(nvrtc, prog)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise TargetError(_error_message(source, log, arch))
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(nvrtc, err, "nvrtcGetCUBINSize")
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check(nvrtc, err, "nvrtcGetCUBIN")
        ptx = None
        if want_ptx:
            err, size = nvrtc.nvrtcGetPTXSize(prog)
            _check(nvrtc, err, "nvrtcGetPTXSize")
            buf = b" " * size
            (err,) = nvrtc.nvrtcGetPTX(prog, buf)
            _check(nvrtc, err, "nvrtcGetPTX")
            ptx = buf.rstrip(b"\x00").decode()
        return CompiledModule(cubin, ptx, arch, log)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _log(nvrtc, prog) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\x00").decode(errors="replace").strip()


def _error_message(source: str, log: str, arch: str) -> str:
    lines = source.splitlines()
    shown = []
    for n in sorted({int(m) for m in re.findall(r"\((\d+)\): (?:error|catastrophic)", log)})[:5]:
        if 1 <= n <= len(lines):
            shown.append(f"  {n:4d} | {lines[n - 1]}")
    text = f"NVRTC failed to compile the generated CUDA code for {arch}:\n{log}"
    if shown:
        text += "\noffending lines:\n" + "\n".join(shown)
    return text
