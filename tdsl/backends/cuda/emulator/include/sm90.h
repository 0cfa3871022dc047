// sm90.h: the emulator's model of Hopper's asynchronous machinery, as the PTX ISA defines it:
// mbarrier objects (phases, arrival counts, transaction counts), named barriers (bar.sync /
// bar.arrive), fence.proxy.async, TMA tensor loads and stores (tdsl's own tensor-map encoding),
// wgmma (A from shared memory or registers) and setmaxnreg. The device
// functions have the names tdsl/backends/cuda/sm90.py gives their inline-PTX versions.
//
// mbarrier (PTX ISA, "Parallel Synchronization and Communication Instructions: mbarrier"): an
// object holds the current phase, the pending and the expected arrival counts and a tx-count.
// init sets phase 0, pending = expected = count, tx-count 0. arrive decrements the pending count;
// expect_tx increments the tx-count; the completion of an asynchronous copy decrements it by its
// bytes (complete_tx). The current phase completes when the pending count and the tx-count both
// are zero: the phase advances, pending = expected, tx-count = 0. try_wait.parity P succeeds when
// the phase of parity P has completed, i.e. the current phase's parity is not P.
//
// Asynchronous copies (TMA) are queued when issued and land only when no thread can run any
// more (the latest moment a GPU could complete them): code that reads a tile without waiting for
// its barrier reads what was there before. A wait that can never complete (nothing left running
// could arrive, no copy left in flight) is reported as a deadlock naming the barrier, its state
// and the waiting warps; when every arrival came but the tx-count is not zero, as a transaction
// count mismatch.
//
// Not modelled: timing, clusters (shared::cluster addresses are this block's), multicast, the
// tensor map's L2 promotion and interleave, the memory-model fences beyond their order here.
#pragma once

namespace tdsl_emu {

struct MBarrier {
  const void* addr;
  int expected, pending;
  long long tx;           // pending transaction bytes (may go negative before expect_tx, as the ISA allows)
  long long tx_expected;  // bytes announced by expect_tx in the current phase (for messages)
  unsigned phase;         // phases completed so far (the current phase's parity is phase & 1)
};

struct TmaCopy {   // one queued TMA load; dimension 0 is the innermost
  char* dst;
  const char* src_base;
  long long elem, dims[5], strides[5], box[5], coord[5];
  int rank, swizzle;
  MBarrier* bar;
};

enum { MAX_MBARRIERS = 64, MAX_TMA = 256, MBAR_TX_LIMIT = (1 << 20) - 1, NAMED_BARRIERS = 16 };

// A named barrier (bar.sync / bar.arrive id, count): the count of the phase in progress (set by its
// first arrival), the arrivals so far, the phases completed; threads waiting on it wait (as
// AT_MBARRIER) on its address.
struct NamedBar { int count, arrived; unsigned phase; };

struct Sm90State {
  unsigned long long epoch = ~0ULL;
  MBarrier bars[MAX_MBARRIERS];
  int nbars = 0;
  const void* wait_on[MAX_THREADS];
  int wait_parity[MAX_THREADS];
  TmaCopy copies[MAX_TMA];
  int ncopies = 0;
  // TMA stores (shared -> global), per issuing thread in bulk groups
  TmaCopy stores[MAX_TMA];
  int store_thread[MAX_TMA];
  unsigned store_group[MAX_TMA];
  unsigned long long store_print[MAX_TMA];
  int nstores = 0;
  unsigned bulk_committed[MAX_THREADS];
  // wgmma is .sync.aligned: the threads of a warpgroup issue the same ones, in the same order
  unsigned wgmma_issued[MAX_THREADS];
  struct { unsigned seq; int n, b_mn; unsigned long long a, b; int scale; } wgmma_ring[MAX_THREADS / 128][256];
  NamedBar named[NAMED_BARRIERS];
};

inline Sm90State& sm90() {
  static Sm90State st;
  State& s = state();
  if (st.epoch != s.block_epoch) {   // a new block: its shared memory (and barriers) start afresh
    st.epoch = s.block_epoch;
    st.nbars = 0;
    st.ncopies = 0;
    st.nstores = 0;
    memset(st.bulk_committed, 0, sizeof st.bulk_committed);
    memset(st.wgmma_issued, 0, sizeof st.wgmma_issued);
    memset(st.wgmma_ring, 0xff, sizeof st.wgmma_ring);
    memset(st.named, 0, sizeof st.named);
  }
  return st;
}

// the named barrier whose address `p` is (what its waiters wait on), else -1
inline int named_barrier_id(const void* p) {
  Sm90State& st = sm90();
  for (int i = 0; i < NAMED_BARRIERS; ++i)
    if (p == (const void*)&st.named[i]) return i;
  return -1;
}

// "bars[1]" for an element of a shared array, else the address
inline const char* mbarrier_name(const void* p) {
  static char buf[2][96];
  static int k = 0;
  char* out = buf[k ^= 1];
  State& s = state();
  int id = named_barrier_id(p);
  if (id >= 0) {
    snprintf(out, 96, "named barrier %d (bar.sync)", id);
    return out;
  }
  for (int i = 0; i < s.nregions; ++i) {
    const Region& r = s.regions[i];
    if ((const char*)p >= r.begin && (const char*)p < r.end) {
      snprintf(out, 96, "%s[%lld]", r.name, (long long)((const char*)p - r.begin) / 8);
      return out;
    }
  }
  snprintf(out, 96, "the mbarrier at %p", p);
  return out;
}

inline MBarrier* find_mbarrier(const void* p, const char* op) {
  Sm90State& st = sm90();
  for (int i = 0; i < st.nbars; ++i)
    if (st.bars[i].addr == p) return &st.bars[i];
  if (op) fail("%s on %s, which no mbarrier_init initialised in this block", op, mbarrier_name(p));
  return nullptr;
}

inline void mbarrier_check_tx(MBarrier* b) {
  if (b->tx > MBAR_TX_LIMIT || b->tx < -MBAR_TX_LIMIT)
    fail("transaction count mismatch on mbarrier %s: its tx-count reached %lld, outside the PTX ISA's range "
         "[-(2^20-1), 2^20-1]", mbarrier_name(b->addr), b->tx);
}

inline void mbarrier_try_complete(MBarrier* b) {
  if (b->pending == 0 && b->tx == 0) {
    b->phase++;
    b->pending = b->expected;
    b->tx_expected = 0;
  }
}

// Completes the queued asynchronous copies (called by the scheduler when no thread can run).
inline void complete_tma_loads();
// Completes the TMA stores of thread `thread` (all threads: -1) whose bulk group is older than
// the newest `keep` it committed.
inline void complete_tma_stores(int thread, unsigned keep);
// At the end of a block: every thread of a warpgroup that issued wgmma issued as many as the others.
inline void check_wgmma_counts(State& s);

// The scheduler's hook: land the copies in flight, make runnable the threads whose awaited phase
// completed; true when one did.
inline bool mbarrier_wake(State& s) {
  Sm90State& st = sm90();
  if (st.ncopies) complete_tma_loads();
  if (st.nstores) complete_tma_stores(-1, 0);   // (when every thread finished: the block's stores land)
  bool all_done = true;
  for (int i = 0; i < s.nthreads && all_done; ++i) all_done = s.threads[i].state == DONE;
  if (all_done) check_wgmma_counts(s);
  bool woke = false;
  for (int i = 0; i < s.nthreads; ++i) {
    Thread& t = s.threads[i];
    if (t.state != AT_MBARRIER) continue;
    MBarrier* b = find_mbarrier(st.wait_on[i], nullptr);
    if (b && (int)(b->phase & 1) != st.wait_parity[i]) {
      t.state = RUNNABLE;
      woke = true;
    }
  }
  return woke;
}

// "warp 0 (threads 0-31), warp 1 (threads 32-63)": the threads waiting on `addr`; returns their count
inline int mbarrier_waiters(State& s, const void* addr, char* who, size_t size) {
  Sm90State& st = sm90();
  size_t len = 0;
  int count = 0;
  who[0] = 0;
  for (int w = 0; w * 32 < s.nthreads; ++w) {
    int lo = -1, hi = -1;
    for (int i = w * 32; i < s.nthreads && i < w * 32 + 32; ++i)
      if (s.threads[i].state == AT_MBARRIER && st.wait_on[i] == addr) { if (lo < 0) lo = i; hi = i; count++; }
    if (lo >= 0 && len + 48 < size)
      len += snprintf(who + len, size - len, "%swarp %d (threads %d-%d)", len ? ", " : "", w, lo, hi);
  }
  return count;
}

// Called when no thread can run and some wait on an mbarrier: a deadlock.
[[noreturn]] inline void mbarrier_deadlock(State& s) {
  Sm90State& st = sm90();
  int first = -1;
  for (int i = 0; i < s.nthreads; ++i)
    if (s.threads[i].state == AT_MBARRIER) { first = i; break; }
  const void* addr = st.wait_on[first];
  int parity = st.wait_parity[first];
  char who[256], others[448] = "";
  int count = mbarrier_waiters(s, addr, who, sizeof who);
  size_t olen = 0;
  for (int i = first + 1; i < s.nthreads; ++i) {   // the other barriers waited on, each once
    if (s.threads[i].state != AT_MBARRIER || st.wait_on[i] == addr) continue;
    bool seen = false;
    for (int j = first; j < i && !seen; ++j) seen = s.threads[j].state == AT_MBARRIER && st.wait_on[j] == st.wait_on[i];
    if (seen || olen + 240 > sizeof others) continue;
    char w2[192];
    int c2 = mbarrier_waiters(s, st.wait_on[i], w2, sizeof w2);
    olen += snprintf(others + olen, sizeof others - olen, "; %d more wait on %s: %s", c2,
                     mbarrier_name(st.wait_on[i]), w2);
  }
  int done = 0, at_sync = 0;
  for (int i = 0; i < s.nthreads; ++i) {
    done += s.threads[i].state == DONE;
    at_sync += s.threads[i].state == AT_BARRIER;
  }
  s.thread_idx = s.threads[first].idx;
  int id = named_barrier_id(addr);
  if (id >= 0)
    fail("deadlock: %d thread(s) wait at named barrier %d (bar.sync) for %d arrivals, of which %d came in this phase "
         "(phase %u), and no running thread is left to arrive (%d thread(s) finished, %d wait at __syncthreads()): "
         "%s%s", count, id, st.named[id].count, st.named[id].arrived, st.named[id].phase, done, at_sync, who,
         others);
  MBarrier* b = find_mbarrier(addr, nullptr);
  if (b && b->pending == 0 && b->tx != 0)
    fail("transaction count mismatch on mbarrier %s: every arrival of phase %u came but its tx-count is %lld "
         "(expect_tx announced %lld bytes, the copies completed %lld), so the phase never completes; %d thread(s) "
         "wait for parity %d: %s%s", mbarrier_name(addr), b->phase, b->tx, b->tx_expected, b->tx_expected - b->tx,
         count, parity, who, others);
  fail("deadlock: %d thread(s) wait on mbarrier %s for the phase of parity %d, which can never complete (phase %u: "
       "%d of %d arrivals pending, tx-count %lld; %d thread(s) finished, %d wait at __syncthreads(), no copy in "
       "flight): %s%s", count, mbarrier_name(addr), parity, b ? b->phase : 0, b ? b->pending : 0,
       b ? b->expected : 0, b ? b->tx : 0, done, at_sync, who, others);
}

inline bool any_mbarrier_waiter(State& s) {
  for (int i = 0; i < s.nthreads; ++i)
    if (s.threads[i].state == AT_MBARRIER) return true;
  return false;
}

}  // namespace tdsl_emu

// ------------------------------------------------------------------------ mbarrier device functions
inline unsigned long long tdsl_mbarrier_state(const tdsl_emu::MBarrier* b) {
  return (unsigned long long)b->phase & 1;   // the state token: the phase it was taken in
}

inline void tdsl_ptx_mbarrier_init(unsigned long long* bar, int count) {
  using namespace tdsl_emu;
  if (count < 1 || count > MBAR_TX_LIMIT)
    fail("mbarrier_init of %s with count %d: the PTX ISA takes 1 to 2^20-1", mbarrier_name(bar), count);
  if ((uintptr_t)bar % 8) fail("mbarrier_init of %s: an mbarrier is 8-byte aligned", mbarrier_name(bar));
  Sm90State& st = sm90();
  MBarrier* b = find_mbarrier(bar, nullptr);
  if (!b) {
    if (st.nbars == MAX_MBARRIERS) fail("more than %d mbarriers in one block", (int)MAX_MBARRIERS);
    b = &st.bars[st.nbars++];
  }
  *b = MBarrier{bar, count, count, 0, 0, 0};
  *bar = 0;   // the object's memory: opaque, but written (the hardware does)
}

inline unsigned long long tdsl_ptx_mbarrier_arrive(unsigned long long* bar) {
  using namespace tdsl_emu;
  MBarrier* b = find_mbarrier(bar, "mbarrier_arrive");
  unsigned long long token = tdsl_mbarrier_state(b);
  if (b->pending == 0)
    fail("mbarrier_arrive on %s: phase %u already has all %d arrivals (more arrivals than its count)",
         mbarrier_name(bar), b->phase, b->expected);
  b->pending--;
  mbarrier_try_complete(b);
  return token;
}

inline void tdsl_ptx_mbarrier_expect_tx(unsigned long long* bar, unsigned tx) {
  using namespace tdsl_emu;
  MBarrier* b = find_mbarrier(bar, "mbarrier_expect_tx");
  b->tx += tx;
  b->tx_expected += tx;
  mbarrier_check_tx(b);
}

inline unsigned long long tdsl_ptx_mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned tx) {
  tdsl_ptx_mbarrier_expect_tx(bar, tx);   // PTX ISA: expect-tx, then arrive-on
  return tdsl_ptx_mbarrier_arrive(bar);
}

inline void tdsl_ptx_mbarrier_wait(unsigned long long* bar, int parity) {
  using namespace tdsl_emu;
  State& s = state();
  MBarrier* b = find_mbarrier(bar, "mbarrier_wait");
  Sm90State& st = sm90();
  while ((int)(b->phase & 1) == (parity & 1)) {   // the phase of this parity has not completed
    st.wait_on[s.cur->linear] = bar;
    st.wait_parity[s.cur->linear] = parity & 1;
    s.cur->state = AT_MBARRIER;
    yield_to_scheduler();
    b = find_mbarrier(bar, "mbarrier_wait");
  }
}

// ------------------------------------------------------------------------ proxies
// Shared memory that threads store to (the generic proxy) is seen by TMA and wgmma (the async
// proxy) only after a fence.proxy.async (PTX ISA, "Proxies"; wgmma.mma_async: "accessing the same
// memory location across multiple proxies needs a cross-proxy fence"). The emulator keeps, per
// shared array, the image the async proxy sees: taken when the array is fresh, when a thread
// executes fence.proxy.async (the whole block's shared memory: a fence by another thread than the
// writer passes here, a missing fence does not), and where a TMA load lands. A TMA store or wgmma
// reading bytes that differ from that image reads stores the async proxy may not see: an error.
namespace tdsl_emu {
struct ProxyView { const char* begin; long long n; unsigned long long epoch; std::vector<unsigned char> image; };
inline std::vector<ProxyView>& proxy_views() { static std::vector<ProxyView> v; return v; }
inline void proxy_register(const void* data, size_t bytes) {
  std::vector<ProxyView>& v = proxy_views();
  unsigned long long epoch = state().block_epoch;
  if (!v.empty() && v[0].epoch != epoch) v.clear();   // the arrays of an earlier block
  const unsigned char* b = (const unsigned char*)data;
  v.push_back(ProxyView{(const char*)data, (long long)bytes, epoch, std::vector<unsigned char>(b, b + bytes)});
}
inline ProxyView* proxy_find(const char* p) {
  unsigned long long epoch = state().block_epoch;
  for (ProxyView& v : proxy_views())
    if (v.epoch == epoch && p >= v.begin && p < v.begin + v.n) return &v;
  return nullptr;
}
inline void proxy_async_wrote(const char* p, size_t bytes) {   // a TMA load landed there
  ProxyView* v = proxy_find(p);
  if (v && p + bytes <= v->begin + v->n) memcpy(&v->image[p - v->begin], p, bytes);
}
inline void proxy_check(const char* p, size_t bytes, const char* what) {
  ProxyView* v = proxy_find(p);
  if (!v || p + bytes > v->begin + v->n || !memcmp(&v->image[p - v->begin], p, bytes)) return;
  const char* name = "shared memory";
  State& s = state();
  for (int i = 0; i < s.nregions; ++i)
    if (s.regions[i].begin == v->begin) name = s.regions[i].name;
  long long at = (long long)(p - v->begin);
  for (size_t i = 0; i < bytes; ++i)
    if (v->image[at + i] != (unsigned char)p[i]) { at += (long long)i; break; }
  fail("%s reads %s byte %lld, which threads stored to after the last fence.proxy.async: the async proxy (TMA, "
       "wgmma) may not see stores of the generic proxy; put tdsl_ptx_fence_proxy_async() (T.ptx_fence_proxy_async()) "
       "after the stores and before the barrier that orders them with the %s", what, name, at, what);
}
}  // namespace tdsl_emu

// ------------------------------------------------------------------------ named barriers
// bar.sync / bar.arrive id, count (PTX ISA "bar, barrier"): barrier id (0..15) completes its phase
// when `count` threads (a multiple of 32, at most the block's threads) have arrived; bar.sync
// arrives and waits for that, bar.arrive arrives and goes on. Every arrival of one phase names
// the same count. The GPU counts a warp's arrival as 32 threads; here each thread arrives for
// itself (the same for a converged warp; a warp whose lanes reach the barrier separately is not
// modelled). Barrier 0 is the one __syncthreads() uses on a GPU; the emulator keeps them apart.
namespace tdsl_emu {
inline void named_barrier_arrive(int id, int count, bool wait, const char* op) {
  State& s = state();
  if (id < 0 || id >= NAMED_BARRIERS)
    fail("%s(%d, %d): the barrier id is 0 to %d (PTX ISA: 16 named barriers per block)", op, id, count,
         NAMED_BARRIERS - 1);
  if (count <= 0 || count % 32)
    fail("%s(%d, %d): the thread count must be a positive multiple of 32 (the warp size): a warp arrives whole",
         op, id, count);
  if (count > s.nthreads)
    fail("%s(%d, %d): the block has only %d threads, so the barrier could never complete", op, id, count, s.nthreads);
  Sm90State& st = sm90();
  NamedBar& b = st.named[id];
  if (b.arrived == 0) b.count = count;
  else if (b.count != count)
    fail("%s(%d, %d): phase %u of named barrier %d started with count %d: every arrival of one phase gives the same "
         "count", op, id, count, b.phase, id, b.count);
  if (++b.arrived == b.count) {   // the phase completes: its waiters go on
    b.arrived = 0;
    b.phase++;
    for (int i = 0; i < s.nthreads; ++i)
      if (s.threads[i].state == AT_MBARRIER && st.wait_on[i] == (const void*)&b) s.threads[i].state = RUNNABLE;
    return;
  }
  if (!wait) return;
  unsigned phase = b.phase;
  while (b.phase == phase) {
    st.wait_on[s.cur->linear] = &b;
    st.wait_parity[s.cur->linear] = (int)(phase & 1);
    s.cur->state = AT_MBARRIER;
    yield_to_scheduler();
  }
}
}  // namespace tdsl_emu
inline void tdsl_ptx_bar_sync(int id, int count) { tdsl_emu::named_barrier_arrive(id, count, true, "tdsl_ptx_bar_sync"); }
inline void tdsl_ptx_bar_arrive(int id, int count) {
  tdsl_emu::named_barrier_arrive(id, count, false, "tdsl_ptx_bar_arrive");
}

inline void tdsl_ptx_fence_proxy_async() {
  for (tdsl_emu::ProxyView& v : tdsl_emu::proxy_views())
    if (v.epoch == tdsl_emu::state().block_epoch) memcpy(v.image.data(), v.begin, (size_t)v.n);
}
inline void tdsl_ptx_fence_mbarrier_init() {}
template <int R> inline void tdsl_ptx_setmaxnreg_inc() {
  static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg takes 24 to 256 registers, a multiple of 8");
}
template <int R> inline void tdsl_ptx_setmaxnreg_dec() {
  static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg takes 24 to 256 registers, a multiple of 8");
}

// ------------------------------------------------------------------------ TMA loads
// The tensor map is tdsl's own encoding (sm90.py: emulator_tensor_map), int64 fields, dimension 0
// the innermost: [magic | elem << 32 | rank << 40 | swizzle bytes << 48, base, dims[5],
// byte strides of dimensions 1..4, box sides 0..3 (16 bits each), box side 4].
namespace tdsl_emu {
enum { TENSOR_MAP_MAGIC = 0x31444D54 };

// CuTe's Swizzle<B, 4, 3> on byte offsets: B = 1, 2, 3 for the 32B, 64B, 128B modes
inline long long tma_swizzle(long long off, int swizzle_bytes) {
  int bits = swizzle_bytes == 128 ? 3 : swizzle_bytes == 64 ? 2 : swizzle_bytes == 32 ? 1 : 0;
  return off ^ ((off & (((1LL << bits) - 1) << 7)) >> 3);
}

inline void complete_tma_loads() {
  Sm90State& st = sm90();
  for (int i = 0; i < st.ncopies; ++i) {
    TmaCopy& c = st.copies[i];
    long long count = 1;
    for (int d = 0; d < c.rank; ++d) count *= c.box[d];
    for (long long e = 0; e < count; ++e) {   // box element e, dimension 0 fastest
      long long rest = e, src = 0;
      bool inside = true;
      for (int d = 0; d < c.rank; ++d) {
        long long g = c.coord[d] + rest % c.box[d];
        rest /= c.box[d];
        inside = inside && g >= 0 && g < c.dims[d];
        src += g * c.strides[d];
      }
      char* dst = c.dst + tma_swizzle(e * c.elem, c.swizzle);
      if (inside) memcpy(dst, c.src_base + src, (size_t)c.elem);
      else memset(dst, 0, (size_t)c.elem);   // out of the tensor: zeros
      proxy_async_wrote(dst, (size_t)c.elem);
    }
    c.bar->tx -= count * c.elem;              // complete_tx: the whole box, filled elements included
    mbarrier_check_tx(c.bar);
    mbarrier_try_complete(c.bar);
  }
  st.ncopies = 0;
}

inline void tma_load(void* dst, const long long* f, const int* coord, int rank, unsigned long long* bar,
                     const char* what = "tma_load") {
  if ((f[0] & 0xffffffffLL) != TENSOR_MAP_MAGIC)
    fail("%s_%dd: the tensor map is not one of tdsl's (build it with emulator_tensor_map)", what, rank);
  int map_rank = (int)((f[0] >> 40) & 0xff), swizzle = (int)((f[0] >> 48) & 0xff);
  if (map_rank != rank) fail("%s_%dd with a tensor map of %d dimensions", what, rank, map_rank);
  MBarrier* b = find_mbarrier(bar, "tma_load");
  State& s = state();
  const Region* region = nullptr;
  for (int i = 0; i < s.nregions; ++i)
    if ((const char*)dst >= s.regions[i].begin && (const char*)dst < s.regions[i].end) region = &s.regions[i];
  if (!region) fail("%s_%dd: the shared memory is not a shared array", what, rank);
  long long offset = (const char*)dst - region->begin + region->window;   // in the block's shared memory
  if (offset % 128) fail("%s_%dd at %s byte %lld: the PTX ISA wants 128-byte aligned shared memory", what, rank,
                         region->name, offset);
  if (swizzle && offset % (8 * swizzle))
    fail("%s_%dd at %s byte %lld: a %dB swizzle repeats every %d bytes; the shared memory starts at a multiple "
         "of it", what, rank, region->name, offset, swizzle, 8 * swizzle);
  TmaCopy c{};
  c.dst = (char*)dst;
  c.src_base = (const char*)f[1];
  c.elem = (f[0] >> 32) & 0xff;
  c.rank = rank;
  c.swizzle = swizzle;
  c.bar = b;
  long long bytes = c.elem;
  for (int d = 0; d < rank; ++d) {
    c.dims[d] = f[2 + d];
    c.strides[d] = d == 0 ? c.elem : f[6 + d];
    c.box[d] = d < 4 ? (f[11] >> (16 * d)) & 0xffff : f[12] & 0xffff;
    c.coord[d] = coord[d];
    bytes *= c.box[d];
  }
  check_addr(dst, (size_t)bytes, what);
  Sm90State& st = sm90();
  if (st.ncopies == MAX_TMA) fail("more than %d TMA copies in flight", (int)MAX_TMA);
  st.copies[st.ncopies++] = c;
}
}  // namespace tdsl_emu

template <class M> inline void tdsl_ptx_tma_load_1d(void* dst, M map, int x, unsigned long long* bar) {
  int c[1] = {x};
  tdsl_emu::tma_load(dst, (const long long*)&map[0], c, 1, bar);
}
template <class M> inline void tdsl_ptx_tma_load_2d(void* dst, M map, int x, int y, unsigned long long* bar) {
  int c[2] = {x, y};
  tdsl_emu::tma_load(dst, (const long long*)&map[0], c, 2, bar);
}
template <class M> inline void tdsl_ptx_tma_load_3d(void* dst, M map, int x, int y, int z, unsigned long long* bar) {
  int c[3] = {x, y, z};
  tdsl_emu::tma_load(dst, (const long long*)&map[0], c, 3, bar);
}
template <class M>
inline void tdsl_ptx_tma_load_4d(void* dst, M map, int x, int y, int z, int w, unsigned long long* bar) {
  int c[4] = {x, y, z, w};
  tdsl_emu::tma_load(dst, (const long long*)&map[0], c, 4, bar);
}
template <class M>
inline void tdsl_ptx_tma_load_5d(void* dst, M map, int x, int y, int z, int w, int v, unsigned long long* bar) {
  int c[5] = {x, y, z, w, v};
  tdsl_emu::tma_load(dst, (const long long*)&map[0], c, 5, bar);
}

// ------------------------------------------------------------------------ TMA stores
// cp.async.bulk.tensor shared::cta -> global, bulk_group completion (PTX ISA): the box is read from
// shared memory (through the swizzle) and written to the tensor, elements outside it skipped;
// cp.async.bulk.wait_group N waits until at most the newest N bulk groups of the thread are
// pending. Here a store lands at that wait (or when no thread can run any more); shared memory it
// reads that changes before it lands is reported as a race.
namespace tdsl_emu {
inline unsigned long long store_fingerprint(const TmaCopy& c) {
  long long bytes = c.elem;
  for (int d = 0; d < c.rank; ++d) bytes *= c.box[d];
  unsigned long long h = 1469598103934665603ULL;
  for (long long i = 0; i < bytes; ++i) h = (h ^ (unsigned char)c.dst[i]) * 1099511628211ULL;
  return h;
}

inline void complete_tma_stores(int thread, unsigned keep) {
  Sm90State& st = sm90();
  int left = 0;
  for (int i = 0; i < st.nstores; ++i) {
    TmaCopy& c = st.stores[i];
    bool due = thread < 0 || (st.store_thread[i] == thread && st.store_group[i] + keep < st.bulk_committed[thread]);
    if (!due) {
      st.stores[left] = c;
      st.store_thread[left] = st.store_thread[i];
      st.store_group[left] = st.store_group[i];
      st.store_print[left++] = st.store_print[i];
      continue;
    }
    if (store_fingerprint(c) != st.store_print[i])
      fail("TMA store: the shared memory it reads was written after the store was issued and before it completed "
           "(a race: wait with tdsl_ptx_bulk_wait_group_read before reusing it)");
    long long count = 1;
    for (int d = 0; d < c.rank; ++d) count *= c.box[d];
    for (long long e = 0; e < count; ++e) {
      long long rest = e, dst = 0;
      bool inside = true;
      for (int d = 0; d < c.rank; ++d) {
        long long g = c.coord[d] + rest % c.box[d];
        rest /= c.box[d];
        inside = inside && g >= 0 && g < c.dims[d];
        dst += g * c.strides[d];
      }
      if (inside) memcpy((char*)c.src_base + dst, c.dst + tma_swizzle(e * c.elem, c.swizzle), (size_t)c.elem);
    }
  }
  st.nstores = left;
}

inline void tma_store(const long long* f, const int* coord, int rank, const void* src) {
  // tma_load's checks and decoding, with no barrier: a load's TmaCopy, queued as a store
  Sm90State& st = sm90();
  int saved = st.ncopies;
  unsigned long long dummy_bar = 0;
  MBarrier fake{&dummy_bar, 1, 1, 0, 0, 0};
  if (st.nbars == MAX_MBARRIERS) fail("more than %d mbarriers in one block", (int)MAX_MBARRIERS);
  st.bars[st.nbars++] = fake;
  tma_load((void*)src, f, coord, rank, &dummy_bar, "tma_store");
  st.nbars--;
  TmaCopy c = st.copies[saved];
  st.ncopies = saved;
  c.bar = nullptr;
  long long bytes = c.elem;
  for (int d = 0; d < c.rank; ++d) bytes *= c.box[d];
  proxy_check(c.dst, (size_t)bytes, "TMA store");
  if (st.nstores == MAX_TMA) fail("more than %d TMA stores in flight", (int)MAX_TMA);
  int t = state().cur->linear;
  st.stores[st.nstores] = c;
  st.store_thread[st.nstores] = t;
  st.store_group[st.nstores] = st.bulk_committed[t];
  st.store_print[st.nstores++] = store_fingerprint(c);
}
}  // namespace tdsl_emu

template <class M> inline void tdsl_ptx_tma_store_1d(M map, int x, const void* src) {
  int c[1] = {x};
  tdsl_emu::tma_store((const long long*)&map[0], c, 1, src);
}
template <class M> inline void tdsl_ptx_tma_store_2d(M map, int x, int y, const void* src) {
  int c[2] = {x, y};
  tdsl_emu::tma_store((const long long*)&map[0], c, 2, src);
}
template <class M> inline void tdsl_ptx_tma_store_3d(M map, int x, int y, int z, const void* src) {
  int c[3] = {x, y, z};
  tdsl_emu::tma_store((const long long*)&map[0], c, 3, src);
}
template <class M> inline void tdsl_ptx_tma_store_4d(M map, int x, int y, int z, int w, const void* src) {
  int c[4] = {x, y, z, w};
  tdsl_emu::tma_store((const long long*)&map[0], c, 4, src);
}
template <class M> inline void tdsl_ptx_tma_store_5d(M map, int x, int y, int z, int w, int v, const void* src) {
  int c[5] = {x, y, z, w, v};
  tdsl_emu::tma_store((const long long*)&map[0], c, 5, src);
}
inline void tdsl_ptx_bulk_commit_group() { tdsl_emu::sm90().bulk_committed[tdsl_emu::state().cur->linear]++; }
template <int N> inline void tdsl_ptx_bulk_wait_group() {
  tdsl_emu::complete_tma_stores(tdsl_emu::state().cur->linear, N);
}
template <int N> inline void tdsl_ptx_bulk_wait_group_read() {
  tdsl_emu::complete_tma_stores(tdsl_emu::state().cur->linear, N);
}

// ------------------------------------------------------------------------ wgmma (emulator model)
// PTX ISA "Matrix Descriptor Format": bits 0-13 start address >> 4, 16-29 leading byte offset >> 4,
// 32-45 stride byte offset >> 4, 62-63 swizzle (0 none, 1 128B, 2 64B, 3 32B). K-major operands:
// row r, element k of a 16-bit matrix sits at (r / 8) * SBO + (r % 8) * W + 2 * k within the
// swizzle atom (W = 16 and core matrices LBO apart along K when not swizzled; W = the swizzle
// width when swizzled), the swizzle applied to the offset from the start. Accumulators: CuTe's
// CLayout_64xN: thread t, register i -> row 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2),
// column 2 * (t % 4) + i % 2 + 8 * (i / 4).
// MN-major operands (imm-trans-b = 1 for B; PTX ISA "Shared Memory Matrix Layout", CuTe's
// make_gmma_desc<Major::MN>): element (mn, k) of a 16-bit matrix sits, swizzled, at
// (mn / (W / 2)) * LBO + (k / 8) * SBO + (k % 8) * W + 2 * (mn % (W / 2)) -- a swizzle atom is 8
// rows of K of W bytes along MN, atoms LBO apart along MN, 8-row groups of K SBO apart; not
// swizzled, at (mn / 8) * SBO + (k / 8) * LBO + (k % 8) * 16 + 2 * (mn % 8).
namespace tdsl_emu {
// rs: A from registers; then ra holds the 16-bit bits of rows lane/4 and lane/4 + 8 of the warp's
// 16 x 16 slice of A (the rows this thread's accumulators need), gathered at issue
struct Wgmma {
  float* d; unsigned long long a, b; int scale_d, n, bf16, b_mn; unsigned group; unsigned long long fa, fb;
  int rs; unsigned short ra[2][16];
};
enum { MAX_WGMMA = 64 };
struct WgmmaQueue { Wgmma ops[MAX_WGMMA]; int nops = 0; unsigned committed = 0; unsigned long long epoch = ~0ULL; };
inline WgmmaQueue& wgmma_queue() {
  static WgmmaQueue q[MAX_THREADS];
  State& s = state();
  WgmmaQueue& mine = q[s.cur->linear];
  if (mine.epoch != s.block_epoch) { mine.epoch = s.block_epoch; mine.nops = 0; mine.committed = 0; }
  return mine;
}
// the emulator's descriptors hold, in the start-address field, an index into this block's table of
// shared addresses (its shared arrays are not one window); the other fields are the PTX ISA's
struct DescTable { const char* at[1024]; int n = 0; unsigned long long epoch = ~0ULL; };
inline DescTable& desc_table() {
  static DescTable t;
  if (t.epoch != state().block_epoch) { t.epoch = state().block_epoch; t.n = 0; }
  return t;
}
inline const char* wgmma_operand_at(unsigned long long desc, int row, int k, int mn_major) {
  DescTable& table = desc_table();
  int index = (int)(desc & 0x3fff);
  if (index >= table.n) fail("wgmma: a matrix descriptor not made by tdsl_ptx_wgmma_desc in this block");
  const char* start = table.at[index];
  long long lbo = (long long)((desc >> 16) & 0x3fff) << 4,
            sbo = (long long)((desc >> 32) & 0x3fff) << 4;
  int mode = (int)(desc >> 62), width = mode == 1 ? 128 : mode == 2 ? 64 : mode == 3 ? 32 : 0;
  const char* at;
  if (!width) {
    at = mn_major ? start + (row / 8) * sbo + (k / 8) * lbo + (k % 8) * 16 + 2 * (row % 8)
                  : start + (row / 8) * sbo + (2 * k / 16) * lbo + (row % 8) * 16 + (2 * k) % 16;
  } else {
    // the swizzle acts on address bits: here on the offset from the start of the shared array (which a
    // GPU kernel aligns to the swizzle atom), so a start advanced within a row (the next k-slice) works
    const char* base = start;
    State& s = state();
    for (int i = 0; i < s.nregions; ++i)
      if (start >= s.regions[i].begin && start < s.regions[i].end) {
        base = s.regions[i].begin;
        if (s.regions[i].window % (8 * width))   // (a view into the dynamic shared array)
          fail("wgmma: its operand %s starts at byte %lld of the shared memory; a %dB swizzle repeats every %d "
               "bytes, so the array must start at a multiple of it", s.regions[i].name, s.regions[i].window,
               width, 8 * width);
      }
    long long off = mn_major ? (row / (width / 2)) * lbo + (k / 8) * sbo + (k % 8) * width + 2 * (row % (width / 2))
                             : (row / 8) * sbo + (row % 8) * width + 2 * k;
    at = base + tma_swizzle((start - base) + off, width);
  }
  check_addr(at, 2, "wgmma");
  return at;
}
inline float wgmma_half(unsigned short bits, int bf16) {
  if (bf16) { unsigned u = (unsigned)bits << 16; float f; memcpy(&f, &u, 4); return f; }
  int e = (bits >> 10) & 31, m = bits & 1023;   // IEEE binary16 -> float, exactly
  float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
  return bits >> 15 ? -v : v;
}
inline float wgmma_operand(unsigned long long desc, int row, int k, int bf16, int mn_major = 0) {
  const char* at = wgmma_operand_at(desc, row, k, mn_major);
  unsigned short bits;
  memcpy(&bits, at, 2);
  return wgmma_half(bits, bf16);
}
// the bits of an operand's rows x 16 elements (FNV-1a): shared memory an in-flight wgmma reads
// must not change before its wait_group (the PTX ISA leaves that undefined)
inline unsigned long long wgmma_fingerprint(unsigned long long desc, int rows, int bf16, int mn_major = 0) {
  unsigned long long h = 1469598103934665603ULL;
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < 16; ++k) {
      float v = wgmma_operand(desc, r, k, bf16, mn_major);
      unsigned u;
      memcpy(&u, &v, 4);
      h = (h ^ u) * 1099511628211ULL;
    }
  return h;
}
// at issue: the operands' shared memory as the async proxy sees it
inline void wgmma_proxy_check(unsigned long long desc, int rows, int mn_major) {
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < 16; ++k) proxy_check(wgmma_operand_at(desc, r, k, mn_major), 2, "wgmma");
}
inline void wgmma_run(const Wgmma& w) {
  bool a_changed = !w.rs && wgmma_fingerprint(w.a, 64, w.bf16) != w.fa;
  if (a_changed || wgmma_fingerprint(w.b, w.n, w.bf16, w.b_mn) != w.fb)
    fail("wgmma m64n%dk16: shared memory of its operand %s was written after the wgmma was issued and before its "
         "wait_group (a race: the tensor core reads it asynchronously; wait, then release the stage)", w.n,
         a_changed ? "A" : "B");
  int t = state().cur->linear % 128;
  for (int i = 0; i < w.n / 2; ++i) {
    int row = 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2), col = 2 * (t % 4) + i % 2 + 8 * (i / 4);
    float acc = w.scale_d ? w.d[i] : 0.f;
    for (int k = 0; k < 16; ++k)
      acc += (w.rs ? wgmma_half(w.ra[(i / 2) % 2][k], w.bf16) : wgmma_operand(w.a, row, k, w.bf16)) *
             wgmma_operand(w.b, col, k, w.bf16, w.b_mn);
    w.d[i] = acc;
  }
}
// The k-th wgmma of each thread of a warpgroup is the same instruction (shape, descriptors, scale-d);
// the emulator's descriptors name the same shared address by the same table index.
inline void wgmma_converged(int n, unsigned long long a, unsigned long long b, int scale, int b_mn = 0) {
  Sm90State& st = sm90();
  int t = state().cur->linear, wg = t / 128;
  unsigned k = st.wgmma_issued[t]++;
  auto& slot = st.wgmma_ring[wg][k % 256];
  if (slot.seq == ~0u || (slot.seq < k)) {
    slot.seq = k;
    slot.n = n;
    slot.b_mn = b_mn;
    slot.a = a;
    slot.b = b;
    slot.scale = scale != 0;
    return;
  }
  if (slot.seq == k && (slot.n != n || slot.b_mn != b_mn || slot.a != a || slot.b != b || slot.scale != (scale != 0)))
    fail("wgmma is .sync.aligned: the threads of warpgroup %d issue different instructions as their wgmma #%u "
         "(m64n%dk16 with descriptors 0x%llx, 0x%llx here, m64n%dk16 with 0x%llx, 0x%llx in another thread)", wg, k,
         n, a, b, slot.n, slot.a, slot.b);
}

// wgmma with A from registers (the PTX ISA's m64nNk16 register fragment of A): lane l of warp w
// holds, in a[r] (low half first), A[16w + l/4 + 8 (r % 2)][2 (l % 4) + 8 (r / 2) + {0, 1}]. The
// warp's 16 rows are all a thread's accumulators need: the 4 registers are exchanged within the
// warp at issue (a warp collective) and the thread keeps its two rows with the queued op. Not
// checked: that the registers stay unchanged until the wait_group (the ISA requires it; the copy
// taken at issue is what is multiplied).
inline void wgmma_rs_gather(Wgmma& op, const unsigned* a) {
  unsigned mine[4];
  memcpy(mine, a, sizeof mine);
  unsigned char (*slots)[SLOT_BYTES] = warp_exchange(mine, sizeof mine, OP_WGMMA_RS);
  int g = lane_id() / 4;
  for (int lane = 0; lane < 32; ++lane) {
    if (lane / 4 != g) continue;
    unsigned regs[4];
    memcpy(regs, slots[lane], sizeof regs);
    for (int r = 0; r < 4; ++r)
      for (int e = 0; e < 2; ++e) op.ra[r % 2][2 * (lane % 4) + 8 * (r / 2) + e] = (unsigned short)(regs[r] >> (16 * e));
  }
}

inline void check_wgmma_counts(State& s) {
  Sm90State& st = sm90();
  for (int base = 0; base < s.nthreads; base += 128) {
    int end = base + 128 < s.nthreads ? base + 128 : s.nthreads;
    for (int i = base + 1; i < end; ++i)
      if (st.wgmma_issued[i] != st.wgmma_issued[base]) {
        s.thread_idx = s.threads[i].idx;
        fail("wgmma is .sync.aligned: in warpgroup %d thread %d issued %u wgmma but thread %d issued %u (all 128 "
             "threads of a warpgroup issue each one)", base / 128, base, st.wgmma_issued[base], i,
             st.wgmma_issued[i]);
      }
  }
}
}  // namespace tdsl_emu

// swizzle: 0 none, 1 128B, 2 64B, 3 32B (the PTX ISA's codes); lbo / sbo in bytes
inline unsigned long long tdsl_ptx_wgmma_desc(const void* smem, int lbo, int sbo, int swizzle) {
  using namespace tdsl_emu;
  DescTable& t = desc_table();
  int i = 0;
  while (i < t.n && t.at[i] != (const char*)smem) ++i;
  if (i == t.n) {
    if (t.n == 1024) fail("more than 1024 distinct wgmma descriptor addresses in one block");
    t.at[t.n++] = (const char*)smem;
  }
  return (unsigned long long)i | ((unsigned long long)((lbo >> 4) & 0x3fff) << 16) |
         ((unsigned long long)((sbo >> 4) & 0x3fff) << 32) | ((unsigned long long)(swizzle & 3) << 62);
}
inline void tdsl_ptx_wgmma_fence() {}
inline void tdsl_ptx_wgmma_commit_group() { tdsl_emu::wgmma_queue().committed++; }
template <int N> inline void tdsl_ptx_wgmma_wait_group() {
  using namespace tdsl_emu;
  WgmmaQueue& q = wgmma_queue();
  int keep = 0;
  for (int i = 0; i < q.nops; ++i) {   // run the ops of all but the newest N committed groups
    if (q.ops[i].group + N < q.committed) wgmma_run(q.ops[i]);
    else q.ops[keep++] = q.ops[i];
  }
  q.nops = keep;
}
#define TDSL_EMU_WGMMA_FN(NAME, N, BF, BMN)                                                                   \
  inline void NAME(float* d, unsigned long long a, unsigned long long b, int s) {                               \
    tdsl_emu::wgmma_converged(N, a, b, s, BMN);                                                                 \
    tdsl_emu::wgmma_proxy_check(a, 64, 0);                                                                      \
    tdsl_emu::wgmma_proxy_check(b, N, BMN);                                                                     \
    tdsl_emu::WgmmaQueue& q = tdsl_emu::wgmma_queue();                                                          \
    if (q.nops == tdsl_emu::MAX_WGMMA) tdsl_emu::fail("more than %d wgmma in flight", (int)tdsl_emu::MAX_WGMMA);   \
    q.ops[q.nops++] = tdsl_emu::Wgmma{d, a, b, s, N, BF, BMN, q.committed, tdsl_emu::wgmma_fingerprint(a, 64, BF), \
                                      tdsl_emu::wgmma_fingerprint(b, N, BF, BMN)};                              \
  }                                                                                                             \
  inline void NAME(float& d, unsigned long long a, unsigned long long b, int s) { NAME(&d, a, b, s); }
// A from registers: the descriptor field of the .sync.aligned check holds a marker instead
#define TDSL_EMU_WGMMA_RS_FN(NAME, N, BF, BMN)                                                                \
  inline void NAME(float* d, const unsigned* a, unsigned long long b, int s) {                                  \
    tdsl_emu::wgmma_converged(N, ~0ULL, b, s, BMN);                                                             \
    tdsl_emu::wgmma_proxy_check(b, N, BMN);                                                                     \
    tdsl_emu::WgmmaQueue& q = tdsl_emu::wgmma_queue();                                                          \
    if (q.nops == tdsl_emu::MAX_WGMMA) tdsl_emu::fail("more than %d wgmma in flight", (int)tdsl_emu::MAX_WGMMA);   \
    tdsl_emu::Wgmma op{d, ~0ULL, b, s, N, BF, BMN, q.committed, 0, tdsl_emu::wgmma_fingerprint(b, N, BF, BMN), 1, {}}; \
    tdsl_emu::wgmma_rs_gather(op, a);                                                                           \
    q.ops[q.nops++] = op;                                                                                       \
  }                                                                                                             \
  inline void NAME(float& d, const unsigned& a, unsigned long long b, int s) { NAME(&d, &a, b, s); }
// each shape with B K-major and with B MN-major (the _bmn form: imm-trans-b = 1), A from shared
// memory or (_rs) from registers
#define TDSL_EMU_WGMMA(N, T, BF)                                              \
  TDSL_EMU_WGMMA_FN(tdsl_ptx_wgmma_m64n##N##k16_f32_##T, N, BF, 0)           \
  TDSL_EMU_WGMMA_FN(tdsl_ptx_wgmma_m64n##N##k16_f32_##T##_bmn, N, BF, 1)     \
  TDSL_EMU_WGMMA_RS_FN(tdsl_ptx_wgmma_m64n##N##k16_f32_##T##_rs, N, BF, 0)   \
  TDSL_EMU_WGMMA_RS_FN(tdsl_ptx_wgmma_m64n##N##k16_f32_##T##_rs_bmn, N, BF, 1)
// every N of m64nNk16: 8 to 256 in steps of 8
TDSL_EMU_WGMMA(8, f16, 0) TDSL_EMU_WGMMA(16, f16, 0) TDSL_EMU_WGMMA(24, f16, 0) TDSL_EMU_WGMMA(32, f16, 0) TDSL_EMU_WGMMA(40, f16, 0) TDSL_EMU_WGMMA(48, f16, 0) TDSL_EMU_WGMMA(56, f16, 0) TDSL_EMU_WGMMA(64, f16, 0)
TDSL_EMU_WGMMA(72, f16, 0) TDSL_EMU_WGMMA(80, f16, 0) TDSL_EMU_WGMMA(88, f16, 0) TDSL_EMU_WGMMA(96, f16, 0) TDSL_EMU_WGMMA(104, f16, 0) TDSL_EMU_WGMMA(112, f16, 0) TDSL_EMU_WGMMA(120, f16, 0) TDSL_EMU_WGMMA(128, f16, 0)
TDSL_EMU_WGMMA(136, f16, 0) TDSL_EMU_WGMMA(144, f16, 0) TDSL_EMU_WGMMA(152, f16, 0) TDSL_EMU_WGMMA(160, f16, 0) TDSL_EMU_WGMMA(168, f16, 0) TDSL_EMU_WGMMA(176, f16, 0) TDSL_EMU_WGMMA(184, f16, 0) TDSL_EMU_WGMMA(192, f16, 0)
TDSL_EMU_WGMMA(200, f16, 0) TDSL_EMU_WGMMA(208, f16, 0) TDSL_EMU_WGMMA(216, f16, 0) TDSL_EMU_WGMMA(224, f16, 0) TDSL_EMU_WGMMA(232, f16, 0) TDSL_EMU_WGMMA(240, f16, 0) TDSL_EMU_WGMMA(248, f16, 0) TDSL_EMU_WGMMA(256, f16, 0)
TDSL_EMU_WGMMA(8, bf16, 1) TDSL_EMU_WGMMA(16, bf16, 1) TDSL_EMU_WGMMA(24, bf16, 1) TDSL_EMU_WGMMA(32, bf16, 1) TDSL_EMU_WGMMA(40, bf16, 1) TDSL_EMU_WGMMA(48, bf16, 1) TDSL_EMU_WGMMA(56, bf16, 1) TDSL_EMU_WGMMA(64, bf16, 1)
TDSL_EMU_WGMMA(72, bf16, 1) TDSL_EMU_WGMMA(80, bf16, 1) TDSL_EMU_WGMMA(88, bf16, 1) TDSL_EMU_WGMMA(96, bf16, 1) TDSL_EMU_WGMMA(104, bf16, 1) TDSL_EMU_WGMMA(112, bf16, 1) TDSL_EMU_WGMMA(120, bf16, 1) TDSL_EMU_WGMMA(128, bf16, 1)
TDSL_EMU_WGMMA(136, bf16, 1) TDSL_EMU_WGMMA(144, bf16, 1) TDSL_EMU_WGMMA(152, bf16, 1) TDSL_EMU_WGMMA(160, bf16, 1) TDSL_EMU_WGMMA(168, bf16, 1) TDSL_EMU_WGMMA(176, bf16, 1) TDSL_EMU_WGMMA(184, bf16, 1) TDSL_EMU_WGMMA(192, bf16, 1)
TDSL_EMU_WGMMA(200, bf16, 1) TDSL_EMU_WGMMA(208, bf16, 1) TDSL_EMU_WGMMA(216, bf16, 1) TDSL_EMU_WGMMA(224, bf16, 1) TDSL_EMU_WGMMA(232, bf16, 1) TDSL_EMU_WGMMA(240, bf16, 1) TDSL_EMU_WGMMA(248, bf16, 1) TDSL_EMU_WGMMA(256, bf16, 1)

// ------------------------------------------------------------------------ reference forms
// TensorIR passes buffer elements to extern calls by reference (T.call_extern("void",
// "tdsl_ptx_mbarrier_arrive", bars[0])): the same functions taking the element itself.
inline void tdsl_ptx_mbarrier_init(unsigned long long& bar, int count) { tdsl_ptx_mbarrier_init(&bar, count); }
inline unsigned long long tdsl_ptx_mbarrier_arrive(unsigned long long& bar) { return tdsl_ptx_mbarrier_arrive(&bar); }
inline void tdsl_ptx_mbarrier_expect_tx(unsigned long long& bar, unsigned tx) { tdsl_ptx_mbarrier_expect_tx(&bar, tx); }
inline unsigned long long tdsl_ptx_mbarrier_arrive_expect_tx(unsigned long long& bar, unsigned tx) {
  return tdsl_ptx_mbarrier_arrive_expect_tx(&bar, tx);
}
inline void tdsl_ptx_mbarrier_wait(unsigned long long& bar, int parity) { tdsl_ptx_mbarrier_wait(&bar, parity); }
#define TDSL_EMU_TMA_REF(T)                                                                                  \
  inline void tdsl_ptx_tma_load_2d(T& dst, const unsigned char& tensor_map, int x, int y, unsigned long long& bar) { \
    tdsl_ptx_tma_load_2d((void*)&dst, &tensor_map, x, y, &bar);                                                \
  }
TDSL_EMU_TMA_REF(half) TDSL_EMU_TMA_REF(nv_bfloat16) TDSL_EMU_TMA_REF(float) TDSL_EMU_TMA_REF(unsigned char)
inline unsigned long long tdsl_ptx_wgmma_desc(half& smem, int lbo, int sbo, int swizzle) {
  return tdsl_ptx_wgmma_desc((const void*)&smem, lbo, sbo, swizzle);
}
inline unsigned long long tdsl_ptx_wgmma_desc(nv_bfloat16& smem, int lbo, int sbo, int swizzle) {
  return tdsl_ptx_wgmma_desc((const void*)&smem, lbo, sbo, swizzle);
}
