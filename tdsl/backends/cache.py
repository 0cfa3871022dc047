"""The compile cache: in memory, and on disk under ~/.cache/tdsl (or $TDSL_CACHE_DIR).

A disk entry is one file: a header line with a SHA-256 of the rest, a JSON metadata block and
the object code. The key covers everything the machine code depends on: tdsl's version, the
llvmlite and LLVM versions, the target triple, CPU name and features, the ABI version of the
generated code, and a hash of the program and options. Entries are written atomically (a
temporary file renamed into place); a corrupted, truncated or stale entry fails its checksum
or its key check and is rebuilt, never trusted. Only a regular file of bounded size is read
(a FIFO, a device or a symlink to one where an entry should be is ignored, never waited on).

`TDSL_CACHE_DIR=""` or `TDSL_DISABLE_DISK_CACHE=1` turns the disk cache off.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import stat
import tempfile
import threading
from dataclasses import dataclass

from .forksafe import fork_safe

ABI_VERSION = "1"
_MAGIC = b"TDSLCACHE1"
_MEMORY: dict[str, object] = {}
_MEMORY_LOCK = threading.Lock()
fork_safe(__name__, "_MEMORY_LOCK")


@dataclass
class DiskEntry:
    obj: bytes
    meta: dict


def cache_dir() -> str | None:
    """The disk cache directory, or None when the disk cache is disabled."""
    if os.environ.get("TDSL_DISABLE_DISK_CACHE", "").strip() not in ("", "0"):
        return None
    env = os.environ.get("TDSL_CACHE_DIR")
    if env is not None:
        return env or None
    return os.path.join(os.path.expanduser("~"), ".cache", "tdsl")


def disk_key(kind: str, program_hash: str, options: str = "", machine=None) -> str:
    """The cache key of a compiled artifact for this machine (or the CPU `machine`, a
    jit.Machine, it is compiled for), toolchain and tdsl version."""
    from ..version import __version__
    from .llvm import jit

    host = jit.host_info()
    cpu, features = (host.cpu, host.features) if machine is None else (machine.cpu, machine.features)
    parts = [kind, __version__, ABI_VERSION, _code_version(), host.llvmlite_version, host.llvm_version,
             host.triple, cpu, features, program_hash, options]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


_COMPILER_PARTS = ("ir", "arith", "lower", os.path.join("backends", "llvm"), "dtypes.py", "__init__.py",
                   os.path.join("backends", "cache.py"),
                   "target.py",
                   # matching and binding of tensorized blocks (lowered by lower/tensorize.py; the
                   # intrinsics themselves are in the program key)
                   os.path.join("intrinsics", "match.py"))


@functools.cache
def _code_version() -> str:
    """A fingerprint (path, size, mtime) of the compiler's source: IR, arith, lowering (tensorize
    included), codegen.

    Keys are taken before lowering, so a change anywhere on the way from a PrimFunc to machine
    code must invalidate the entries it would have produced differently."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = []
    for part in _COMPILER_PARTS:
        path = os.path.join(root, part)
        if os.path.isfile(path):
            files.append(path)
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
            files += [os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".py")]
    h = hashlib.sha256()
    for path in files:
        st = os.stat(path)
        h.update(f"{os.path.relpath(path, root)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


def _path(root: str, key: str) -> str:
    return os.path.join(root, key[:2], key + ".tdslobj")


def disk_load(key: str) -> DiskEntry | None:
    """The entry stored under `key`, or None when absent, disabled, or not intact."""
    root = cache_dir()
    if root is None:
        return None
    data = _read_regular(_path(root, key), MAX_ENTRY_BYTES)
    return None if data is None else _decode(data, key)


MAX_ENTRY_BYTES = 1 << 30   # no compiled kernel comes near; a larger "entry" is not one


def _read_regular(path: str, limit: int) -> bytes | None:
    """The content of `path` if it is a regular file of at most `limit` bytes, else None.

    Opened non-blocking (a FIFO there must not block the build) and checked with fstat before
    reading (a symlink to /dev/zero, a device or a FIFO is not an entry); at most the size fstat
    gave is read, so a file growing meanwhile cannot make the read endless."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks, left = [], st.st_size
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _decode(data: bytes, key: str) -> DiskEntry | None:
    # Layout: MAGIC \n sha256(body) \n body; body = len(json) \n json obj
    try:
        magic, digest, body = data.split(b"\n", 2)
        if magic != _MAGIC or hashlib.sha256(body).hexdigest().encode() != digest:
            return None
        size, rest = body.split(b"\n", 1)
        n = int(size)
        meta = json.loads(rest[:n].decode())
        if meta.get("key") != key:
            return None
        return DiskEntry(rest[n:], meta)
    except (ValueError, UnicodeDecodeError):
        return None


def disk_store(key: str, obj: bytes, meta: dict) -> None:
    """Store an entry atomically; any I/O failure just means no disk cache."""
    root = cache_dir()
    if root is None:
        return
    meta = dict(meta, key=key)
    blob = json.dumps(meta).encode()
    body = str(len(blob)).encode() + b"\n" + blob + obj
    data = _MAGIC + b"\n" + hashlib.sha256(body).hexdigest().encode() + b"\n" + body
    path = _path(root, key)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError:
        pass


def memory_get(key: str):
    return _MEMORY.get(key)


def memory_put(key: str, value) -> None:
    with _MEMORY_LOCK:
        _MEMORY[key] = value


def clear_memory() -> None:
    """Forget the in-memory cache (the JIT keeps loaded code; tests use this to force disk hits)."""
    with _MEMORY_LOCK:
        _MEMORY.clear()
