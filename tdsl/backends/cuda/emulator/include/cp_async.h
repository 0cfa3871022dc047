// cp_async.h: the emulator's model of cp.async (PTX ISA, "Data Movement and Conversion
// Instructions: cp.async / cp.async.commit_group / cp.async.wait_group"), included by cuda_emu.h.
//
// The model, as the PTX ISA defines the instructions:
// * cp.async copies cp-size = 4, 8 or 16 bytes (.cg: 16 only) from global to shared memory; it
//   only starts the copy. Here the copy is queued on the issuing thread and performed later.
// * cp.async.commit_group makes the thread's uncommitted copies one cp.async-group (an empty
//   group when there are none); groups are per thread.
// * cp.async.wait_group N returns when at most N of the thread's most recent groups are pending:
//   here the oldest groups are performed until N remain.
// * The copies' writes are visible only after that wait, so any access to a destination element
//   while its copy is in flight (a read, a write, another cp.async) is reported as a race naming
//   the buffer and the element; so is a thread that exits with copies it never waited for.
//
// What it does not model: when the hardware actually moves the bytes (a source written between
// issue and wait is read at the wait here), the L1/L2 cache hints, src-size / ignore-src zero fill.
#pragma once

namespace tdsl_emu {

struct AsyncCopy {
  char* dst;
  const char* src;
  int bytes;
  int* pend;           // the destination array's in-flight marks, from element `first`
  long long first, count;
};

struct AsyncArray { char* begin; char* end; int* pend; size_t elem; const char* name; };

struct AsyncThread {
  std::vector<AsyncCopy> open;                   // issued, not yet committed
  std::deque<std::vector<AsyncCopy>> groups;     // committed, oldest first
};

struct AsyncState {
  std::vector<AsyncArray> arrays;
  std::vector<AsyncThread> threads;
};

inline AsyncState& async_state() {
  static AsyncState a;
  return a;
}

inline void async_register(void* data, int* pend, size_t elem_bytes, long long n, const char* name) {
  AsyncState& a = async_state();
  char* begin = (char*)data;
  for (AsyncArray& r : a.arrays)
    if (r.begin == begin) { r.name = name; return; }
  a.arrays.push_back({begin, begin + (size_t)n * elem_bytes, pend, elem_bytes, name});
}

inline void async_reset(int nthreads) {
  AsyncState& a = async_state();
  a.threads.assign((size_t)nthreads, AsyncThread());
  async_in_flight() = 0;
}

[[noreturn]] inline void async_race(const char* name, long long index, int owner) {
  uint3 who = unlinear(owner, state().block_dim);
  fail("race on %s[%lld]: it is accessed while a cp.async to it (issued by thread (%u, %u, %u)) is in flight; "
       "its writes land only at the issuing thread's cp.async.wait_group (T.ptx_wait_group) for its group, and "
       "other threads see them after a __syncthreads() that follows that wait", name, index, who.x, who.y, who.z);
}

inline AsyncThread& async_thread() { return async_state().threads[(size_t)state().cur->linear]; }

inline void cp_async_issue(void* dst, const void* src, int bytes, bool cg) {
  if (bytes != 4 && bytes != 8 && bytes != 16) fail("cp.async copies 4, 8 or 16 bytes, not %d", bytes);
  if (cg && bytes != 16) fail("cp.async.cg copies 16 bytes, not %d", bytes);
  AsyncState& a = async_state();
  char* d = (char*)dst;
  const AsyncArray* arr = nullptr;
  for (const AsyncArray& r : a.arrays) {
    if ((const char*)src >= r.begin && (const char*)src < r.end)
      fail("the source of a cp.async is the shared array %s; cp.async copies from global memory", r.name);
    if (d >= r.begin && d < r.end) arr = &r;
  }
  if (arr == nullptr) fail("the destination of a cp.async is not a __shared__ array");
  if (d + bytes > arr->end)
    fail("out-of-bounds cp.async: %d bytes at byte offset %lld of %s, which has %lld bytes", bytes,
         (long long)(d - arr->begin), arr->name, (long long)(arr->end - arr->begin));
  check_addr(src, (size_t)bytes, "cp.async");
  // the coalescing counters: the source argument's evaluation (&A[i]) logged one element; the
  // copy reads `bytes` from there
  uncount_global(1);
  count_global_ptr(src, bytes);
  if ((uintptr_t)d % (uintptr_t)bytes || (uintptr_t)src % (uintptr_t)bytes)
    fail("misaligned cp.async of %d bytes into %s at byte offset %lld: source and destination must be aligned to %d",
         bytes, arr->name, (long long)(d - arr->begin), bytes);
  long long first = (long long)((size_t)(d - arr->begin) / arr->elem);
  long long last = (long long)((size_t)(d + bytes - 1 - arr->begin) / arr->elem);
  for (long long e = first; e <= last; ++e)
    if (arr->pend[e]) async_race(arr->name, e, arr->pend[e] - 1);
  int me = state().cur->linear;
  for (long long e = first; e <= last; ++e) arr->pend[e] = me + 1;
  async_thread().open.push_back({d, (const char*)src, bytes, arr->pend, first, last - first + 1});
  ++async_in_flight();
}

// For models that read shared memory through raw pointers (ldmatrix and the like): a race if any
// of the `bytes` at `p` is the destination of a cp.async still in flight.
inline void async_check(const void* p, size_t bytes) {
  if (!async_in_flight()) return;
  const char* c = (const char*)p;
  for (const AsyncArray& r : async_state().arrays) {
    if (c < r.begin || c >= r.end) continue;
    long long first = (long long)((size_t)(c - r.begin) / r.elem);
    long long last = (long long)((size_t)(c + bytes - 1 - r.begin) / r.elem);
    for (long long e = first; e <= last && r.begin + e * (long long)r.elem < r.end; ++e)
      if (r.pend[e]) async_race(r.name, e, r.pend[e] - 1);
    return;
  }
}

inline void async_complete(const AsyncCopy& c) {
  for (long long e = 0; e < c.count; ++e) c.pend[c.first + e] = 0;
  memcpy(c.dst, c.src, (size_t)c.bytes);
  --async_in_flight();
}

inline void cp_async_commit() {
  AsyncThread& t = async_thread();
  t.groups.push_back(std::move(t.open));
  t.open.clear();
}

inline void cp_async_wait(int n) {
  AsyncThread& t = async_thread();
  while ((long long)t.groups.size() > (long long)n) {
    for (const AsyncCopy& c : t.groups.front()) async_complete(c);
    t.groups.pop_front();
  }
}

inline void async_thread_exit() {
  AsyncThread& t = async_thread();
  long long left = (long long)t.open.size();
  for (const std::vector<AsyncCopy>& g : t.groups) left += (long long)g.size();
  if (left)
    fail("the thread finished with %lld cp.async copies it never waited for (cp.async.wait_group / "
         "T.ptx_wait_group): their data is not guaranteed to land", left);
  t.groups.clear();
}

}  // namespace tdsl_emu

// The device functions tdsl's CUDA code calls (the real ones are inline PTX in the kernel source).
template <int N> inline void tdsl_cp_async_ca(void* dst, const void* src) { ::tdsl_emu::cp_async_issue(dst, src, N, false); }
inline void tdsl_cp_async_cg16(void* dst, const void* src) { ::tdsl_emu::cp_async_issue(dst, src, 16, true); }
inline void tdsl_cp_async_commit() { ::tdsl_emu::cp_async_commit(); }
template <int N> inline void tdsl_cp_async_wait() { ::tdsl_emu::cp_async_wait(N); }
