// global_counters.h: global-memory sectors per warp request, counted by the emulator.
//
// While counting is on (tdsl_emu_global_count(1), the first thread order of a launch), every
// access through a kernel's pointer parameters is logged per thread, in program order. When a
// block finishes, the k-th access of each lane of a warp is taken as one warp request (true
// when the warp's lanes run the same accesses, i.e. no divergence); its sectors are the
// distinct 32-byte sectors (offsets from the buffer's start, which cudaMalloc aligns) its
// lanes touch, its ideal the sectors its distinct bytes would fill if they were contiguous.
// Accesses past the shortest lane's count (divergent lanes) are counted apart ("unpaired").
#pragma once
#include <vector>

namespace tdsl_emu {

struct GlobalAccess { const char* name; long long byte; int bytes; };
struct GlobalCounter {
  const char* name;
  unsigned long long requests, sectors, ideal, unpaired;
};
struct GlobalCounters {
  bool on = false;
  std::vector<std::vector<GlobalAccess>> log;  // per thread of the block
  std::vector<GlobalCounter> counters;
  std::vector<char> report;
};
inline GlobalCounters& global_counters() {
  static GlobalCounters g;
  return g;
}
inline bool& count_global_on() { return global_counters().on; }

inline void count_global(const char* name, long long byte, int bytes) {
  GlobalCounters& g = global_counters();
  State& s = state();
  if (!s.cur) return;
  size_t t = (size_t)s.cur->linear;
  if (g.log.size() <= t) g.log.resize(t + 1);
  g.log[t].push_back({name, byte, bytes});
}

// A device function that takes buffer elements by reference (mma_store) drops the `n` accesses
// its arguments' evaluation logged (they take addresses, they move no data) ...
inline void uncount_global(int n) {
  GlobalCounters& g = global_counters();
  State& s = state();
  if (!g.on || !s.cur || g.log.size() <= (size_t)s.cur->linear) return;
  std::vector<GlobalAccess>& v = g.log[(size_t)s.cur->linear];
  for (; n > 0 && !v.empty(); --n) v.pop_back();
}
// ... and logs the accesses it makes through raw pointers into global buffers.
inline void count_global_ptr(const void* p, int bytes) {
  if (!global_counters().on) return;
  State& s = state();
  const char* c = (const char*)p;
  for (int i = 0; i < s.nregions; ++i) {
    const Region& r = s.regions[i];
    if (c >= r.begin && c < r.end) {
      if (!r.shared) count_global(r.name, (long long)(c - r.begin), bytes);
      return;
    }
  }
}

inline GlobalCounter& global_counter(const char* name) {
  GlobalCounters& g = global_counters();
  for (GlobalCounter& c : g.counters)
    if (c.name == name || strcmp(c.name, name) == 0) return c;
  g.counters.push_back({name, 0, 0, 0, 0});
  return g.counters.back();
}

inline void flush_global_counters(int nthreads) {
  GlobalCounters& g = global_counters();
  if (!g.on) return;
  g.log.resize((size_t)nthreads);
  for (int base = 0; base < nthreads; base += 32) {
    int end = base + 32 < nthreads ? base + 32 : nthreads;
    size_t shortest = (size_t)-1;
    for (int l = base; l < end; ++l) shortest = g.log[l].size() < shortest ? g.log[l].size() : shortest;
    for (size_t k = 0; k < shortest; ++k) {
      const char* name = g.log[base][k].name;
      long long sectors[64], bytes[32];
      int ns = 0, nb = 0, total = 0;
      for (int l = base; l < end; ++l) {
        const GlobalAccess& a = g.log[l][k];
        for (long long sec = a.byte / 32; sec <= (a.byte + a.bytes - 1) / 32; ++sec) {
          bool seen = false;
          for (int q = 0; q < ns; ++q) seen |= sectors[q] == sec;
          if (!seen && ns < 64) sectors[ns++] = sec;
        }
        bool dup = false;
        for (int q = 0; q < nb; ++q) dup |= bytes[q] == a.byte;
        if (!dup) { bytes[nb++] = a.byte; total += a.bytes; }
      }
      GlobalCounter& c = global_counter(name);
      c.requests++;
      c.sectors += (unsigned long long)ns;
      c.ideal += (unsigned long long)((total + 31) / 32);
    }
    for (int l = base; l < end; ++l)
      for (size_t k = shortest; k < g.log[l].size(); ++k) global_counter(g.log[l][k].name).unpaired++;
  }
  for (auto& v : g.log) v.clear();
}

}  // namespace tdsl_emu

// "name requests sectors ideal unpaired" per buffer, one line each.
inline const char* tdsl_emu_global_text() {
  tdsl_emu::GlobalCounters& g = tdsl_emu::global_counters();
  g.report.assign(1, 0);
  for (const tdsl_emu::GlobalCounter& c : g.counters) {
    char line[256];
    int n = snprintf(line, sizeof line, "%s %llu %llu %llu %llu\n", c.name, c.requests, c.sectors, c.ideal, c.unpaired);
    g.report.insert(g.report.end() - 1, line, line + n);
  }
  return g.report.data();
}
inline void tdsl_emu_global_reset(int on) {
  tdsl_emu::GlobalCounters& g = tdsl_emu::global_counters();
  g.counters.clear();
  for (auto& v : g.log) v.clear();
  g.on = on != 0;
}
