"""The parallel runtime: a persistent thread pool written in LLVM IR against libc.

No C compiler and no libgomp: the pool is an IR module JIT-compiled once per process. Workers
(one per available core, minus the calling thread, which participates) are created lazily with
`pthread_create`, spin briefly after a region and then park on a futex (`syscall(SYS_futex)`).

A parallel region is `tdsl_rt_launch(fn, closure, n)`; `fn(lo, hi, closure)` runs the chunk
[lo, hi) of the loop; the loop is cut into up to `_CHUNKS_PER_THREAD` chunks per thread, which
the threads take from a shared counter. Regions are serialised by a try-lock: a region started while another is
running (a second Python thread, or a nested parallel loop) runs serially in its caller, which
is correct and keeps the cores busy anyway.

Protocol (all shared words sequentially consistent where it matters):
launcher: publish fn/closure/chunks, open = 1, gen += 1, wake sleepers, help, wait until every
chunk is done, open = 0, wait until no worker is active, unlock. Worker: on a new gen,
active += 1, and only if open still holds read the region and help; then active -= 1. So a
worker either sees the region open (and the launcher waits for it) or never touches it.
"""
from __future__ import annotations

import hashlib
import os
import platform
import threading

from . import jit

_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}
_WORKER_SPIN = 20000      # pause iterations (~0.3 ms) before a worker parks on the futex
_WAIT_SPIN = 2000         # pause iterations before the launcher starts yielding
_CHUNKS_PER_THREAD = 4    # a region is cut into up to 4 chunks per thread, taken first come
                          # first served: a thread that loses its core to another process
                          # delays the region by one small chunk, not by a whole share

_GLOBALS = ("gen", "open", "fn", "cl", "n", "chunk", "nchunks", "next", "done", "active", "lock",
            "nworkers", "sleepers")


def _ir(triple: str, sys_futex: int) -> str:
    x86 = triple.startswith(("x86_64", "i686", "i386"))
    pause = "call void @llvm.x86.sse2.pause()" if x86 else "call i32 @sched_yield()"
    pause_decl = "declare void @llvm.x86.sse2.pause()" if x86 else ""
    glob = []
    for name in _GLOBALS:
        ty = "ptr" if name in ("fn", "cl") else "i64" if name in ("n", "chunk", "nchunks", "next", "done") else "i32"
        init = "null" if ty == "ptr" else "0"
        glob.append(f"@tdsl_rt_{name} = internal global {ty} {init}, align 64")
    return f"""
target triple = "{triple}"
{chr(10).join(glob)}
@tdsl_rt_nthreads = global i32 1, align 64

declare i64 @syscall(i64, ...)
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)
declare i32 @sched_yield()
{pause_decl}

define internal void @tdsl_rt_help() {{
entry:
  %fn = load ptr, ptr @tdsl_rt_fn
  %cl = load ptr, ptr @tdsl_rt_cl
  %n = load i64, ptr @tdsl_rt_n
  %chunk = load i64, ptr @tdsl_rt_chunk
  %nchunks = load i64, ptr @tdsl_rt_nchunks
  br label %loop
loop:
  %t = atomicrmw add ptr @tdsl_rt_next, i64 1 acq_rel
  %more = icmp slt i64 %t, %nchunks
  br i1 %more, label %body, label %exit
body:
  %lo = mul i64 %t, %chunk
  %hi0 = add i64 %lo, %chunk
  %lt = icmp slt i64 %hi0, %n
  %hi = select i1 %lt, i64 %hi0, i64 %n
  call void %fn(i64 %lo, i64 %hi, ptr %cl)
  %d = atomicrmw add ptr @tdsl_rt_done, i64 1 release
  br label %loop
exit:
  ret void
}}

define internal void @tdsl_rt_wait_done(i64 %nchunks) {{
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %yield], [%i1, %pause]
  %d = load atomic i64, ptr @tdsl_rt_done acquire, align 8
  %ok = icmp sge i64 %d, %nchunks
  br i1 %ok, label %exit, label %spin
spin:
  %i1 = add i64 %i, 1
  %long = icmp sgt i64 %i, {_WAIT_SPIN}
  br i1 %long, label %yield, label %pause
yield:
  %y = call i32 @sched_yield()
  br label %loop
pause:
  {pause}
  br label %loop
exit:
  ret void
}}

define internal void @tdsl_rt_wait_idle() {{
entry:
  br label %loop
loop:
  %a = load atomic i32, ptr @tdsl_rt_active seq_cst, align 4
  %ok = icmp eq i32 %a, 0
  br i1 %ok, label %exit, label %pause
pause:
  {pause}
  br label %loop
exit:
  ret void
}}

define void @tdsl_rt_launch(ptr %fn, ptr %cl, i64 %n) {{
entry:
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %done, label %check
check:
  %nw = load atomic i32, ptr @tdsl_rt_nworkers acquire, align 4
  %none = icmp eq i32 %nw, 0
  %one = icmp eq i64 %n, 1
  %trivial = or i1 %none, %one
  br i1 %trivial, label %serial, label %trylock
trylock:
  %x = cmpxchg ptr @tdsl_rt_lock, i32 0, i32 1 acquire monotonic
  %got = extractvalue {{ i32, i1 }} %x, 1
  br i1 %got, label %region, label %serial
region:
  %nw64 = zext i32 %nw to i64
  %nthreads = add i64 %nw64, 1
  %want = mul i64 %nthreads, {_CHUNKS_PER_THREAD}
  %fewer = icmp slt i64 %n, %want
  %parts = select i1 %fewer, i64 %n, i64 %want
  %np = add i64 %n, %parts
  %np1 = sub i64 %np, 1
  %chunk = sdiv i64 %np1, %parts
  %nc0 = add i64 %n, %chunk
  %nc1 = sub i64 %nc0, 1
  %nchunks = sdiv i64 %nc1, %chunk
  store ptr %fn, ptr @tdsl_rt_fn
  store ptr %cl, ptr @tdsl_rt_cl
  store i64 %n, ptr @tdsl_rt_n
  store i64 %chunk, ptr @tdsl_rt_chunk
  store i64 %nchunks, ptr @tdsl_rt_nchunks
  store i64 0, ptr @tdsl_rt_next
  store i64 0, ptr @tdsl_rt_done
  store atomic i32 1, ptr @tdsl_rt_open seq_cst, align 4
  %g = atomicrmw add ptr @tdsl_rt_gen, i32 1 seq_cst
  %s = load atomic i32, ptr @tdsl_rt_sleepers seq_cst, align 4
  %asleep = icmp sgt i32 %s, 0
  br i1 %asleep, label %wake, label %work
wake:
  %w = call i64 (i64, ...) @syscall(i64 {sys_futex}, ptr @tdsl_rt_gen, i64 129, i64 2147483647)
  br label %work
work:
  call void @tdsl_rt_help()
  call void @tdsl_rt_wait_done(i64 %nchunks)
  store atomic i32 0, ptr @tdsl_rt_open seq_cst, align 4
  call void @tdsl_rt_wait_idle()
  store atomic i32 0, ptr @tdsl_rt_lock release, align 4
  br label %done
serial:
  call void %fn(i64 0, i64 %n, ptr %cl)
  br label %done
done:
  ret void
}}

define internal ptr @tdsl_rt_worker(ptr %arg) {{
entry:
  %g0 = load atomic i32, ptr @tdsl_rt_gen acquire, align 4
  br label %wait
wait:
  %my = phi i32 [%g0, %entry], [%g1, %finished]
  br label %spin
spin:
  %i = phi i32 [0, %wait], [%i1, %pause]
  %gs = load atomic i32, ptr @tdsl_rt_gen acquire, align 4
  %news = icmp ne i32 %gs, %my
  br i1 %news, label %got, label %spinmore
spinmore:
  %i1 = add i32 %i, 1
  %tired = icmp sgt i32 %i, {_WORKER_SPIN}
  br i1 %tired, label %sleep, label %pause
pause:
  {pause}
  br label %spin
sleep:
  %sl = atomicrmw add ptr @tdsl_rt_sleepers, i32 1 seq_cst
  %gz = load atomic i32, ptr @tdsl_rt_gen seq_cst, align 4
  %same = icmp eq i32 %gz, %my
  br i1 %same, label %park, label %woke
park:
  %my64 = zext i32 %my to i64
  %r = call i64 (i64, ...) @syscall(i64 {sys_futex}, ptr @tdsl_rt_gen, i64 128, i64 %my64, ptr null)
  br label %woke
woke:
  %sl2 = atomicrmw sub ptr @tdsl_rt_sleepers, i32 1 seq_cst
  %gw = load atomic i32, ptr @tdsl_rt_gen acquire, align 4
  %neww = icmp ne i32 %gw, %my
  br i1 %neww, label %got, label %sleep
got:
  %a = atomicrmw add ptr @tdsl_rt_active, i32 1 seq_cst
  %g1 = load atomic i32, ptr @tdsl_rt_gen seq_cst, align 4
  %o = load atomic i32, ptr @tdsl_rt_open seq_cst, align 4
  %isopen = icmp ne i32 %o, 0
  br i1 %isopen, label %help, label %finished
help:
  call void @tdsl_rt_help()
  br label %finished
finished:
  %a2 = atomicrmw sub ptr @tdsl_rt_active, i32 1 seq_cst
  br label %wait
}}

define i32 @tdsl_rt_start(i32 %count) {{
entry:
  %tid = alloca i64, align 8
  br label %loop
loop:
  %i = phi i32 [0, %entry], [%i1, %next]
  %made = phi i32 [0, %entry], [%made1, %next]
  %more = icmp slt i32 %i, %count
  br i1 %more, label %create, label %exit
create:
  %rc = call i32 @pthread_create(ptr %tid, ptr null, ptr @tdsl_rt_worker, ptr null)
  %ok = icmp eq i32 %rc, 0
  br i1 %ok, label %detach, label %next
detach:
  %t = load i64, ptr %tid
  %d = call i32 @pthread_detach(i64 %t)
  br label %next
next:
  %inc = zext i1 %ok to i32
  %made1 = add i32 %made, %inc
  %i1 = add i32 %i, 1
  br label %loop
exit:
  %total = add i32 %made, 1
  store i32 %total, ptr @tdsl_rt_nthreads
  store atomic i32 %made, ptr @tdsl_rt_nworkers release, align 4
  ret i32 %made
}}

define void @tdsl_rt_reset_after_fork() {{
entry:
  store i32 0, ptr @tdsl_rt_nworkers
  store i32 1, ptr @tdsl_rt_nthreads
  store i32 0, ptr @tdsl_rt_lock
  store i32 0, ptr @tdsl_rt_open
  store i32 0, ptr @tdsl_rt_active
  store i32 0, ptr @tdsl_rt_sleepers
  ret void
}}
"""


_LOCK = threading.Lock()
_RT: dict[str, int] = {}


def num_threads() -> int:
    """Threads a parallel loop uses: TDSL_NUM_THREADS, else the cores this process may run on."""
    env = os.environ.get("TDSL_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _compile() -> dict[str, int]:
    from .. import cache

    host = jit.host_info()
    arch = platform.machine().lower()
    sys_futex = _SYS_FUTEX.get(arch)
    text = _ir(host.triple, sys_futex if sys_futex is not None else -1)
    key = cache.disk_key("runtime", hashlib.sha256(text.encode()).hexdigest())
    entry = cache.disk_load(key)
    obj = entry.obj if entry is not None else None
    if obj is None:
        mod = jit.parse_and_verify(text, "the parallel runtime")
        jit.optimize(mod)
        obj = jit.emit_object(mod)
        cache.disk_store(key, obj, {"kind": "runtime"})
    addrs = jit.load_object(obj, ["tdsl_rt_launch", "tdsl_rt_start", "tdsl_rt_reset_after_fork",
                                  "tdsl_rt_nthreads"])
    addrs["futex"] = sys_futex is not None
    return addrs


def _after_fork_in_child() -> None:
    if _RT:
        import ctypes

        ctypes.CFUNCTYPE(None)(_RT["tdsl_rt_reset_after_fork"])()
        _RT["started"] = 0


def runtime() -> dict[str, int]:
    """Addresses of the runtime's entry points; the workers are started on first use."""
    if _RT.get("started"):
        return _RT
    with _LOCK:
        if not _RT:
            _RT.update(_compile())
            os.register_at_fork(after_in_child=_after_fork_in_child)
        if not _RT.get("started"):
            import ctypes

            workers = num_threads() - 1 if _RT["futex"] else 0
            if workers > 0:
                ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32)(_RT["tdsl_rt_start"])(workers)
            _RT["started"] = 1
    return _RT


def launch_address() -> int:
    """The address of `tdsl_rt_launch(fn, closure, n)`, starting the pool if needed."""
    return runtime()["tdsl_rt_launch"]
