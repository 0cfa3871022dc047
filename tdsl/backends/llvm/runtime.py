"""The parallel runtime: a persistent thread pool written in LLVM IR against libc.

No C compiler and no libgomp: the pool is an IR module JIT-compiled once per process. Workers
(one per available core, minus the calling thread, which participates) are created lazily with
`pthread_create`, spin briefly after a region and then park on a futex (`syscall(SYS_futex)`).

A parallel region is `tdsl_rt_launch(fn, closure, n)`; `fn(lo, hi, closure)` runs the chunk
[lo, hi) of the loop. Chunks are guided: each thread claims 1/(2 * threads) of the iterations
left, capped at 1/(4 * threads) of the loop and at least 1/(32 * threads) of it, so the last
chunks are small and threads finish together. Regions are serialised by a try-lock: a region
started while another is running (a second Python thread, or a nested parallel loop) runs
serially in its caller, which is correct and keeps the cores busy anyway.

On a machine shared with other processes a worker can lose its core while it holds a chunk,
and the region then waits for it to be scheduled again (milliseconds). Small tail chunks bound
what is left of a chunk once its thread runs again; the launcher spins briefly and then yields
while it waits (parking it on a futex was measured worse: another process takes the idle core).

Protocol: `next` holds the region's tag (its generation) in its high 32 bits and the next free
iteration in the low 32; a chunk is claimed by a CAS on `next` after reading the region's
parameters. Launcher: close the old tag (next = new tag | all ones, so no late CAS with an old
tag succeeds), publish fn/closure/n/chunk sizes, done = 0, next = new tag | 0, gen += 1 and
wake sleepers, help, wait until done (iterations finished) reaches n, unlock. A thread whose
CAS succeeds read the parameters of a region that cannot finish before its chunk does, so the
launcher never waits for workers that hold nothing (no "active" count, unlike a pool that must
drain its workers before reusing the region's words). Loops over more than 2**31 iterations
run as several regions.
"""
from __future__ import annotations

import hashlib
import os
import platform
import threading

from ..forksafe import fork_safe
from . import jit

_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}
_FUTEX_WAIT, _FUTEX_WAKE = 128, 129   # the _PRIVATE variants: the pool is one process's
_WORKER_SPIN = 20000      # pause iterations (~0.3 ms) before a worker parks on the futex
_WAIT_SPIN = 2000         # pause iterations before the launcher starts yielding
_MAX_CHUNK = 4            # no chunk is bigger than 1/(4 * threads) of the loop ...
_GUIDED = 2               # ... each is 1/(2 * threads) of the iterations left ...
_MIN_CHUNK = 32           # ... but at least 1/(32 * threads) of the loop (one iteration)
_PIECE = 1 << 31          # iterations per region; longer loops run as several regions

# next: the region's tag (its gen) in the high 32 bits, the next free iteration in the low 32.
_GLOBALS = {"gen": "i32", "fn": "ptr", "cl": "ptr", "n": "i64", "base": "i64", "div": "i64",
            "cap": "i64", "grain": "i64", "next": "i64", "done": "i64", "lock": "i32", "nworkers": "i32", "sleepers": "i32"}


def _ir(triple: str, sys_futex: int) -> str:
    x86 = triple.startswith(("x86_64", "i686", "i386"))
    pause = "call void @llvm.x86.sse2.pause()" if x86 else "call i32 @sched_yield()"
    pause_decl = "declare void @llvm.x86.sse2.pause()" if x86 else ""
    glob = [f"@tdsl_rt_{name} = internal global {ty} {'null' if ty == 'ptr' else '0'}, align 64"
            for name, ty in _GLOBALS.items()]
    return f"""
target triple = "{triple}"
{chr(10).join(glob)}
@tdsl_rt_nthreads = global i32 1, align 64
@tdsl_rt_interrupted = global i32 0, align 64
@tdsl_rt_prev_sigint = global ptr null, align 8

declare i64 @syscall(i64, ...)
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)
declare i32 @sched_yield()
{pause_decl}

; Take chunks of the current region until none is left. A chunk is claimed by a CAS on next
; that also checks the region's tag, so a thread that read the region's parameters late (the
; launcher already publishing the next one) claims nothing with them.
define internal void @tdsl_rt_help() {{
entry:
  br label %loop
loop:
  %cur = load atomic i64, ptr @tdsl_rt_next acquire, align 8
  %n = load atomic i64, ptr @tdsl_rt_n monotonic, align 8
  %idx = and i64 %cur, 4294967295
  %more = icmp ult i64 %idx, %n
  br i1 %more, label %size, label %exit
size:
  %fn = load atomic ptr, ptr @tdsl_rt_fn monotonic, align 8
  %cl = load atomic ptr, ptr @tdsl_rt_cl monotonic, align 8
  %base = load atomic i64, ptr @tdsl_rt_base monotonic, align 8
  %div = load atomic i64, ptr @tdsl_rt_div monotonic, align 8
  %cap = load atomic i64, ptr @tdsl_rt_cap monotonic, align 8
  %grain = load atomic i64, ptr @tdsl_rt_grain monotonic, align 8
  %rem = sub i64 %n, %idx
  %g0 = udiv i64 %rem, %div
  %g1 = call i64 @llvm.umax.i64(i64 %g0, i64 %grain)
  %g2 = call i64 @llvm.umin.i64(i64 %g1, i64 %cap)
  %c = call i64 @llvm.umin.i64(i64 %g2, i64 %rem)
  %new = add i64 %cur, %c
  %x = cmpxchg ptr @tdsl_rt_next, i64 %cur, i64 %new acq_rel acquire
  %won = extractvalue {{ i64, i1 }} %x, 1
  br i1 %won, label %claimed, label %loop
claimed:
  %stop = load atomic i32, ptr @tdsl_rt_interrupted monotonic, align 4
  %skip = icmp ne i32 %stop, 0
  br i1 %skip, label %count, label %body
body:
  %lo = add i64 %base, %idx
  %hi = add i64 %lo, %c
  call void %fn(i64 %lo, i64 %hi, ptr %cl)
  br label %count
count:
  %d = atomicrmw add ptr @tdsl_rt_done, i64 %c release
  br label %loop
exit:
  ret void
}}

; The launcher waits for the last chunk: it spins briefly, then yields its core (to a worker
; that lost its core, if the scheduler put it there). Parking on a futex instead was measured
; worse on a loaded machine: an idle core is soon taken by another process.
define internal void @tdsl_rt_wait_done(i64 %n) {{
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %yield], [%i1, %pause]
  %d = load atomic i64, ptr @tdsl_rt_done acquire, align 8
  %ok = icmp uge i64 %d, %n
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

; One region of pn iterations starting at base: close the old tag, publish, open, wake, help,
; wait.
define internal void @tdsl_rt_region(ptr %fn, ptr %cl, i64 %base, i64 %pn, i64 %nthreads) {{
entry:
  %g = load atomic i32, ptr @tdsl_rt_gen monotonic, align 4
  %g1 = add i32 %g, 1
  %g64 = zext i32 %g1 to i64
  %tag = shl i64 %g64, 32
  %closed = or i64 %tag, 4294967295
  store atomic i64 %closed, ptr @tdsl_rt_next seq_cst, align 8
  %div = mul i64 %nthreads, {_GUIDED}
  %ct = mul i64 %nthreads, {_MAX_CHUNK}
  %ct1 = add i64 %pn, %ct
  %ct2 = sub i64 %ct1, 1
  %cap = udiv i64 %ct2, %ct
  %gt = mul i64 %nthreads, {_MIN_CHUNK}
  %gt1 = add i64 %pn, %gt
  %gt2 = sub i64 %gt1, 1
  %grain = udiv i64 %gt2, %gt
  store atomic ptr %fn, ptr @tdsl_rt_fn monotonic, align 8
  store atomic ptr %cl, ptr @tdsl_rt_cl monotonic, align 8
  store atomic i64 %pn, ptr @tdsl_rt_n monotonic, align 8
  store atomic i64 %base, ptr @tdsl_rt_base monotonic, align 8
  store atomic i64 %div, ptr @tdsl_rt_div monotonic, align 8
  store atomic i64 %cap, ptr @tdsl_rt_cap monotonic, align 8
  store atomic i64 %grain, ptr @tdsl_rt_grain monotonic, align 8
  store atomic i64 0, ptr @tdsl_rt_done monotonic, align 8
  store atomic i64 %tag, ptr @tdsl_rt_next seq_cst, align 8
  store atomic i32 %g1, ptr @tdsl_rt_gen seq_cst, align 4
  %s = load atomic i32, ptr @tdsl_rt_sleepers seq_cst, align 4
  %asleep = icmp sgt i32 %s, 0
  br i1 %asleep, label %wake, label %work
wake:
  %w = call i64 (i64, ...) @syscall(i64 {sys_futex}, ptr @tdsl_rt_gen, i64 {_FUTEX_WAKE}, i64 2147483647)
  br label %work
work:
  call void @tdsl_rt_help()
  call void @tdsl_rt_wait_done(i64 %pn)
  ret void
}}

; Ctrl-C: chained before CPython's SIGINT handler (install_sigint_handler). During a region it
; sets the flag that makes every thread skip the chunks it claims from then on (chunks already
; running finish), so the region ends and launch returns 1; CPython's handler still runs.
define void @tdsl_rt_on_sigint(i32 %sig) {{
entry:
  %busy = load atomic i32, ptr @tdsl_rt_lock monotonic, align 4
  %inside = icmp ne i32 %busy, 0
  br i1 %inside, label %flag, label %chain
flag:
  store atomic i32 1, ptr @tdsl_rt_interrupted monotonic, align 4
  br label %chain
chain:
  %prev = load ptr, ptr @tdsl_rt_prev_sigint, align 8
  %none = icmp eq ptr %prev, null
  br i1 %none, label %exit, label %call
call:
  call void %prev(i32 %sig)
  br label %exit
exit:
  ret void
}}

; Returns 1 when Ctrl-C stopped the region before all its iterations ran, else 0.
define i32 @tdsl_rt_launch(ptr %fn, ptr %cl, i64 %n) {{
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
  store atomic i32 0, ptr @tdsl_rt_interrupted monotonic, align 4
  %nw64 = zext i32 %nw to i64
  %nthreads = add i64 %nw64, 1
  br label %piece
piece:
  %base = phi i64 [0, %region], [%base1, %piece]
  %left = sub i64 %n, %base
  %pn = call i64 @llvm.umin.i64(i64 %left, i64 {_PIECE})
  call void @tdsl_rt_region(ptr %fn, ptr %cl, i64 %base, i64 %pn, i64 %nthreads)
  %base1 = add i64 %base, %pn
  %stop = load atomic i32, ptr @tdsl_rt_interrupted monotonic, align 4
  %go = icmp eq i32 %stop, 0
  %left1 = icmp slt i64 %base1, %n
  %more = and i1 %left1, %go
  br i1 %more, label %piece, label %unlock
unlock:
  store atomic i32 0, ptr @tdsl_rt_lock release, align 4
  %stopped = icmp ne i32 %stop, 0
  %rc = zext i1 %stopped to i32
  ret i32 %rc
serial:
  call void %fn(i64 0, i64 %n, ptr %cl)
  br label %done
done:
  ret i32 0
}}

define internal ptr @tdsl_rt_worker(ptr %arg) {{
entry:
  %g0 = load atomic i32, ptr @tdsl_rt_gen acquire, align 4
  br label %wait
wait:
  %my = phi i32 [%g0, %entry], [%g1, %got]
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
  %r = call i64 (i64, ...) @syscall(i64 {sys_futex}, ptr @tdsl_rt_gen, i64 {_FUTEX_WAIT}, i64 %my64, ptr null)
  br label %woke
woke:
  %sl2 = atomicrmw sub ptr @tdsl_rt_sleepers, i32 1 seq_cst
  %gw = load atomic i32, ptr @tdsl_rt_gen acquire, align 4
  %neww = icmp ne i32 %gw, %my
  br i1 %neww, label %got, label %sleep
got:
  %g1 = load atomic i32, ptr @tdsl_rt_gen acquire, align 4
  call void @tdsl_rt_help()
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
  store i32 0, ptr @tdsl_rt_sleepers
  ret void
}}

declare i64 @llvm.umax.i64(i64, i64)
declare i64 @llvm.umin.i64(i64, i64)
"""


_LOCK = threading.Lock()
fork_safe(__name__, "_LOCK")
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
                                  "tdsl_rt_nthreads", "tdsl_rt_on_sigint", "tdsl_rt_prev_sigint"])
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

            install_sigint_handler()
            workers = num_threads() - 1 if _RT["futex"] else 0
            if workers > 0:
                ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32)(_RT["tdsl_rt_start"])(workers)
            _RT["started"] = 1
    return _RT


def install_sigint_handler() -> bool:
    """Chain tdsl_rt_on_sigint before the process's SIGINT handler when that is CPython's (a
    Python-level handler or the default KeyboardInterrupt one), so that Ctrl-C stops a running
    parallel region between chunks. Not on the main thread, not on a libc without the usual
    `struct sigaction`, or with SIGINT ignored / at its default: nothing changes (False). A later
    `signal.signal(SIGINT, ...)` puts CPython's handler back alone: Ctrl-C then waits for the
    kernel again."""
    import ctypes
    import signal

    if threading.current_thread() is not threading.main_thread() or platform.system() != "Linux":
        return False
    if not callable(signal.getsignal(signal.SIGINT)):
        return False   # SIG_IGN, SIG_DFL or a handler not installed from Python
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        sigaction = libc.sigaction
    except (OSError, AttributeError):
        return False
    # glibc's struct sigaction on 64-bit Linux: handler, 128-byte mask, int flags, restorer
    size = 8 + 128 + 8 + 8
    old = ctypes.create_string_buffer(size)
    if sigaction(signal.SIGINT, None, old) != 0:
        return False
    prev = int.from_bytes(old.raw[:8], "little")
    if prev in (0, 1) or prev == _RT["tdsl_rt_on_sigint"]:
        return prev != 0 and prev != 1
    new = ctypes.create_string_buffer(_RT["tdsl_rt_on_sigint"].to_bytes(8, "little") + old.raw[8:], size)
    ctypes.c_void_p.from_address(_RT["tdsl_rt_prev_sigint"]).value = prev
    return sigaction(signal.SIGINT, new, None) == 0


def launch_address() -> int:
    """The address of `tdsl_rt_launch(fn, closure, n)`, starting the pool if needed."""
    return runtime()["tdsl_rt_launch"]
