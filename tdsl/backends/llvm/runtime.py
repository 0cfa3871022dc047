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
and the region then waits for it to be scheduled again (milliseconds): slower than one thread.
So the launcher parks on a futex instead of spinning while it waits (its core can run the
worker), and it measures each region against its own pace: when the region took no less time
than the launcher alone would have needed, that loop (by its `fn`) runs serially for the next
1, 2, 4, ... `_BACKOFF_MAX` launches and then tries the threads again.

Protocol: `next` holds the region's tag (its generation) in its high 32 bits and the next free
iteration in the low 32; a chunk is claimed by a CAS on `next` after reading the region's
parameters. Launcher: close the old tag (next = new tag | all ones, so no late CAS with an old
tag succeeds), publish fn/closure/n/chunk sizes, done = complete = 0, next = new tag | 0,
gen += 1 and wake sleepers, help, wait for complete (set by whoever finishes the last
iteration), unlock. A thread whose CAS succeeds read the parameters of a region that cannot
finish before its chunk does, so the launcher never waits for workers that hold nothing, and
workers need no "active" count. Loops over more than 2**31 iterations run as several regions.
"""
from __future__ import annotations

import hashlib
import os
import platform
import threading

from . import jit

_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}
_FUTEX_WAIT, _FUTEX_WAKE = 128, 129   # the _PRIVATE variants: the pool is one process's
_WORKER_SPIN = 20000      # pause iterations (~0.3 ms) before a worker parks on the futex
_WAIT_SPIN = 2000         # pause iterations before the launcher parks waiting for a worker
_MAX_CHUNK = 4            # no chunk is bigger than 1/(4 * threads) of the loop ...
_GUIDED = 2               # ... each is 1/(2 * threads) of the iterations left ...
_MIN_CHUNK = 32           # ... but at least 1/(32 * threads) of the loop (one iteration)
_PIECE = 1 << 31          # iterations per region; longer loops run as several regions
_SLOTS = 64               # parallel loops whose back-off state is kept (a direct-mapped table)
_BACKOFF_MAX = 32         # launches a loop runs serially at most before trying threads again

# next: the region's tag (its gen) in the high 32 bits, the next free iteration in the low 32.
_GLOBALS = {"gen": "i32", "fn": "ptr", "cl": "ptr", "n": "i64", "base": "i64", "div": "i64",
            "cap": "i64", "grain": "i64", "next": "i64", "done": "i64", "complete": "i32",
            "lwait": "i32", "lock": "i32", "nworkers": "i32", "sleepers": "i32"}


def _ir(triple: str, sys_futex: int) -> str:
    x86 = triple.startswith(("x86_64", "i686", "i386"))
    pause = "call void @llvm.x86.sse2.pause()" if x86 else "call i32 @sched_yield()"
    pause_decl = "declare void @llvm.x86.sse2.pause()" if x86 else ""
    glob = [f"@tdsl_rt_{name} = internal global {ty} {'null' if ty == 'ptr' else '0'}, align 64"
            for name, ty in _GLOBALS.items()]
    glob += [f"@tdsl_rt_tab_{name} = internal global [{_SLOTS} x {ty}] zeroinitializer, align 64"
             for name, ty in (("fn", "ptr"), ("left", "i32"), ("back", "i32"))]
    return f"""
target triple = "{triple}"
{chr(10).join(glob)}
@tdsl_rt_nthreads = global i32 1, align 64

declare i64 @syscall(i64, ...)
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)
declare i32 @sched_yield()
{pause_decl}

; Take chunks of the current region until none is left. A chunk is claimed by a CAS on next
; that also checks the region's tag, so a thread that read the region's parameters late (the
; launcher already publishing the next one) claims nothing with them.
define internal i64 @tdsl_rt_help() {{
entry:
  br label %loop
loop:
  %ran = phi i64 [0, %entry], [%ran, %size], [%ran1, %body]
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
  br i1 %won, label %body, label %loop
body:
  %lo = add i64 %base, %idx
  %hi = add i64 %lo, %c
  call void %fn(i64 %lo, i64 %hi, ptr %cl)
  %ran1 = add i64 %ran, %c
  %d = atomicrmw add ptr @tdsl_rt_done, i64 %c acq_rel
  %d1 = add i64 %d, %c
  %last = icmp eq i64 %d1, %n
  br i1 %last, label %finish, label %loop
finish:
  store atomic i32 1, ptr @tdsl_rt_complete seq_cst, align 4
  %w = load atomic i32, ptr @tdsl_rt_lwait seq_cst, align 4
  %waiting = icmp ne i32 %w, 0
  br i1 %waiting, label %wake, label %exit
wake:
  %r = call i64 (i64, ...) @syscall(i64 {sys_futex}, ptr @tdsl_rt_complete, i64 {_FUTEX_WAKE}, i64 1)
  br label %exit
exit:
  %all = phi i64 [%ran, %loop], [%ran1, %finish], [%ran1, %wake]
  ret i64 %all
}}

; The launcher waits for the last chunk: it spins briefly, then parks, so that a worker which
; lost its core to another process can be run on the launcher's core.
define internal void @tdsl_rt_wait_done() {{
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %pause], [%i, %woke]
  %c = load atomic i32, ptr @tdsl_rt_complete acquire, align 4
  %ok = icmp ne i32 %c, 0
  br i1 %ok, label %exit, label %spin
spin:
  %i1 = add i64 %i, 1
  %long = icmp sgt i64 %i, {_WAIT_SPIN}
  br i1 %long, label %sleep, label %pause
pause:
  {pause}
  br label %loop
sleep:
  store atomic i32 1, ptr @tdsl_rt_lwait seq_cst, align 4
  %c2 = load atomic i32, ptr @tdsl_rt_complete seq_cst, align 4
  %still = icmp eq i32 %c2, 0
  br i1 %still, label %park, label %woke
park:
  %r = call i64 (i64, ...) @syscall(i64 {sys_futex}, ptr @tdsl_rt_complete, i64 {_FUTEX_WAIT}, i64 0, ptr null)
  br label %woke
woke:
  store atomic i32 0, ptr @tdsl_rt_lwait seq_cst, align 4
  br label %loop
exit:
  ret void
}}

; One region of pn iterations starting at base: close the old tag, publish, open, wake, help,
; wait. Returns whether it paid: the region took less time than the launcher alone would have
; needed, estimated from its own pace (its busy time per iteration it ran, times pn).
define internal i1 @tdsl_rt_region(ptr %fn, ptr %cl, i64 %base, i64 %pn, i64 %nthreads) {{
entry:
  %t0 = call i64 @tdsl_rt_now()
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
  store atomic i32 0, ptr @tdsl_rt_complete monotonic, align 4
  store atomic i64 %tag, ptr @tdsl_rt_next seq_cst, align 8
  store atomic i32 %g1, ptr @tdsl_rt_gen seq_cst, align 4
  %s = load atomic i32, ptr @tdsl_rt_sleepers seq_cst, align 4
  %asleep = icmp sgt i32 %s, 0
  br i1 %asleep, label %wake, label %work
wake:
  %w = call i64 (i64, ...) @syscall(i64 {sys_futex}, ptr @tdsl_rt_gen, i64 {_FUTEX_WAKE}, i64 2147483647)
  br label %work
work:
  %mine = call i64 @tdsl_rt_help()
  %t1 = call i64 @tdsl_rt_now()
  call void @tdsl_rt_wait_done()
  %t2 = call i64 @tdsl_rt_now()
  %busy = sub i64 %t1, %t0
  %took = sub i64 %t2, %t0
  %fbusy = uitofp i64 %busy to double
  %ftook = uitofp i64 %took to double
  %fmine = uitofp i64 %mine to double
  %fpn = uitofp i64 %pn to double
  %alone = fmul double %fbusy, %fpn
  %par = fmul double %ftook, %fmine
  %pays = fcmp olt double %par, %alone
  ret i1 %pays
}}

; Per parallel loop (a small table indexed by the body's address; a collision only mixes two
; loops' history), how many more launches run serially, and the current back-off.
define internal i64 @tdsl_rt_slot(ptr %fn) {{
entry:
  %fi = ptrtoint ptr %fn to i64
  %h0 = lshr i64 %fi, 4
  %h1 = lshr i64 %fi, 10
  %h2 = xor i64 %h0, %h1
  %slot = and i64 %h2, {_SLOTS - 1}
  ret i64 %slot
}}

; After a parallel launch: paid, forget the loop's back-off; did not, run it serially for the
; next 1, 2, 4, ... {_BACKOFF_MAX} launches, then try again.
define internal void @tdsl_rt_learn(ptr %fn, i1 %pays) {{
entry:
  %slot = call i64 @tdsl_rt_slot(ptr %fn)
  %pfn = getelementptr [{_SLOTS} x ptr], ptr @tdsl_rt_tab_fn, i64 0, i64 %slot
  %pleft = getelementptr [{_SLOTS} x i32], ptr @tdsl_rt_tab_left, i64 0, i64 %slot
  %pback = getelementptr [{_SLOTS} x i32], ptr @tdsl_rt_tab_back, i64 0, i64 %slot
  %owner = load atomic ptr, ptr %pfn monotonic, align 8
  %same = icmp eq ptr %owner, %fn
  %b0 = load atomic i32, ptr %pback monotonic, align 4
  %b = select i1 %same, i32 %b0, i32 0
  %b2 = shl i32 %b, 1
  %b3 = call i32 @llvm.umax.i32(i32 %b2, i32 1)
  %b4 = call i32 @llvm.umin.i32(i32 %b3, i32 {_BACKOFF_MAX})
  %back = select i1 %pays, i32 0, i32 %b4
  store atomic ptr %fn, ptr %pfn monotonic, align 8
  store atomic i32 %back, ptr %pback monotonic, align 4
  store atomic i32 %back, ptr %pleft monotonic, align 4
  ret void
}}

; Whether this launch of fn should run serially (its loop is backing off); counts it down.
define internal i1 @tdsl_rt_backing_off(ptr %fn) {{
entry:
  %slot = call i64 @tdsl_rt_slot(ptr %fn)
  %pfn = getelementptr [{_SLOTS} x ptr], ptr @tdsl_rt_tab_fn, i64 0, i64 %slot
  %pleft = getelementptr [{_SLOTS} x i32], ptr @tdsl_rt_tab_left, i64 0, i64 %slot
  %owner = load atomic ptr, ptr %pfn monotonic, align 8
  %same = icmp eq ptr %owner, %fn
  br i1 %same, label %known, label %no
known:
  %left = load atomic i32, ptr %pleft monotonic, align 4
  %wait = icmp sgt i32 %left, 0
  br i1 %wait, label %yes, label %no
yes:
  %left1 = sub i32 %left, 1
  store atomic i32 %left1, ptr %pleft monotonic, align 4
  ret i1 true
no:
  ret i1 false
}}

define internal i64 @tdsl_rt_now() {{
entry:
  %ts = alloca [2 x i64], align 8
  %r = call i32 @clock_gettime(i32 1, ptr %ts)
  %s = load i64, ptr %ts, align 8
  %pns = getelementptr i64, ptr %ts, i64 1
  %ns = load i64, ptr %pns, align 8
  %t = mul i64 %s, 1000000000
  %t1 = add i64 %t, %ns
  ret i64 %t1
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
  br i1 %trivial, label %serial, label %adapt
adapt:
  %off = call i1 @tdsl_rt_backing_off(ptr %fn)
  br i1 %off, label %serial, label %trylock
trylock:
  %x = cmpxchg ptr @tdsl_rt_lock, i32 0, i32 1 acquire monotonic
  %got = extractvalue {{ i32, i1 }} %x, 1
  br i1 %got, label %region, label %serial
region:
  %nw64 = zext i32 %nw to i64
  %nthreads = add i64 %nw64, 1
  br label %piece
piece:
  %base = phi i64 [0, %region], [%base1, %piece]
  %left = sub i64 %n, %base
  %pn = call i64 @llvm.umin.i64(i64 %left, i64 {_PIECE})
  %pays = call i1 @tdsl_rt_region(ptr %fn, ptr %cl, i64 %base, i64 %pn, i64 %nthreads)
  %base1 = add i64 %base, %pn
  %more = icmp slt i64 %base1, %n
  br i1 %more, label %piece, label %unlock
unlock:
  call void @tdsl_rt_learn(ptr %fn, i1 %pays)
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
  store i32 0, ptr @tdsl_rt_lwait
  ret void
}}

declare i64 @llvm.umax.i64(i64, i64)
declare i32 @llvm.umax.i32(i32, i32)
declare i32 @llvm.umin.i32(i32, i32)
declare i32 @clock_gettime(i32, ptr)
declare i64 @llvm.umin.i64(i64, i64)
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


def _experiment_ir(triple, sys_futex):  # EXPERIMENT: temporary A/B switch, removed before the report
    exp = os.environ.get("TDSL_RT_EXPERIMENT", "")
    if exp == "old":
        import importlib.util
        spec = importlib.util.spec_from_file_location("rt_orig", "/tmp/runtime_orig.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod._ir(triple, sys_futex)
    g = globals()
    saved = {}
    for item in filter(None, exp.split(",")):
        k, v = item.split("=")
        saved[k] = g[k]
        g[k] = int(v)
    try:
        return _ir(triple, sys_futex)
    finally:
        g.update(saved)


def _compile() -> dict[str, int]:
    from .. import cache

    host = jit.host_info()
    arch = platform.machine().lower()
    sys_futex = _SYS_FUTEX.get(arch)
    text = _experiment_ir(host.triple, sys_futex if sys_futex is not None else -1)  # EXPERIMENT
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
