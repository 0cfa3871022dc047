"""Compiling an emulator translation unit with the host C++ compiler, cached on disk.

The compiler is `$CXX` if set, else the first of g++, clang++, c++ on PATH. The shared object
is cached under the tdsl cache directory (`TDSL_CACHE_DIR`, subdirectory ``emu``) keyed by the
translation unit, the emulator headers, the compiler's identity and the flags; a new process
loads it without compiling again. With GCC the header is precompiled once per compiler, flags
and header version (``emu/pch-<hash>/cuda_emu.h.gch``), which roughly halves each build.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading

from ....errors import TargetError

INCLUDE_DIR = os.path.join(os.path.dirname(__file__), "include")


def flags() -> tuple[str, ...]:
    """-O1 by default; TDSL_EMU_OPT=0 compiles about twice as fast (small problems, tests), 2 runs faster."""
    opt = os.environ.get("TDSL_EMU_OPT", "1").strip()
    # -fwrapv: signed integer overflow wraps, as on the GPU (and in tdsl's semantics), instead of being UB
    return ("-std=c++17", f"-O{opt if opt in ('0', '1', '2', '3') else '1'}", "-fPIC", "-shared", "-w",
            "-fno-strict-aliasing", "-fwrapv")
_LOADED: dict[str, ctypes.CDLL] = {}
_LOCK = threading.Lock()


def find_compiler() -> str:
    """The host C++ compiler's path, or TargetError saying none was found."""
    env = os.environ.get("CXX", "").strip()
    candidates = ([env] if env else []) + ["g++", "clang++", "c++"]
    for c in candidates:
        path = shutil.which(c)
        if path:
            return path
    raise TargetError("emulate=True compiles the generated CUDA C++ with a host C++ compiler, but none was found "
                      "(looked for $CXX, g++, clang++, c++ on PATH): install one (e.g. `apt-get install g++`) "
                      "or set CXX")


@functools.lru_cache(maxsize=8)
def _compiler_id(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, check=False)
        return path + "\n" + out.stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise TargetError(f"the C++ compiler {path} does not run ({exc})") from None


@functools.lru_cache(maxsize=1)
def _headers_hash() -> str:
    h = hashlib.sha256()
    for name in sorted(os.listdir(INCLUDE_DIR)):
        with open(os.path.join(INCLUDE_DIR, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


def cache_key(unit: str, compiler: str) -> str:
    parts = [unit, _headers_hash(), _compiler_id(compiler), " ".join(flags())]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def _cache_root() -> str | None:
    from ... import cache

    root = cache.cache_dir()
    return None if root is None else os.path.join(root, "emu")


def load(unit: str, use_cache: bool = True) -> ctypes.CDLL:
    """The shared object of `unit`, compiled (or found in the cache) and loaded. Compiling
    leaves nothing behind but the cache entry: the work directory (under the cache directory
    when there is one) is removed, after loading when the object is not cached."""
    compiler = find_compiler()
    key = cache_key(unit, compiler)
    with _LOCK:
        if use_cache and key in _LOADED:
            return _LOADED[key]
        root = _cache_root() if use_cache else None
        path = os.path.join(root, key + ".so") if root else None
        if path is not None and _loads(path):
            lib = ctypes.CDLL(path)
        else:
            workdir = _workdir(root)
            try:
                lib = ctypes.CDLL(_compile(unit, compiler, root, key, workdir))
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
        if use_cache:
            _LOADED[key] = lib
        return lib


def _workdir(root: str | None) -> str:
    """A fresh directory to compile in: inside the cache directory if it can be made there (the
    result is then renamed into place), else in the system's temporary directory."""
    if root is not None:
        try:
            os.makedirs(root, exist_ok=True)
            return tempfile.mkdtemp(prefix="build-", dir=root)
        except OSError:
            pass
    return tempfile.mkdtemp(prefix="tdsl-emu-")


def _loads(path: str) -> bool:
    if not os.path.isfile(path):
        return False
    try:
        ctypes.CDLL(path)
        return True
    except OSError:  # truncated or foreign: rebuild it
        return False


def _compile(unit: str, compiler: str, root: str | None, key: str, workdir: str) -> str:
    """Compile `unit` in `workdir`; the path of the shared object (the cache entry when `root`
    is writable, else the one in `workdir`, which the caller removes after loading it)."""
    src = os.path.join(workdir, "kernel_emu.cpp")
    out = os.path.join(workdir, "kernel_emu.so")
    with open(src, "w") as f:
        f.write(unit)
    pch = _pch_dir(compiler, root)
    cmd = [compiler, *flags(), *(["-I", pch] if pch else []), "-I", INCLUDE_DIR, src, "-o", out]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise TargetError(f"the C++ compiler failed to run ({exc})") from None
    if res.returncode != 0:
        raise TargetError(_error_text(res.stderr, unit))
    if root is None:
        return out
    tmp = None
    try:
        os.makedirs(root, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, suffix=".so.tmp")
        with os.fdopen(fd, "wb") as f, open(out, "rb") as g:
            f.write(g.read())
        final = os.path.join(root, key + ".so")
        os.replace(tmp, final)
        return final
    except OSError:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        return out  # an unwritable cache: use the fresh build


def _pch_dir(compiler: str, root: str | None) -> str | None:
    """A directory holding a GCC precompiled cuda_emu.h for these flags (made on first use), or
    None (not GCC, no cache directory, or it failed: compile without it)."""
    ident = _compiler_id(compiler)
    if root is None or "Free Software Foundation" not in ident or "clang" in ident.lower():
        return None
    key = hashlib.sha256("\x00".join([_headers_hash(), ident, " ".join(flags())]).encode()).hexdigest()[:24]
    pch_dir = os.path.join(root, f"pch-{key}")
    target = os.path.join(pch_dir, "cuda_emu.h.gch")
    if os.path.isfile(target):
        return pch_dir
    try:
        os.makedirs(pch_dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=pch_dir, suffix=".gch.tmp")
        os.close(fd)
        header_flags = [f for f in flags() if f != "-shared"]
        res = subprocess.run([compiler, *header_flags, "-x", "c++-header", os.path.join(INCLUDE_DIR, "cuda_emu.h"),
                              "-o", tmp], capture_output=True, timeout=600, check=False)
        if res.returncode != 0:
            os.unlink(tmp)
            return None
        os.replace(tmp, target)
        return pch_dir
    except (OSError, subprocess.SubprocessError):
        return None


def _error_text(stderr: str, unit: str) -> str:
    first = [ln for ln in stderr.splitlines() if "error" in ln][:8]
    return ("the host C++ compiler rejected the generated CUDA code in emulation (a construct the emulator "
            "header does not model, or a codegen bug):\n" + "\n".join(first or stderr.splitlines()[:20]))


def launcher(lib, name: str):
    """The ctypes function `tdsl_emu_run_<name>` of a loaded translation unit (translate.py's launcher)."""
    fn = getattr(lib, f"tdsl_emu_run_{name}")
    fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_longlong),
                   ctypes.POINTER(ctypes.c_longlong), ctypes.c_int, ctypes.c_ulonglong, ctypes.c_longlong]
    fn.restype = ctypes.c_int
    return fn
