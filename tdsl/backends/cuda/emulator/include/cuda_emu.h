// cuda_emu.h: tdsl's model of the CUDA execution model, for running generated CUDA C++ on a CPU.
//
// What it models: a grid of blocks run one block at a time; the threads of a block as
// cooperative fibers (ucontext) that switch only at __syncthreads() and at warp-collective
// operations (shuffles, WMMA); __shared__ arrays per block, local arrays per thread;
// threadIdx/blockIdx/blockDim/gridDim; half / nv_bfloat16 (round-to-nearest-even, arithmetic
// in float rounded once, as the hardware does); the CUDA math functions the tdsl codegen emits;
// float4-style vector types (16-byte alignment checked); WMMA m16n16k16 fragments whose
// load/mma/store are warp-collective (all 32 lanes must call them with the same arguments);
// atomics; warp shuffles (__shfl_*_sync). Every access through a kernel's pointer parameters,
// shared arrays and local arrays is bounds-checked; a failure names the buffer and the index.
//
// ldmatrix and mma.sync (ptx_mma.h) are modelled lane by lane as the PTX ISA defines them, and
// ldmatrix counts its shared-memory bank conflicts; global accesses are counted in 32-byte
// sectors per warp request (global_counters.h).
//
// What it does not model: timing, caches, bank conflicts outside ldmatrix, real warp
// scheduling (lanes of a warp do NOT run in lock step here: code that relies on implicit
// warp-synchronous execution without __syncwarp / shuffles is reported as a race or computes
// differently), memory-model subtleties (fences, volatile), and the exact rounding of tensor
// cores (fp32 accumulation in k order here).
//
// The tdsl emulator driver (tdsl/backends/cuda/emulator/) compiles kernel.source with four
// mechanical rewrites (pointer parameters -> tdsl_emu::gptr, __shared__ / local array
// declarations and views into the dynamic shared array -> checked arrays) and a generated
// launcher per kernel.
#pragma once
#ifndef TDSL_CUDA_EMU_H
#define TDSL_CUDA_EMU_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <deque>
#include <new>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static

struct uint3 { unsigned int x, y, z; };
struct dim3 { unsigned int x, y, z; };

namespace tdsl_emu {

struct Abort {};  // thrown inside a thread on an error; caught at the fiber's entry

enum ThreadState { RUNNABLE = 0, AT_BARRIER = 1, AT_WARP = 2, DONE = 3, AT_MBARRIER = 4 };

struct Thread {
  ucontext_t ctx;
  int state;
  int line;            // the __syncthreads() line it waits at, or the collective's id
  unsigned warp_gen;   // warp collectives done so far
  uint3 idx;
  int linear;
};

// window: the byte offset of a shared array in the block's shared memory as the kernel places it
// (its offset in the dynamic array for a view into it; 0 for a static array, which the GPU aligns
// as declared): address-bit rules (the TMA / wgmma swizzles) act on window + offset in the array
struct Region { const char* begin; const char* end; const char* name; bool shared; long long window; };

enum { SLOT_BYTES = 160, MAX_THREADS = 1024, MAX_REGIONS = 64 };
// the warp-collective operations (a warp's lanes must all be at the same one)
enum { OP_SHFL = 1, OP_SYNCWARP = 2, OP_WMMA_LOAD = 3, OP_WMMA_MMA = 4, OP_WMMA_STORE = 5, OP_WGMMA_RS = 6 };

struct State {
  uint3 thread_idx, block_idx, block_dim, grid_dim;
  Thread* threads = nullptr;
  int nthreads = 0;
  Thread* cur = nullptr;
  bool fibers = false;
  ucontext_t sched;
  char* stacks = nullptr;
  size_t stack_bytes = 0, stacks_total = 0;
  void (*body)(void*) = nullptr;
  void* closure = nullptr;
  unsigned poison = 0x7f;          // byte pattern new shared/local arrays start with
  unsigned long long block_epoch = 0;
  bool failed = false;
  char error[1024];
  // warp-collective exchange slots: [generation parity][thread]
  alignas(16) unsigned char slots[2][MAX_THREADS][SLOT_BYTES];
  Region regions[MAX_REGIONS];
  int nregions = 0;
  unsigned long long switches = 0;
  long long dynamic_shared = 0;    // bytes of dynamic shared memory the launch gives (tdsl_emu_set_dynamic_shared)
};

inline State& state() {
  static State s;
  return s;
}

[[noreturn]] inline void fail_text(const char* text) {
  State& s = state();
  if (!s.failed) {
    s.failed = true;
    snprintf(s.error, sizeof s.error, "%s (block (%u, %u, %u), thread (%u, %u, %u))", text, s.block_idx.x,
             s.block_idx.y, s.block_idx.z, s.thread_idx.x, s.thread_idx.y, s.thread_idx.z);
  }
  throw Abort();
}

template <class... A> [[noreturn]] inline void fail(const char* fmt, A... args) {
  char buf[768];
  snprintf(buf, sizeof buf, fmt, args...);
  fail_text(buf);
}

[[noreturn]] inline void oob(const char* name, long long index, long long extent) {
  fail("out-of-bounds access: %s[%lld], but %s has %lld elements", name, index, name, extent);
}

}  // namespace tdsl_emu

// The emulator's checked variant of a kernel (tdsl.index_check in the IR) wraps each index that
// is not proven in bounds: `A[tdsl_emu_check(j - 1, 16, "A", 1) + i * 16]`.
template <class I, class E> inline I tdsl_emu_check(I i, E extent, const char* buffer, int axis) {
  if ((long long)i < 0 || (long long)i >= (long long)extent)
    ::tdsl_emu::fail("out-of-bounds access: %s index %lld on axis %d is outside [0, %lld)", buffer, (long long)i,
                     axis, (long long)extent);
  return i;
}

namespace tdsl_emu {

inline void add_region(const void* p, size_t bytes, const char* name, bool shared = false, long long window = 0) {
  State& s = state();
  for (int i = 0; i < s.nregions; ++i)
    if (s.regions[i].begin == (const char*)p) return;
  if (s.nregions < MAX_REGIONS)
    s.regions[s.nregions++] = {(const char*)p, (const char*)p + bytes, name, shared, window};
}

// An access of `bytes` at `p` by a device function taking references (WMMA): inside one known buffer?
inline void check_addr(const void* p, size_t bytes, const char* what) {
  State& s = state();
  const char* c = (const char*)p;
  for (int i = 0; i < s.nregions; ++i) {
    const Region& r = s.regions[i];
    if (c >= r.begin && c < r.end) {
      if (c + bytes > r.end)
        fail("out-of-bounds access by %s: %zu bytes at byte offset %lld of %s, which has %lld bytes", what, bytes,
             (long long)(c - r.begin), r.name, (long long)(r.end - r.begin));
      return;
    }
  }
  // not a global or shared buffer: a thread's local array (on its own stack), not checked here
}

// cp.async bookkeeping the shared arrays take part in (defined in cp_async.h)
inline long long& async_in_flight() { static long long n = 0; return n; }   // cp.async copies not yet complete
[[noreturn]] inline void async_race(const char* name, long long index, int owner);
inline void async_register(void* data, int* pend, size_t elem_bytes, long long n, const char* name);
inline void async_thread_exit();
inline void async_reset(int nthreads);
inline void async_check(const void* p, size_t bytes);   // a race if those bytes are a cp.async in flight
// what the async proxy (TMA, wgmma) sees of a shared array (defined in sm90.h)
inline void proxy_register(const void* data, size_t bytes);

// global accesses for the coalescing counters (global_counters.h); a no-op unless counting
inline bool& count_global_on();
inline void count_global(const char* name, long long byte, int bytes);
inline void uncount_global(int n);
inline void count_global_ptr(const void* p, int bytes);

// ------------------------------------------------------------------------ checked memory
template <class T> struct gptr {
  T* base;
  long long extent;   // elements from base
  const char* name;
  long long offset;   // elements of base this pointer is past

  gptr(T* b, long long n, const char* nm, long long off = 0) : base(b), extent(n), name(nm), offset(off) {}
  template <class I> T& operator[](I i) const {
    long long k = offset + (long long)i;
    if (k < 0 || k >= extent) oob(name, k, extent);
    if (count_global_on()) count_global(name, k * (long long)sizeof(T), (int)sizeof(T));
    return base[k];
  }
  template <class I> gptr operator+(I i) const { return gptr(base, extent, name, offset + (long long)i); }
  template <class I> gptr operator-(I i) const { return gptr(base, extent, name, offset - (long long)i); }
  T& operator*() const { return (*this)[0]; }
  // a vector access: (const float4*)(A + i)
  template <class U> explicit operator U*() const {
    long long bytes = (long long)sizeof(U), k = offset * (long long)sizeof(T);
    if (k < 0 || k + bytes > extent * (long long)sizeof(T))
      fail("out-of-bounds vector access: %s[%lld] .. %s[%lld], but %s has %lld elements", name, offset, name,
           offset + (bytes + (long long)sizeof(T) - 1) / (long long)sizeof(T) - 1, name, extent);
    const char* p = (const char*)(base + offset);
    async_check(p, sizeof(U));
    count_global_ptr(p, (int)sizeof(U));   // global buffers only (a shared or local tile's vector access is not)
    if ((uintptr_t)p % alignof(U))
      fail("misaligned %zu-byte vector access to %s[%lld] (address 0x%llx): the GPU faults on it", sizeof(U), name,
           offset, (unsigned long long)(uintptr_t)p);
    return (U*)p;
  }
  operator gptr<const T>() const { return gptr<const T>(base, extent, name, offset); }
};

template <class T, long long N> struct local_array {
  alignas(16) T data[N];
  const char* name;
  explicit local_array(const char* nm) : name(nm) { memset((void*)data, (int)state().poison, sizeof data); }
  template <class I> T& operator[](I i) {
    long long k = (long long)i;
    if (k < 0 || k >= N) oob(name, k, N);
    return data[k];
  }
  template <class I> gptr<T> operator+(I i) { return gptr<T>(data, N, name, (long long)i); }
  operator gptr<T>() { return gptr<T>(data, N, name, 0); }
};

template <class T, long long N> struct shared_array {
  alignas(16) T data[N];
  int pend[N];   // per element: 1 + the thread whose cp.async to it is in flight, 0 when none
  const char* name = nullptr;
  unsigned long long epoch = ~0ULL;
  // `window` >= 0: a view at that byte offset of the dynamic shared array, which must lie within the
  // bytes the launch gives; -1: a static __shared__ array
  shared_array& enter(const char* nm, long long window = -1) {
    State& s = state();
    if (epoch != s.block_epoch) {  // the first thread of this block to get here: fresh memory
      if (window >= 0 && window + (long long)sizeof data > s.dynamic_shared)
        fail("%s lies at bytes [%lld, %lld) of the dynamic shared memory, but the launch gives %lld bytes", nm,
             window, window + (long long)sizeof data, s.dynamic_shared);
      epoch = s.block_epoch;
      name = nm;
      memset((void*)data, (int)s.poison, sizeof data);
      memset((void*)pend, 0, sizeof pend);
      add_region(data, sizeof data, nm, true, window < 0 ? 0 : window);
      async_register(data, pend, sizeof(T), N, nm);
      proxy_register(data, sizeof data);
    }
    return *this;
  }
  template <class I> T& operator[](I i) {
    long long k = (long long)i;
    if (k < 0 || k >= N) oob(name, k, N);
    if (async_in_flight() && pend[k]) async_race(name, k, pend[k] - 1);
    return data[k];
  }
  template <class I> gptr<T> operator+(I i) {   // a vector access starting at element i
    long long k = (long long)i;
    if (async_in_flight() && k >= 0 && k < N && pend[k]) async_race(name, k, pend[k] - 1);
    return gptr<T>(data, N, name, k);
  }
  operator gptr<T>() { return gptr<T>(data, N, name, 0); }
};

// ------------------------------------------------------------------------ fibers and scheduling
inline void yield_to_scheduler() {
  State& s = state();
  if (!s.fibers) fail_text("internal: a barrier or warp-collective operation in a kernel run without fibers");
  Thread* t = s.cur;
  ++s.switches;
  swapcontext(&t->ctx, &s.sched);
  s.cur = t;
  s.thread_idx = t->idx;
  if (s.failed) throw Abort();
}

inline void syncthreads(int line) {
  State& s = state();
  s.cur->state = AT_BARRIER;
  s.cur->line = line;
  yield_to_scheduler();
}

// Warp-collective exchange: every active lane of the warp posts `bytes` of data, waits for the
// others; returns the slots of this generation (slot of lane l at [warp_base + l]).
inline unsigned char (*warp_exchange(const void* mine, size_t bytes, int op))[SLOT_BYTES] {
  State& s = state();
  Thread* t = s.cur;
  unsigned gen = t->warp_gen & 1;
  memcpy(s.slots[gen][t->linear], mine, bytes);
  t->state = AT_WARP;
  t->line = op;
  yield_to_scheduler();
  t->warp_gen++;
  return &s.slots[gen][t->linear & ~31];
}

inline int lane_id() { return state().cur->linear & 31; }
inline int warp_lanes() {  // active lanes of the calling thread's warp
  State& s = state();
  int base = s.cur->linear & ~31;
  int n = s.nthreads - base;
  return n < 32 ? n : 32;
}

inline void trampoline() {
  State& s = state();
  try {
    s.body(s.closure);
    async_thread_exit();
  } catch (Abort&) {
  }
  s.cur->state = DONE;
  // returning resumes uc_link (the scheduler)
}

inline uint3 unlinear(int i, uint3 d) { return {(unsigned)i % d.x, (unsigned)i / d.x % d.y, (unsigned)i / (d.x * d.y)}; }

inline unsigned long long splitmix(unsigned long long& x) {
  unsigned long long z = (x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// order 0: ascending, 1: descending, 2: a shuffle seeded by `seed`
inline void make_order(int* out, int n, int order, unsigned long long seed) {
  for (int i = 0; i < n; ++i) out[i] = order == 1 ? n - 1 - i : i;
  if (order == 2) {
    for (int i = n - 1; i > 0; --i) {
      int j = (int)(splitmix(seed) % (unsigned long long)(i + 1));
      int tmp = out[i]; out[i] = out[j]; out[j] = tmp;
    }
  }
}

inline void release_warp(State& s, int base) {
  int end = base + 32 < s.nthreads ? base + 32 : s.nthreads;
  int op = -1;
  for (int i = base; i < end; ++i) {
    Thread& t = s.threads[i];
    if (t.state != AT_WARP) return;
    if (op == -1) op = t.line;
    if (t.line != op) {
      s.thread_idx = t.idx;
      fail("the lanes of warp %d run different warp-collective operations at once (a divergent warp)", base / 32);
    }
  }
  for (int i = base; i < end; ++i) s.threads[i].state = RUNNABLE;
}

inline void warp_divergence(State& s, int base) {
  s.thread_idx = s.threads[base].idx;
  fail("lanes of warp %d wait in a warp-collective operation (shuffle / WMMA) that other lanes of the warp never "
       "reach (they finished or wait at __syncthreads()): a warp-collective operation in divergent code",
       base / 32);
}

// Hopper's mbarrier waits and asynchronous copies (defined in sm90.h)
inline bool mbarrier_wake(State& s);
[[noreturn]] inline void mbarrier_deadlock(State& s);
inline bool any_mbarrier_waiter(State& s);

inline void run_block_fibers(State& s, const int* order) {
  int n = s.nthreads;
  for (int i = 0; i < n; ++i) {
    Thread& t = s.threads[i];
    t.state = RUNNABLE;
    t.warp_gen = 0;
    getcontext(&t.ctx);
    t.ctx.uc_stack.ss_sp = s.stacks + (size_t)i * s.stack_bytes;
    t.ctx.uc_stack.ss_size = s.stack_bytes;
    t.ctx.uc_link = &s.sched;
    makecontext(&t.ctx, trampoline, 0);
  }
  for (;;) {
    bool ran = false;
    for (int k = 0; k < n; ++k) {
      Thread& t = s.threads[order[k]];
      while (t.state == RUNNABLE) {
        ran = true;
        s.cur = &t;
        s.thread_idx = t.idx;
        ++s.switches;
        swapcontext(&s.sched, &t.ctx);
        if (s.failed) throw Abort();
        if (t.state == AT_WARP) release_warp(s, t.linear & ~31);
      }
    }
    if (ran) continue;
    if (mbarrier_wake(s)) continue;
    int done = 0, barrier = 0, warp = 0, line = -1;
    for (int i = 0; i < n; ++i) {
      int st = s.threads[i].state;
      done += st == DONE;
      barrier += st == AT_BARRIER;
      warp += st == AT_WARP;
    }
    if (done == n) return;
    if (any_mbarrier_waiter(s)) mbarrier_deadlock(s);
    if (warp) {
      for (int i = 0; i < n; ++i)
        if (s.threads[i].state == AT_WARP) warp_divergence(s, s.threads[i].linear & ~31);
    }
    // everyone left waits at a barrier
    for (int i = 0; i < n; ++i) {
      Thread& t = s.threads[i];
      if (t.state != AT_BARRIER) continue;
      if (line == -1) line = t.line;
      if (t.line != line) {
        s.thread_idx = t.idx;
        fail("threads of one block wait at different __syncthreads() (lines %d and %d of the source): a barrier "
             "in divergent code", line, t.line);
      }
    }
    if (done) {
      for (int i = 0; i < n; ++i)
        if (s.threads[i].state == AT_BARRIER) { s.thread_idx = s.threads[i].idx; break; }
      fail("%d thread(s) of the block finished while the others wait at __syncthreads() (line %d): a barrier in "
           "divergent code", done, line);
    }
    for (int i = 0; i < n; ++i) s.threads[i].state = RUNNABLE;
  }
}

inline void run_block_direct(State& s, const int* order) {
  for (int k = 0; k < s.nthreads; ++k) {
    Thread& t = s.threads[order[k]];
    s.cur = &t;
    s.thread_idx = t.idx;
    try {
      s.body(s.closure);
      async_thread_exit();
    } catch (Abort&) {
    }
    if (s.failed) throw Abort();
  }
}

template <class F> void invoke(void* f) { (*(F*)f)(); }

inline void ensure_stacks(State& s, int n, size_t stack_bytes) {
  size_t need = (size_t)n * stack_bytes;
  if (s.stacks && s.stack_bytes == stack_bytes && s.stacks_total >= need) return;
  if (s.stacks) munmap(s.stacks, s.stacks_total);
  void* p = mmap(nullptr, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    s.stacks = nullptr;
    fail("could not map %zu bytes of fiber stacks", need);
  }
  s.stacks = (char*)p;
  s.stack_bytes = stack_bytes;
  s.stacks_total = need;
  for (int i = 0; i < n; ++i) mprotect(s.stacks + (size_t)i * stack_bytes, 4096, PROT_NONE);  // guard pages
}

inline void flush_global_counters(int nthreads);  // global_counters.h: group the block's accesses into warp requests

// Runs a launch; returns 0, or 1 with the message in state().error.
// dims: grid x, y, z, block x, y, z. only_block >= 0 runs just that (linear) block.
template <class F>
int launch(const long long* dims, int order, unsigned long long seed, long long only_block, bool fibers,
           size_t stack_bytes, F& body) {
  State& s = state();
  s.failed = false;
  s.error[0] = 0;
  s.grid_dim = {(unsigned)dims[0], (unsigned)dims[1], (unsigned)dims[2]};
  s.block_dim = {(unsigned)dims[3], (unsigned)dims[4], (unsigned)dims[5]};
  s.thread_idx = {0, 0, 0};
  s.block_idx = {0, 0, 0};
  long long nblocks = dims[0] * dims[1] * dims[2];
  int n = (int)(dims[3] * dims[4] * dims[5]);
  if (n <= 0 || nblocks <= 0) return 0;
  if (n > MAX_THREADS) {
    snprintf(s.error, sizeof s.error, "%d threads per block, more than the CUDA limit %d", n, (int)MAX_THREADS);
    return 1;
  }
  s.poison = order == 0 ? 0x7f : order == 1 ? 0xff : 0x41;
  s.body = &invoke<F>;
  s.closure = &body;
  s.fibers = fibers;
  s.nthreads = n;
  Thread* threads = new Thread[n];
  s.threads = threads;
  async_reset(n);
  for (int i = 0; i < n; ++i) {
    threads[i].idx = unlinear(i, s.block_dim);
    threads[i].linear = i;
  }
  int* torder = new int[n];
  long long* border = nullptr;
  int rc = 0;
  try {
    if (fibers) ensure_stacks(s, n, stack_bytes);
    long long count = only_block >= 0 ? 1 : nblocks;
    border = new long long[count];
    if (only_block >= 0) {
      border[0] = only_block;
    } else {
      for (long long i = 0; i < count; ++i) border[i] = order == 1 ? count - 1 - i : i;
      if (order == 2) {
        unsigned long long bs = seed ^ 0x5bd1e995ULL;
        for (long long i = count - 1; i > 0; --i) {
          long long j = (long long)(splitmix(bs) % (unsigned long long)(i + 1));
          long long tmp = border[i]; border[i] = border[j]; border[j] = tmp;
        }
      }
    }
    for (long long b = 0; b < count; ++b) {
      long long lin = border[b];
      s.block_idx = {(unsigned)(lin % dims[0]), (unsigned)(lin / dims[0] % dims[1]),
                     (unsigned)(lin / (dims[0] * dims[1]))};
      s.block_epoch++;
      make_order(torder, n, order, seed + (unsigned long long)lin * 0x9E3779B9ULL);
      if (fibers)
        run_block_fibers(s, torder);
      else
        run_block_direct(s, torder);
      flush_global_counters(n);
    }
  } catch (Abort&) {
    rc = 1;
  }
  if (s.failed) rc = 1;
  delete[] torder;
  delete[] border;
  delete[] threads;
  s.threads = nullptr;
  s.cur = nullptr;
  return rc;
}

}  // namespace tdsl_emu

#define threadIdx (::tdsl_emu::state().thread_idx)
#define blockIdx (::tdsl_emu::state().block_idx)
#define blockDim (::tdsl_emu::state().block_dim)
#define gridDim (::tdsl_emu::state().grid_dim)
#define warpSize 32
#define __syncthreads() ::tdsl_emu::syncthreads(__LINE__)

// declarations the driver rewrites `__shared__ __align__(16) T name[N];` and `__align__(16) T name[N];` into
#define TDSL_EMU_SHARED(T, name, N)                                  \
  static ::tdsl_emu::shared_array<T, N> tdsl_emu_shared_##name;      \
  ::tdsl_emu::shared_array<T, N>& name = tdsl_emu_shared_##name.enter(#name)
// `extern __shared__ __align__(A) unsigned char tdsl_smem[];` and each view into it,
// `T (&name)[N] = *reinterpret_cast<T (*)[N]>(tdsl_smem + OFFSET);`: an array of its own (checked
// and counted per buffer, as a static one) that must lie within the launch's dynamic bytes
#define TDSL_EMU_DYNAMIC_SHARED(name) ((void)0)
#define TDSL_EMU_SHARED_AT(T, name, N, OFFSET)                       \
  static ::tdsl_emu::shared_array<T, N> tdsl_emu_shared_##name;      \
  ::tdsl_emu::shared_array<T, N>& name = tdsl_emu_shared_##name.enter(#name, OFFSET)
#define TDSL_EMU_LOCAL(T, name, N) ::tdsl_emu::local_array<T, N> name(#name)

// ------------------------------------------------------------------------ vector types
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned int x, y; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
struct alignas(16) double2 { double x, y; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }

// ------------------------------------------------------------------------ scalar helpers
inline float __int_as_float(int v) { float f; memcpy(&f, &v, 4); return f; }
inline int __float_as_int(float f) { int v; memcpy(&v, &f, 4); return v; }
inline unsigned int __float_as_uint(float f) { unsigned v; memcpy(&v, &f, 4); return v; }
inline float __uint_as_float(unsigned v) { float f; memcpy(&f, &v, 4); return f; }
inline double __longlong_as_double(long long v) { double d; memcpy(&d, &v, 8); return d; }
inline long long __double_as_longlong(double d) { long long v; memcpy(&v, &d, 8); return v; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

// ------------------------------------------------------------------------ half and bfloat16
namespace tdsl_emu {
inline unsigned short float_to_half_bits(float f) {
  unsigned x = __float_as_uint(f);
  unsigned sign = (x >> 16) & 0x8000u;
  unsigned ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (unsigned short)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (ax < 0x38800000u) {                                           // subnormal half (or zero)
    float a = __uint_as_float(ax);
    // a * 2^24 rounded to nearest even integer = the subnormal's bits
    float scaled = a * 16777216.0f;
    unsigned v = (unsigned)nearbyintf(scaled);
    return (unsigned short)(sign | v);
  }
  unsigned mant = ax & 0x7fffffu;
  unsigned exp = (ax >> 23) - 127 + 15;
  unsigned bits = (exp << 10) | (mant >> 13);
  unsigned rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (bits & 1u))) bits += 1;
  return (unsigned short)(sign | bits);
}
inline float half_bits_to_float(unsigned short h) {
  unsigned sign = (unsigned)(h & 0x8000u) << 16;
  unsigned exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    float v = (float)mant * 5.9604644775390625e-08f;  // 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (mant << 13));
  return __uint_as_float(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}
inline unsigned short float_to_bf16_bits(float f) {
  unsigned x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
  unsigned lsb = (x >> 16) & 1u;
  return (unsigned short)((x + 0x7fffu + lsb) >> 16);
}
}  // namespace tdsl_emu

struct half {
  unsigned short bits;
  half() = default;
  half(float f) : bits(tdsl_emu::float_to_half_bits(f)) {}
  operator float() const { return tdsl_emu::half_bits_to_float(bits); }
};
typedef half __half;
struct nv_bfloat16 {
  unsigned short bits;
  nv_bfloat16() = default;
  nv_bfloat16(float f) : bits(tdsl_emu::float_to_bf16_bits(f)) {}
  operator float() const { return __uint_as_float((unsigned)bits << 16); }
};
typedef nv_bfloat16 __nv_bfloat16;

#define TDSL_EMU_HALF_OPS(H)                                                                     \
  inline H operator+(H a, H b) { return H((float)a + (float)b); }                                \
  inline H operator-(H a, H b) { return H((float)a - (float)b); }                                \
  inline H operator*(H a, H b) { return H((float)a * (float)b); }                                \
  inline H operator/(H a, H b) { return H((float)a / (float)b); }                                \
  inline H operator-(H a) { H r = a; r.bits ^= 0x8000u; return r; }                              \
  inline H& operator+=(H& a, H b) { return a = a + b; }                                          \
  inline H& operator-=(H& a, H b) { return a = a - b; }                                          \
  inline H& operator*=(H& a, H b) { return a = a * b; }                                          \
  inline bool operator==(H a, H b) { return (float)a == (float)b; }                              \
  inline bool operator!=(H a, H b) { return (float)a != (float)b; }                              \
  inline bool operator<(H a, H b) { return (float)a < (float)b; }                                \
  inline bool operator<=(H a, H b) { return (float)a <= (float)b; }                              \
  inline bool operator>(H a, H b) { return (float)a > (float)b; }                                \
  inline bool operator>=(H a, H b) { return (float)a >= (float)b; }
TDSL_EMU_HALF_OPS(half)
TDSL_EMU_HALF_OPS(nv_bfloat16)

inline half __float2half_rn(float f) { return half(f); }
inline half __float2half(float f) { return half(f); }
inline float __half2float(half h) { return (float)h; }
inline nv_bfloat16 __float2bfloat16_rn(float f) { return nv_bfloat16(f); }
inline nv_bfloat16 __float2bfloat16(float f) { return nv_bfloat16(f); }
inline float __bfloat162float(nv_bfloat16 h) { return (float)h; }

// Conversions to half / bfloat16 from types wider than float round once, as the hardware's
// cvt.rn.f16.{f64,s32,u32,s64,u64} do: the value is rounded to odd into float (and a 64-bit
// integer first to odd into double), whose 24 bits are at least 2 more than the target's, so
// the final round-to-nearest-even gives the correctly rounded result.
namespace tdsl_emu {
inline float double_to_float_odd(double d) {
  float f = (float)d;
  if (d != d || (double)f == d) return f;
  if (fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f);  // toward zero (inf -> FLT_MAX too)
  return __uint_as_float(__float_as_uint(f) | 1u);
}
inline double ull_to_double_odd(unsigned long long u) {
  if ((u >> 53) == 0) return (double)u;
  int shift = 64 - __builtin_clzll(u) - 53;
  unsigned long long kept = u >> shift;
  if (u & ((1ULL << shift) - 1)) kept |= 1;
  return ldexp((double)kept, shift);
}
inline double ll_to_double_odd(long long v) {
  double m = ull_to_double_odd(v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v);
  return v < 0 ? -m : m;
}
}  // namespace tdsl_emu
inline half __double2half(double d) { return half(tdsl_emu::double_to_float_odd(d)); }
inline half __int2half_rn(int v) { return __double2half((double)v); }
inline half __uint2half_rn(unsigned v) { return __double2half((double)v); }
inline half __ll2half_rn(long long v) { return half(tdsl_emu::double_to_float_odd(tdsl_emu::ll_to_double_odd(v))); }
inline half __ull2half_rn(unsigned long long v) {
  return half(tdsl_emu::double_to_float_odd(tdsl_emu::ull_to_double_odd(v)));
}
inline nv_bfloat16 __double2bfloat16(double d) { return nv_bfloat16(tdsl_emu::double_to_float_odd(d)); }
inline nv_bfloat16 __int2bfloat16_rn(int v) { return __double2bfloat16((double)v); }
inline nv_bfloat16 __uint2bfloat16_rn(unsigned v) { return __double2bfloat16((double)v); }
inline nv_bfloat16 __ll2bfloat16_rn(long long v) {
  return nv_bfloat16(tdsl_emu::double_to_float_odd(tdsl_emu::ll_to_double_odd(v)));
}
inline nv_bfloat16 __ull2bfloat16_rn(unsigned long long v) {
  return nv_bfloat16(tdsl_emu::double_to_float_odd(tdsl_emu::ull_to_double_odd(v)));
}
inline half __hmax_nan(half a, half b) { float x = a, y = b; return (x != x || y != y) ? half(x + y) : (x > y ? a : b); }
inline half __hmin_nan(half a, half b) { float x = a, y = b; return (x != x || y != y) ? half(x + y) : (x < y ? a : b); }
inline nv_bfloat16 __hmax_nan(nv_bfloat16 a, nv_bfloat16 b) {
  float x = a, y = b; return (x != x || y != y) ? nv_bfloat16(x + y) : (x > y ? a : b);
}
inline nv_bfloat16 __hmin_nan(nv_bfloat16 a, nv_bfloat16 b) {
  float x = a, y = b; return (x != x || y != y) ? nv_bfloat16(x + y) : (x < y ? a : b);
}
inline half hexp(half a) { return half(expf((float)a)); }
inline half hsqrt(half a) { return half(sqrtf((float)a)); }

#include "sm90.h"  // Hopper: mbarrier, TMA, wgmma as the PTX ISA defines them

// ------------------------------------------------------------------------ atomics (threads switch only at
// barriers and collectives, so a read-modify-write is atomic here)
template <class T> inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <class T> inline T atomicSub(T* p, T v) { T old = *p; *p = old - v; return old; }
template <class T> inline T atomicMax(T* p, T v) { T old = *p; *p = old > v ? old : v; return old; }
template <class T> inline T atomicMin(T* p, T v) { T old = *p; *p = old < v ? old : v; return old; }
template <class T> inline T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <class T> inline T atomicCAS(T* p, T cmp, T v) { T old = *p; if (old == cmp) *p = v; return old; }
inline void __threadfence() {}
inline void __threadfence_block() {}

// ------------------------------------------------------------------------ warp shuffles
namespace tdsl_emu {
template <class T> inline T shuffle(unsigned mask, T v, int kind, int arg, int width) {
  static_assert(sizeof(T) <= 16, "shuffled values are at most 16 bytes here");
  int lane = lane_id();
  if (!((mask >> lane) & 1u)) fail("__shfl_*_sync called by lane %d, which is not in its mask 0x%08x", lane, mask);
  if (width <= 0 || width > 32 || (width & (width - 1))) fail("__shfl_*_sync width %d is not a power of 2 <= 32", width);
  struct { T value; unsigned mask; } mine = {v, mask};
  unsigned char (*slots)[SLOT_BYTES] = warp_exchange(&mine, sizeof mine, OP_SHFL);
  int lanes = warp_lanes();
  unsigned active = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u);
  if ((mask & active) != active && (mask & ~active))
    fail("__shfl_*_sync mask 0x%08x names lanes that do not exist in this warp", mask);
  int base = lane & ~(width - 1), src = lane;
  switch (kind) {
    case 0: src = base + (arg & (width - 1)); break;                                  // __shfl_sync
    case 1: src = lane ^ arg; if ((src & ~(width - 1)) != base) src = lane; break;     // __shfl_xor_sync
    case 2: src = (lane - base) + arg < width ? lane + arg : lane; break;             // __shfl_down_sync
    case 3: src = (lane - base) >= arg ? lane - arg : lane; break;                    // __shfl_up_sync
  }
  if (src >= lanes || !((mask >> src) & 1u))
    fail("__shfl_*_sync in lane %d reads lane %d, which is not in the mask 0x%08x (or not active)", lane, src, mask);
  T out;
  memcpy(&out, slots[src], sizeof(T));
  return out;
}
}  // namespace tdsl_emu
template <class T> inline T __shfl_sync(unsigned m, T v, int src, int w = 32) { return tdsl_emu::shuffle(m, v, 0, src, w); }
template <class T> inline T __shfl_xor_sync(unsigned m, T v, int x, int w = 32) { return tdsl_emu::shuffle(m, v, 1, x, w); }
template <class T> inline T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) {
  return tdsl_emu::shuffle(m, v, 2, (int)d, w);
}
template <class T> inline T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32) {
  return tdsl_emu::shuffle(m, v, 3, (int)d, w);
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  (void)mask;
  char nothing = 0;
  tdsl_emu::warp_exchange(&nothing, 1, tdsl_emu::OP_SYNCWARP);
}

// ------------------------------------------------------------------------ WMMA (m16n16k16)
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K> struct shape_of;
template <int M, int N, int K> struct shape_of<matrix_a, M, N, K> { enum { rows = M, cols = K }; };
template <int M, int N, int K> struct shape_of<matrix_b, M, N, K> { enum { rows = K, cols = N }; };
template <int M, int N, int K> struct shape_of<accumulator, M, N, K> { enum { rows = M, cols = N }; };

// Each lane holds num_elements consecutive elements (row-major order) of the tile: lane l has
// elements [l * num_elements, (l + 1) * num_elements). (The hardware's layout is opaque; code
// must not depend on it, and tdsl's does not.)
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
  enum { rows = shape_of<Use, M, N, K>::rows, cols = shape_of<Use, M, N, K>::cols };
  enum { num_elements = rows * cols / 32 };
  T x[num_elements];
};

template <class T> struct same { typedef T type; };
template <class Use, int M, int N, int K, class T, class L>
inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, const typename same<T>::type& v) {
  for (int t = 0; t < f.num_elements; ++t) f.x[t] = v;
}

}  // namespace wmma
}  // namespace nvcuda

namespace tdsl_emu {
struct WarpArgs { const void* p; unsigned ldm; int layout; };
inline void warp_same_args(const void* p, unsigned ldm, int layout, int op, const char* what) {
  if (warp_lanes() != 32) fail("%s needs all 32 lanes of a warp; this warp has %d threads", what, warp_lanes());
  WarpArgs mine = {p, ldm, layout};
  unsigned char (*slots)[SLOT_BYTES] = warp_exchange(&mine, sizeof mine, op);
  for (int l = 0; l < 32; ++l) {
    WarpArgs o;
    memcpy(&o, slots[l], sizeof o);
    if (o.p != p || o.ldm != ldm || o.layout != layout)
      fail("the lanes of a warp call %s with different arguments (lane %d: pointer %p, ldm %u; lane %d: pointer %p, "
           "ldm %u); it is warp-collective: every lane must pass the same tile", what, l, o.p, o.ldm, lane_id(), p, ldm);
  }
}
}  // namespace tdsl_emu

namespace nvcuda {
namespace wmma {
template <class Use, int M, int N, int K, class T, class L, class P>
inline void tdsl_emu_load(fragment<Use, M, N, K, T, L>& f, const P* p, unsigned ldm, bool col) {
  tdsl_emu::warp_same_args(p, ldm, col, tdsl_emu::OP_WMMA_LOAD, "wmma::load_matrix_sync");
  typedef fragment<Use, M, N, K, T, L> F;
  int lane = tdsl_emu::lane_id();
  for (int t = 0; t < F::num_elements; ++t) {
    int e = lane * F::num_elements + t, r = e / F::cols, c = e % F::cols;
    const P* q = col ? p + (long long)c * ldm + r : p + (long long)r * ldm + c;
    tdsl_emu::check_addr(q, sizeof(P), "wmma::load_matrix_sync");
    f.x[t] = *q;
  }
}
template <class Use, int M, int N, int K, class T, class P>
inline void load_matrix_sync(fragment<Use, M, N, K, T, row_major>& f, const P* p, unsigned ldm) {
  tdsl_emu_load(f, p, ldm, false);
}
template <class Use, int M, int N, int K, class T, class P>
inline void load_matrix_sync(fragment<Use, M, N, K, T, col_major>& f, const P* p, unsigned ldm) {
  tdsl_emu_load(f, p, ldm, true);
}
template <int M, int N, int K, class T, class P>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T, void>& f, const P* p, unsigned ldm, layout_t l) {
  tdsl_emu_load(f, p, ldm, l == mem_col_major);
}
template <int M, int N, int K, class T, class P>
inline void store_matrix_sync(P* p, const fragment<accumulator, M, N, K, T, void>& f, unsigned ldm, layout_t l) {
  tdsl_emu::warp_same_args(p, ldm, (int)l, tdsl_emu::OP_WMMA_STORE, "wmma::store_matrix_sync");
  typedef fragment<accumulator, M, N, K, T, void> F;
  int lane = tdsl_emu::lane_id();
  for (int t = 0; t < F::num_elements; ++t) {
    int e = lane * F::num_elements + t, r = e / F::cols, c = e % F::cols;
    P* q = l == mem_col_major ? p + (long long)c * ldm + r : p + (long long)r * ldm + c;
    tdsl_emu::check_addr(q, sizeof(P), "wmma::store_matrix_sync");
    *q = f.x[t];
  }
}
// d = a * b + c, warp-collective: each lane contributes its elements of a, b, c and computes its
// own elements of d (fp32 accumulation over k in order).
template <int M, int N, int K, class TA, class LA, class LB, class TC>
inline void mma_sync(fragment<accumulator, M, N, K, TC, void>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
                     const fragment<matrix_b, M, N, K, TA, LB>& b, const fragment<accumulator, M, N, K, TC, void>& c) {
  typedef fragment<matrix_a, M, N, K, TA, LA> FA;
  typedef fragment<matrix_b, M, N, K, TA, LB> FB;
  typedef fragment<accumulator, M, N, K, TC, void> FC;
  static_assert(sizeof(FA) + sizeof(FB) + sizeof(FC) <= tdsl_emu::SLOT_BYTES, "fragments too large for a slot");
  if (tdsl_emu::warp_lanes() != 32) tdsl_emu::fail("wmma::mma_sync needs all 32 lanes of a warp");
  unsigned char mine[tdsl_emu::SLOT_BYTES];
  memcpy(mine, &a, sizeof(FA));
  memcpy(mine + sizeof(FA), &b, sizeof(FB));
  memcpy(mine + sizeof(FA) + sizeof(FB), &c, sizeof(FC));
  unsigned char (*slots)[tdsl_emu::SLOT_BYTES] = tdsl_emu::warp_exchange(mine, sizeof mine, tdsl_emu::OP_WMMA_MMA);
  float A[M * K], B[K * N], C[M * N];
  for (int l = 0; l < 32; ++l) {
    FA fa; FB fb; FC fc;
    memcpy(&fa, slots[l], sizeof(FA));
    memcpy(&fb, slots[l] + sizeof(FA), sizeof(FB));
    memcpy(&fc, slots[l] + sizeof(FA) + sizeof(FB), sizeof(FC));
    for (int t = 0; t < FA::num_elements; ++t) A[l * FA::num_elements + t] = (float)fa.x[t];
    for (int t = 0; t < FB::num_elements; ++t) B[l * FB::num_elements + t] = (float)fb.x[t];
    for (int t = 0; t < FC::num_elements; ++t) C[l * FC::num_elements + t] = (float)fc.x[t];
  }
  int lane = tdsl_emu::lane_id();
  for (int t = 0; t < FC::num_elements; ++t) {
    int e = lane * FC::num_elements + t, r = e / N, col = e % N;
    float acc = C[e];
    for (int k = 0; k < K; ++k) acc += A[r * K + k] * B[k * N + col];
    d.x[t] = (TC)acc;
  }
}
}  // namespace wmma
}  // namespace nvcuda

#include "cp_async.h"
#include "ptx_mma.h"  // ldmatrix and mma.sync, as the PTX ISA defines them
#include "global_counters.h"  // global-memory sectors per warp request

#endif  // TDSL_CUDA_EMU_H
