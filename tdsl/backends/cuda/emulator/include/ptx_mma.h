// ptx_mma.h: the emulator's models of the PTX warp-level matrix instructions that tdsl's mma
// intrinsics use (tdsl.intrinsics.cuda_mma), exactly as the PTX ISA defines them:
//
//   ldmatrix.sync.aligned.m8n8.x{1,2,4}{,.trans}.shared.b16   tdsl_ptx_ldmatrix<X, TRANS>(d, row)
//   mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.*.f32    tdsl_ptx_mma_m16n8k16_f32<half|nv_bfloat16>(d, a, b, c)
//   mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16         tdsl_ptx_mma_m16n8k16_f16(a, b, cd)
//   mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32           tdsl_ptx_mma_m16n8k32_s32_s8(d, a, b, c)
//   mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32           tdsl_ptx_mma_m16n8k32_s32_u8(d, a, b, c)
//
// Every lane passes its own registers (and, for ldmatrix, its own row address), all lanes meet
// (warp-collective), and each lane gets back exactly its own part of the result:
//
// * ldmatrix: lane 8*m + r supplies the address of row r of matrix m (x1: lanes 0-7, x2: 0-15,
//   x4: 0-31; the other lanes' addresses are ignored); each row is 8 b16 elements, 16 bytes,
//   16-byte aligned, in shared memory. Register m of lane l receives elements (l / 4, 2 (l % 4))
//   and (l / 4, 2 (l % 4) + 1) of matrix m; with .trans, elements (2 (l % 4), l / 4) and
//   (2 (l % 4) + 1, l / 4). Each matrix is one shared-memory phase of 8 rows x 16 bytes: the
//   emulator counts its wavefronts (1 + the bank conflicts: the most distinct 4-byte words any
//   bank holds among the phase's 32 words) per shared array (`tdsl_emu_bank_report`).
// * mma m16n8k16 (groupID = lane >> 2, tig = lane % 4), A row-major 16 x 16, B column-major
//   16 x 8, C/D 16 x 8 fp32:  a_i: row groupID + 8 ((i / 2) % 2), column 2 tig + i % 2 + 8 (i / 4);
//   b_i: row (k) 2 tig + i % 2 + 8 (i / 2), column groupID;  c_i: row groupID + 8 (i / 2),
//   column 2 tig + i % 2. Products are exact in fp32; the sum is in fp32, k in order.
// * mma m16n8k32 s8 and u8 (the same layouts; the bytes read as signed or unsigned): a_i (16 per lane): row groupID + 8 ((i / 4) % 2), column 4 tig + i % 4 +
//   16 (i / 8); b_i (8): row 4 tig + i % 4 + 16 (i / 4), column groupID; c_i as above (s32,
//   wrapping).
#pragma once

namespace tdsl_emu {

enum { OP_LDMATRIX = 16, OP_MMA = 17 };

struct BankCounter {
  const char* name;
  unsigned long long instructions, phases, wavefronts;
  int worst;  // the worst n-way conflict seen in one phase
};
enum { MAX_BANK_COUNTERS = 64 };
struct BankCounters {
  BankCounter c[MAX_BANK_COUNTERS];
  int n = 0;
  char report[MAX_BANK_COUNTERS * 128];
};
inline BankCounters& bank_counters() {
  static BankCounters b;
  return b;
}
inline BankCounter& bank_counter(const char* name) {
  BankCounters& b = bank_counters();
  for (int i = 0; i < b.n; ++i)
    if (b.c[i].name == name || strcmp(b.c[i].name, name) == 0) return b.c[i];
  if (b.n == MAX_BANK_COUNTERS) return b.c[MAX_BANK_COUNTERS - 1];
  b.c[b.n] = {name, 0, 0, 0, 0};
  return b.c[b.n++];
}

// The shared array `p` lies in (its region), or fails naming the instruction.
inline const Region& shared_region(const void* p, size_t bytes, const char* what) {
  State& s = state();
  const char* c = (const char*)p;
  for (int i = 0; i < s.nregions; ++i) {
    const Region& r = s.regions[i];
    if (c >= r.begin && c < r.end) {
      if (!r.shared) fail("%s reads %s, which is not in shared memory (ldmatrix reads only shared memory)", what, r.name);
      if (c + bytes > r.end)
        fail("out-of-bounds access by %s: %zu bytes at byte offset %lld of %s, which has %lld bytes", what, bytes,
             (long long)(c - r.begin), r.name, (long long)(r.end - r.begin));
      return r;
    }
  }
  fail("%s: the address given by lane %d is in no shared array", what, lane_id());
}

// Wavefronts of one shared-memory phase: `words` 4-byte word offsets (from the array's start,
// which is taken to be at bank 0) -> the most distinct words one of the 32 banks holds.
inline int phase_wavefronts(const long long* words, int n) {
  int worst = 1;
  for (int b = 0; b < 32; ++b) {
    long long seen[32];
    int k = 0;
    for (int i = 0; i < n; ++i) {
      if (((words[i] % 32) + 32) % 32 != b) continue;
      bool dup = false;
      for (int j = 0; j < k; ++j) dup |= seen[j] == words[i];
      if (!dup) seen[k++] = words[i];
    }
    if (k > worst) worst = k;
  }
  return worst;
}

template <int X, bool TRANS> inline void ldmatrix(unsigned* d, const void* row) {
  static_assert(X == 1 || X == 2 || X == 4, "ldmatrix .x1, .x2 or .x4");
  const char* what = TRANS ? "ldmatrix.trans" : "ldmatrix";
  if (warp_lanes() != 32) fail("%s needs all 32 lanes of a warp; this warp has %d threads", what, warp_lanes());
  int lane = lane_id();
  if (lane < 8 * X) {
    if ((uintptr_t)row % 16) fail("%s: lane %d's row address is not 16-byte aligned (the GPU faults)", what, lane);
    shared_region(row, 16, what);
  }
  const void* mine = row;
  unsigned char (*slots)[SLOT_BYTES] = warp_exchange(&mine, sizeof mine, OP_LDMATRIX);
  const unsigned short* rows[32];
  for (int l = 0; l < 8 * X; ++l) memcpy(&rows[l], slots[l], sizeof(void*));
  for (int m = 0; m < X; ++m) {
    int g = lane / 4, t = lane % 4;
    unsigned short lo, hi;
    if (TRANS) {  // column g of matrix m, rows 2t and 2t+1
      lo = rows[8 * m + 2 * t][g];
      hi = rows[8 * m + 2 * t + 1][g];
    } else {      // row g of matrix m, columns 2t and 2t+1
      lo = rows[8 * m + g][2 * t];
      hi = rows[8 * m + g][2 * t + 1];
    }
    d[m] = (unsigned)lo | ((unsigned)hi << 16);
  }
  if (lane == 0) {  // one lane counts the warp's instruction
    const Region& r = shared_region(rows[0], 16, what);
    BankCounter& bc = bank_counter(r.name);
    bc.instructions++;
    for (int m = 0; m < X; ++m) {
      long long words[32];
      for (int q = 0; q < 8; ++q) {
        const Region& rq = shared_region(rows[8 * m + q], 16, what);
        long long base = (long long)((const char*)rows[8 * m + q] - rq.begin) / 4;
        for (int w = 0; w < 4; ++w) words[4 * q + w] = base + w;
      }
      int way = phase_wavefronts(words, 32);
      bc.phases++;
      bc.wavefronts += (unsigned long long)way;
      if (way > bc.worst) bc.worst = way;
    }
  }
}

// Gathers the 32 lanes' registers (a, b, c words per lane) for one mma.sync.
struct MmaLanes {
  unsigned a[32][4], b[32][2], c[32][4];
};
inline void mma_gather(MmaLanes& g, const unsigned* a, const unsigned* b, const unsigned* c, const char* what) {
  if (warp_lanes() != 32) fail("%s needs all 32 lanes of a warp; this warp has %d threads", what, warp_lanes());
  unsigned mine[10];
  memcpy(mine, a, 16);
  memcpy(mine + 4, b, 8);
  memcpy(mine + 6, c, 16);
  unsigned char (*slots)[SLOT_BYTES] = warp_exchange(mine, sizeof mine, OP_MMA);
  for (int l = 0; l < 32; ++l) {
    memcpy(g.a[l], slots[l], 16);
    memcpy(g.b[l], slots[l] + 16, 8);
    memcpy(g.c[l], slots[l] + 24, 16);
  }
}

inline unsigned short half_of(unsigned word, int i) { return (unsigned short)(i ? word >> 16 : word & 0xffffu); }

template <class T> inline float b16_value(unsigned short bits) {
  T v;
  memcpy(&v, &bits, 2);
  return (float)v;
}

template <class T> inline void mma_m16n8k16_f32(float* d, const unsigned* a, const unsigned* b, const float* c) {
  MmaLanes g;
  mma_gather(g, a, b, (const unsigned*)c, "mma.sync.m16n8k16");
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; ++l) {
    int gid = l >> 2, tig = l % 4;
    for (int i = 0; i < 8; ++i)
      A[gid + 8 * ((i / 2) % 2)][2 * tig + i % 2 + 8 * (i / 4)] = b16_value<T>(half_of(g.a[l][i / 2], i % 2));
    for (int i = 0; i < 4; ++i) B[2 * tig + i % 2 + 8 * (i / 2)][gid] = b16_value<T>(half_of(g.b[l][i / 2], i % 2));
    for (int i = 0; i < 4; ++i) memcpy(&C[gid + 8 * (i / 2)][2 * tig + i % 2], &g.c[l][i], 4);
  }
  int lane = lane_id(), gid = lane >> 2, tig = lane % 4;
  for (int i = 0; i < 4; ++i) {
    int r = gid + 8 * (i / 2), col = 2 * tig + i % 2;
    float acc = C[r][col];
    for (int k = 0; k < 16; ++k) acc += A[r][k] * B[k][col];
    d[i] = acc;
  }
}

// m16n8k16 with f16 C/D (2 registers of 2 halves: c_i as for f32); the sum is in fp32, k in
// order, rounded to f16 once.
inline void mma_m16n8k16_f16(const unsigned* a, const unsigned* b, unsigned* d) {
  MmaLanes g;
  unsigned c4[4] = {d[0], d[1], 0u, 0u};
  mma_gather(g, a, b, c4, "mma.sync.m16n8k16.f16");
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; ++l) {
    int gid = l >> 2, tig = l % 4;
    for (int i = 0; i < 8; ++i)
      A[gid + 8 * ((i / 2) % 2)][2 * tig + i % 2 + 8 * (i / 4)] = b16_value<half>(half_of(g.a[l][i / 2], i % 2));
    for (int i = 0; i < 4; ++i) B[2 * tig + i % 2 + 8 * (i / 2)][gid] = b16_value<half>(half_of(g.b[l][i / 2], i % 2));
    for (int i = 0; i < 4; ++i) C[gid + 8 * (i / 2)][2 * tig + i % 2] = b16_value<half>(half_of(g.c[l][i / 2], i % 2));
  }
  int lane = lane_id(), gid = lane >> 2, tig = lane % 4;
  unsigned short out[4];
  for (int i = 0; i < 4; ++i) {
    int r = gid + 8 * (i / 2), col = 2 * tig + i % 2;
    float acc = C[r][col];
    for (int k = 0; k < 16; ++k) acc += A[r][k] * B[k][col];
    half h = (half)acc;
    memcpy(&out[i], &h, 2);
  }
  d[0] = (unsigned)out[0] | ((unsigned)out[1] << 16);
  d[1] = (unsigned)out[2] | ((unsigned)out[3] << 16);
}

template <class E> inline void mma_m16n8k32_s32(int* d, const unsigned* a, const unsigned* b, const int* c) {
  MmaLanes g;
  mma_gather(g, a, b, (const unsigned*)c, "mma.sync.m16n8k32");
  int A[16][32], B[32][8], C[16][8];
  for (int l = 0; l < 32; ++l) {
    int gid = l >> 2, tig = l % 4;
    for (int i = 0; i < 16; ++i)
      A[gid + 8 * ((i / 4) % 2)][4 * tig + i % 4 + 16 * (i / 8)] = (E)(g.a[l][i / 4] >> (8 * (i % 4)));
    for (int i = 0; i < 8; ++i) B[4 * tig + i % 4 + 16 * (i / 4)][gid] = (E)(g.b[l][i / 4] >> (8 * (i % 4)));
    for (int i = 0; i < 4; ++i) memcpy(&C[gid + 8 * (i / 2)][2 * tig + i % 2], &g.c[l][i], 4);
  }
  int lane = lane_id(), gid = lane >> 2, tig = lane % 4;
  for (int i = 0; i < 4; ++i) {
    int r = gid + 8 * (i / 2), col = 2 * tig + i % 2;
    unsigned acc = (unsigned)C[r][col];
    for (int k = 0; k < 32; ++k) acc += (unsigned)(A[r][k] * B[k][col]);
    d[i] = (int)acc;
  }
}

}  // namespace tdsl_emu

template <int X, bool TRANS> inline void tdsl_ptx_ldmatrix(unsigned* d, const void* row) {
  tdsl_emu::ldmatrix<X, TRANS>(d, row);
}
template <class T>
inline void tdsl_ptx_mma_m16n8k16_f32(float* d, const unsigned* a, const unsigned* b, const float* c) {
  tdsl_emu::mma_m16n8k16_f32<T>(d, a, b, c);
}
inline void tdsl_ptx_mma_m16n8k16_f16(const unsigned* a, const unsigned* b, unsigned* d) {
  tdsl_emu::mma_m16n8k16_f16(a, b, d);
}
inline void tdsl_ptx_mma_m16n8k32_s32_s8(int* d, const unsigned* a, const unsigned* b, const int* c) {
  tdsl_emu::mma_m16n8k32_s32<signed char>(d, a, b, c);
}
inline void tdsl_ptx_mma_m16n8k32_s32_u8(int* d, const unsigned* a, const unsigned* b, const int* c) {
  tdsl_emu::mma_m16n8k32_s32<unsigned char>(d, a, b, c);
}

// The shared arrays' counters as text, one line each: "name instructions phases wavefronts worst".
inline const char* tdsl_emu_bank_text() {
  tdsl_emu::BankCounters& b = tdsl_emu::bank_counters();
  size_t at = 0;
  b.report[0] = 0;
  for (int i = 0; i < b.n; ++i) {
    const tdsl_emu::BankCounter& c = b.c[i];
    at += (size_t)snprintf(b.report + at, sizeof b.report - at, "%s %llu %llu %llu %d\n", c.name, c.instructions,
                           c.phases, c.wavefronts, c.worst);
    if (at >= sizeof b.report) break;
  }
  return b.report;
}
inline void tdsl_emu_bank_reset() { tdsl_emu::bank_counters().n = 0; }
