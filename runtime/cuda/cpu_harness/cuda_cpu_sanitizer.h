// cuda_cpu_sanitizer.h: the CPU harness's offline sanitizer (included by
// cuda_cpu.h when FUSECC_CPU_SANITIZE is defined), in the spirit of
// compute-sanitizer's racecheck, initcheck, memcheck and synccheck.
//
// The kernels are compiled with -fsanitize=thread for its instrumentation
// only: GCC calls __tsan_readN/__tsan_writeN(address) before every load and
// store of kernel code, and those hooks are defined here (libtsan is never
// linked). Each access is classified:
//   - shared memory (the dynamic buffer, and each static __shared__ array the
//     loader registered, with a red zone after it): a shadow cell per byte
//     holds the last writer and reader (thread, barrier interval, block, pc).
//     Reported: a read of a byte not written in this block (uninitialised),
//     RAW / WAR / WAW between different threads in one barrier interval
//     (a missing __syncthreads), an access past the array (out of bounds);
//   - a buffer of the launch (the regions the loader passes: one per pointer
//     argument): fine when wholly inside one; otherwise, unless it is the
//     thread's own stack, the builtin variables or the library's own data,
//     an out-of-bounds global access, named by the nearest buffer.
// Barriers record their call site: threads of one block meeting at
// different __syncthreads() calls, or a barrier some threads exited before,
// are reported; so is a full-mask shuffle in a warp with inactive lanes.
// A finding keeps the first occurrence per (kind, pc); the loader turns pcs
// into kernels.cu lines (addr2line over the library's debug info).

#ifndef FUSECC_CUDA_CPU_SANITIZER_H
#define FUSECC_CUDA_CPU_SANITIZER_H

#include <algorithm>
#include <mutex>

namespace fusecc_cpu {
namespace san {

// Mirrored by ctypes in runtime/cuda/cpu_harness/sanitizer.py: keep them in step.
enum Kind : int32_t {
  RACE_RAW = 1,
  RACE_WAR,
  RACE_WAW,
  UNINITIALIZED_SHARED,
  SHARED_OUT_OF_BOUNDS,
  GLOBAL_OUT_OF_BOUNDS,
  BARRIER_DIVERGENT,
  BARRIER_EXITED,
  PARTIAL_WARP,
};
enum RegionKind : int32_t { BUFFER = 0, IGNORED = 1 };

struct Region {
  uint64_t start, end;
  int32_t kind, index;  // index: the kernel argument
};

struct Finding {
  int32_t kind, thread, other_thread, size;
  uint32_t block[3];
  int32_t region;  // the argument of a global finding, else -1
  uint64_t pc, other_pc;  // offsets into the library (0: none)
  uint64_t address;
  int64_t offset;  // into the shared array or buffer
  int64_t extra;   // live lanes (PARTIAL_WARP), exited threads (BARRIER_EXITED)
  char what[48];   // the shared array
};

struct Report {
  int32_t count, capacity, dropped, pad;
  Finding* findings;
};

struct Cell {
  uint32_t w_block, w_interval, r_block, r_interval;
  int16_t writer, reader;  // reader: the interval's first
  int16_t multi, other_reader;  // more than one reader; the latest that was not the first
  uint64_t w_pc, r_pc;
};

struct Segment {
  uintptr_t base;   // of the array (offsets are reported from here)
  uintptr_t start;  // of what this segment covers
  uintptr_t end;    // valid bytes end here; [end, limit) is red zone
  uintptr_t limit;
  char name[48];
  Cell* cells;  // one per byte of [start, end) (calloc'd: plain memory, no instrumented container code)
};

// Offline counters (a launch with `counters`): the sampled blocks' accesses,
// per thread and barrier interval, are grouped into warp requests -- the k-th
// execution of one instruction (pc) by the lanes of one warp -- when the
// interval ends; each request adds its shared-memory wavefronts (the most
// distinct 32-bit words any bank serves) against the ideal, or its global
// bytes against the 32-byte sectors it touches. Mirrored in sanitizer.py.
struct Counters {
  uint64_t shared_requests, shared_wavefronts, shared_ideal_wavefronts;
  uint64_t global_requests, global_requested_bytes, global_sector_bytes;
  int64_t sample_blocks;  // blocks (by linear index) whose accesses are counted
  int64_t truncated;      // accesses past a thread's record capacity (not counted)
};

struct Access {
  uint64_t pc, address;
  uint32_t size, shared;
  uint32_t lane, occurrence;
};

constexpr int kMaxRecords = 2048;  // per thread and barrier interval

constexpr int kMaxStaticSegments = 256;
constexpr int kMaxRegions = 128;

struct State {
  Segment statics[kMaxStaticSegments];  // static __shared__ arrays and their red zones (persist: thread_local)
  int static_count = 0;
  Segment dynamic{};
  Region regions[kMaxRegions];
  int region_count = 0;
  int last_region = 0;  // checked first: consecutive accesses mostly hit one buffer
  Report* report = nullptr;
  uintptr_t os_stack_lo = 0, os_stack_hi = 0;
  uintptr_t builtins_lo[4], builtins_hi[4];  // threadIdx, blockIdx, blockDim, gridDim of this OS thread
  Counters* counters = nullptr;
  bool sampling = false;  // the current block is one of counters->sample_blocks
  Access* records = nullptr;  // [kMaxThreads][kMaxRecords]
  Access* merged = nullptr;   // [kWarp * kMaxRecords]: one warp's, sorted into requests
  int record_count[kMaxThreads];
};

// Per OS thread, in one TLS block (one lookup per access): the worker once it
// has begun a sanitized launch (until then, e.g. while the Worker is built by
// instrumented code, nothing is checked), and whether the sanitizer itself is
// running (the standard library's inline code it calls is instrumented too,
// and must not recurse).
struct ThreadState {
  Worker* worker = nullptr;
  bool checking = false;
};
inline thread_local ThreadState this_thread;

struct Busy {
  ThreadState& t;
  FUSECC_CPU_HARNESS explicit Busy(ThreadState& state) : t(state) { t.checking = true; }
  FUSECC_CPU_HARNESS ~Busy() { t.checking = false; }
};

inline std::mutex& report_mutex() {
  static std::mutex m;
  return m;
}

FUSECC_CPU_HARNESS inline uintptr_t library_base() {
  static uintptr_t base = [] {
    Dl_info info;
    return dladdr(reinterpret_cast<void*>(&library_base), &info) ? reinterpret_cast<uintptr_t>(info.dli_fbase) : uintptr_t(0);
  }();
  return base;
}

FUSECC_CPU_HARNESS inline uint64_t pc_offset(void* pc) {
  return pc ? uint64_t(reinterpret_cast<uintptr_t>(pc) - library_base()) : 0;
}

FUSECC_CPU_HARNESS inline int thread_index(const Worker& w) { return int(w.current - w.fibers); }

FUSECC_CPU_HARNESS inline void report(Worker& w, int32_t kind, void* pc, int thread, int other_thread, void* other_pc,
                                      uintptr_t address, int size, int32_t region, int64_t offset, int64_t extra,
                                      const char* what) {
  State& s = *static_cast<State*>(w.sanitizer);
  if (!s.report) return;
  const uint64_t at = pc_offset(pc);
  std::lock_guard<std::mutex> lock(report_mutex());
  Report& r = *s.report;
  for (int i = 0; i < r.count; ++i)
    if (r.findings[i].kind == kind && r.findings[i].pc == at) return;  // the first occurrence per place is enough
  if (r.count >= r.capacity) {
    ++r.dropped;
    return;
  }
  Finding& f = r.findings[r.count++];
  f.kind = kind;
  f.thread = thread;
  f.other_thread = other_thread;
  f.size = size;
  f.block[0] = blockIdx.x;
  f.block[1] = blockIdx.y;
  f.block[2] = blockIdx.z;
  f.region = region;
  f.pc = at;
  f.other_pc = pc_offset(other_pc);
  f.address = address;
  f.offset = offset;
  f.extra = extra;
  snprintf(f.what, sizeof f.what, "%s", what ? what : "");
}

FUSECC_CPU_HARNESS inline void init_segment(Segment& seg, uintptr_t base, uintptr_t start, size_t valid, size_t redzone, const char* name) {
  seg.base = base;
  seg.start = start;
  seg.end = start + valid;
  seg.limit = start + valid + redzone;
  snprintf(seg.name, sizeof seg.name, "%s", name);
  free(seg.cells);
  seg.cells = valid ? static_cast<Cell*>(calloc(valid, sizeof(Cell))) : nullptr;
}

FUSECC_CPU_HARNESS inline State& state(Worker& w) {
  if (!w.sanitizer) w.sanitizer = new State();  // lives as long as the worker thread
  return *static_cast<State*>(w.sanitizer);
}

FUSECC_CPU_HARNESS inline void begin_launch(Worker& w, uint64_t shared_bytes, int32_t region_count, const void* regions, void* rep, void* counters) {
  ThreadState& ts = this_thread;
  Busy busy(ts);
  State& s = state(w);
  ts.worker = &w;
  s.region_count = region_count < kMaxRegions ? region_count : kMaxRegions;
  memcpy(s.regions, regions, sizeof(Region) * size_t(s.region_count));
  s.last_region = 0;
  s.report = static_cast<Report*>(rep);
  s.counters = static_cast<Counters*>(counters);
  if (s.counters && !s.records) {
    s.records = static_cast<Access*>(calloc(size_t(kMaxThreads) * kMaxRecords, sizeof(Access)));
    s.merged = static_cast<Access*>(calloc(size_t(kWarp) * kMaxRecords, sizeof(Access)));
  }
  const uintptr_t builtins[4] = {uintptr_t(&threadIdx), uintptr_t(&blockIdx), uintptr_t(&blockDim), uintptr_t(&gridDim)};
  const size_t sizes[4] = {sizeof threadIdx, sizeof blockIdx, sizeof blockDim, sizeof gridDim};
  for (int i = 0; i < 4; ++i) s.builtins_lo[i] = builtins[i], s.builtins_hi[i] = builtins[i] + sizes[i];
  init_segment(s.dynamic, uintptr_t(w.dynamic_shared), uintptr_t(w.dynamic_shared), shared_bytes, shared_bytes ? 64 : 0, "dynamic shared memory");
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* lo;
    size_t size;
    pthread_attr_getstack(&attr, &lo, &size);
    s.os_stack_lo = uintptr_t(lo);
    s.os_stack_hi = uintptr_t(lo) + size;
    pthread_attr_destroy(&attr);
  }
}

// Called by each thread where a static __shared__ array is declared (the
// loader adds the call, and a red zone array after it, on the same line).
FUSECC_CPU_HARNESS inline void shared_array(void* array, size_t bytes, void* redzone, size_t redzone_bytes, const char* name) {
  Busy busy(this_thread);
  State& s = state(worker());
  const uintptr_t a = uintptr_t(array);
  for (int i = 0; i < s.static_count; ++i)
    if (s.statics[i].start == a) return;
  if (s.static_count + 2 > kMaxStaticSegments) return;  // past the table: left unchecked
  init_segment(s.statics[s.static_count++], a, a, bytes, 0, name);
  init_segment(s.statics[s.static_count++], a, uintptr_t(redzone), 0, redzone_bytes, name);
}

FUSECC_CPU_HARNESS inline void shared_access(Worker& w, Segment& seg, uintptr_t a, int size, bool write, void* pc) {
  const int t = thread_index(w);
  if (a < seg.start || a + size > seg.end) {
    report(w, SHARED_OUT_OF_BOUNDS, pc, t, -1, nullptr, a, size, -1, int64_t(a) - int64_t(seg.base), int64_t(seg.end - seg.start), seg.name);
    return;
  }
  const uint32_t block = w.block_serial, interval = w.interval;
  for (int i = 0; i < size; ++i) {
    Cell& c = seg.cells[a - seg.start + i];
    const int64_t offset = int64_t(a + i) - int64_t(seg.base);
    if (write) {
      if (c.w_block == block && c.w_interval == interval && c.writer != t) {
        report(w, RACE_WAW, pc, t, c.writer, reinterpret_cast<void*>(c.w_pc), a, size, -1, offset, 0, seg.name);
      } else if (c.r_block == block && c.r_interval == interval && (c.reader != t || c.multi)) {
        report(w, RACE_WAR, pc, t, c.reader != t ? c.reader : c.other_reader, reinterpret_cast<void*>(c.r_pc), a, size, -1, offset, 0, seg.name);
      }
      c.w_block = block;
      c.w_interval = interval;
      c.writer = int16_t(t);
      c.w_pc = uint64_t(uintptr_t(pc));
    } else {
      if (c.w_block != block) {
        report(w, UNINITIALIZED_SHARED, pc, t, -1, nullptr, a, size, -1, offset, 0, seg.name);
      } else if (c.w_interval == interval && c.writer != t) {
        report(w, RACE_RAW, pc, t, c.writer, reinterpret_cast<void*>(c.w_pc), a, size, -1, offset, 0, seg.name);
      }
      if (c.r_block == block && c.r_interval == interval) {
        if (c.reader != t) c.multi = 1, c.other_reader = int16_t(t);
      } else {
        c.r_block = block;
        c.r_interval = interval;
        c.reader = int16_t(t);
        c.multi = 0;
        c.r_pc = uint64_t(uintptr_t(pc));
      }
    }
  }
}

FUSECC_CPU_HARNESS inline bool is_shared(State& s, uintptr_t a) {
  if (a >= s.dynamic.start && a < s.dynamic.limit) return true;
  for (int i = 0; i < s.static_count; ++i)
    if (a >= s.statics[i].start && a < s.statics[i].limit) return true;
  return false;
}

FUSECC_CPU_HARNESS inline void record(Worker& w, State& s, uintptr_t a, int size, void* pc) {
  for (int i = 0; i < 4; ++i)
    if (a >= s.builtins_lo[i] && a < s.builtins_hi[i]) return;
  const int t = thread_index(w);
  int& n = s.record_count[t];
  if (n >= kMaxRecords) {
    ++s.counters->truncated;
    return;
  }
  Access& r = s.records[size_t(t) * kMaxRecords + size_t(n++)];
  r.pc = uint64_t(uintptr_t(pc));
  r.address = a;
  r.size = uint32_t(size);
  r.shared = is_shared(s, a);
  r.lane = uint32_t(t % kWarp);
}

// The warp requests of one barrier interval of a sampled block, counted.
FUSECC_CPU_HARNESS inline void flush_counters(Worker& w, int n) {
  State& s = *static_cast<State*>(w.sanitizer);
  if (!s.sampling) return;
  Counters& c = *s.counters;
  Access* merged = s.merged;
  for (int warp = 0; warp * kWarp < n; ++warp) {
    int m = 0;
    for (int lane = 0; lane < kWarp && warp * kWarp + lane < n; ++lane) {
      const int t = warp * kWarp + lane;
      Access* rec = s.records + size_t(t) * kMaxRecords;
      for (int i = 0; i < s.record_count[t]; ++i) {
        uint32_t k = 0;  // how often this lane ran this instruction before, in this interval
        for (int j = i - 1; j >= 0 && k < 1u << 30; --j) k += rec[j].pc == rec[i].pc;
        rec[i].occurrence = k;
        merged[m++] = rec[i];
      }
      s.record_count[t] = 0;
    }
    std::sort(merged, merged + m, [](const Access& x, const Access& y) {
      return x.pc != y.pc ? x.pc < y.pc : x.occurrence < y.occurrence;
    });
    for (int begin = 0; begin < m;) {
      int end = begin + 1;
      while (end < m && merged[end].pc == merged[begin].pc && merged[end].occurrence == merged[begin].occurrence) ++end;
      if (merged[begin].shared) {
        uint64_t words[kWarp * 4];
        int count = 0;
        for (int i = begin; i < end; ++i)
          for (uint64_t word = merged[i].address >> 2; word <= (merged[i].address + merged[i].size - 1) >> 2; ++word) {
            bool seen = false;
            for (int j = 0; j < count && !seen; ++j) seen = words[j] == word;
            if (!seen && count < kWarp * 4) words[count++] = word;
          }
        int per_bank[kWarp] = {0};
        int ways = 1;
        for (int j = 0; j < count; ++j) ways = std::max(ways, ++per_bank[words[j] % kWarp]);
        ++c.shared_requests;
        c.shared_wavefronts += uint64_t(ways);
        c.shared_ideal_wavefronts += uint64_t(std::max(1, (count + kWarp - 1) / kWarp));
      } else {
        uint64_t sectors[kWarp * 2];
        int count = 0;
        uint64_t bytes = 0;
        for (int i = begin; i < end; ++i) {
          bool repeated = false;  // a broadcast: lanes asking for the same bytes ask once
          for (int j = begin; j < i && !repeated; ++j) repeated = merged[j].address == merged[i].address;
          if (repeated) continue;
          bytes += merged[i].size;
          for (uint64_t sector = merged[i].address >> 5; sector <= (merged[i].address + merged[i].size - 1) >> 5; ++sector) {
            bool seen = false;
            for (int j = 0; j < count && !seen; ++j) seen = sectors[j] == sector;
            if (!seen && count < kWarp * 2) sectors[count++] = sector;
          }
        }
        ++c.global_requests;
        c.global_requested_bytes += bytes;
        c.global_sector_bytes += uint64_t(count) * 32;
      }
      begin = end;
    }
  }
}

FUSECC_CPU_HARNESS inline void block_begin(Worker& w) {
  if (!w.sanitizer) return;
  State& s = *static_cast<State*>(w.sanitizer);
  const int64_t linear = int64_t(blockIdx.x) + int64_t(blockIdx.y) * gridDim.x + int64_t(blockIdx.z) * gridDim.x * gridDim.y;
  s.sampling = s.counters && linear < s.counters->sample_blocks;
  if (s.sampling) memset(s.record_count, 0, sizeof s.record_count);
}

FUSECC_CPU_HARNESS inline void block_end(Worker& w, int n) {
  if (!w.sanitizer) return;
  Busy busy(this_thread);
  flush_counters(w, n);
}

// `counted`: false for a cp.async landing at its wait (the copy's one shared
// store was counted where it was issued; the landing is checked, not counted).
FUSECC_CPU_HARNESS inline void check_access(void* address, int size, bool write, void* pc, bool counted = true) {
  ThreadState& ts = this_thread;
  if (!ts.worker || ts.checking) return;
  Worker& w = *ts.worker;
  if (!w.sanitizer || !w.current) return;
  Busy busy(ts);
  State& s = *static_cast<State*>(w.sanitizer);
  const uintptr_t a = uintptr_t(address);
  const uintptr_t stack = uintptr_t(w.stacks) + uintptr_t(thread_index(w)) * w.stack_slot;
  if (a >= stack && a < stack + w.stack_slot) return;  // the thread's locals
  const Region& last = s.regions[s.last_region];
  if (s.region_count && last.kind == BUFFER && a >= last.start && a + size <= last.end) {
    if (s.sampling && counted) record(w, s, a, size, pc);
    return;
  }
  for (int i = 0; i < 4; ++i)
    if (a >= s.builtins_lo[i] && a < s.builtins_hi[i]) return;
  if (s.sampling && counted && is_shared(s, a)) record(w, s, a, size, pc);
  if (a >= s.dynamic.start && a < s.dynamic.limit) return shared_access(w, s.dynamic, a, size, write, pc);
  for (int i = 0; i < s.static_count; ++i) {
    Segment* seg = &s.statics[i];
    if (a < seg->start || a >= seg->limit) continue;
    if (seg->end == seg->start) {  // a red zone: name the array that ends nearest below (the compiler orders them)
      for (int j = 0; j < s.static_count; ++j) {
        Segment& other = s.statics[j];
        if (other.end > other.start && other.end <= a && (seg->end == seg->start || other.end > seg->end)) seg = &other;
      }
    }
    return shared_access(w, *seg, a, size, write, pc);
  }
  for (int i = 0; i < s.region_count; ++i) {
    const Region& r = s.regions[i];
    if (r.kind == BUFFER && a >= r.start && a + size <= r.end) {
      s.last_region = i;
      if (s.sampling && counted) record(w, s, a, size, pc);
      return;
    }
  }
  const Region* nearest = nullptr;
  uint64_t distance = ~uint64_t(0);
  for (int i = 0; i < s.region_count; ++i) {
    const Region& r = s.regions[i];
    if (r.kind == IGNORED) {
      if (a >= r.start && a < r.end) return;
      continue;
    }
    if (a >= r.start && a + size <= r.end) return;
    const uint64_t d = a >= r.end ? a - r.end : (a < r.start ? r.start - a : 0);
    if (d < distance) distance = d, nearest = &r;
  }
  if (a >= s.os_stack_lo && a < s.os_stack_hi) return;  // the launcher's frame (the kernel's arguments)
  report(w, GLOBAL_OUT_OF_BOUNDS, pc, thread_index(w), -1, nullptr, a, size, nearest ? nearest->index : -1,
         nearest ? int64_t(a) - int64_t(nearest->start) : 0, nearest ? int64_t(nearest->end - nearest->start) : 0, nullptr);
}

// At a completed __syncthreads(): every waiting thread came through one call site, and none exited.
FUSECC_CPU_HARNESS inline void barrier_complete(Worker& w, int n) {
  if (!w.sanitizer) return;
  Busy busy(this_thread);
  flush_counters(w, n);
  int first = -1;
  for (int t = 0; t < n; ++t) {
    const Fiber& f = w.fibers[t];
    if (f.state != AT_BARRIER) continue;
    if (first < 0) {
      first = t;
    } else if (f.barrier_site != w.fibers[first].barrier_site) {
      report(w, BARRIER_DIVERGENT, w.fibers[first].barrier_site, first, t, f.barrier_site, 0, 0, -1, 0, 0, nullptr);
      break;
    }
  }
  if (first >= 0 && w.live < n)
    report(w, BARRIER_EXITED, w.fibers[first].barrier_site, first, -1, nullptr, 0, 0, -1, 0, n - w.live, nullptr);
}

// A shuffle or vote: a full mask names every lane, so every lane must be live.
FUSECC_CPU_HARNESS inline void check_warp_operation(unsigned mask, void* site) {
  Worker& w = worker();
  if (!w.sanitizer) return;
  Busy busy(this_thread);
  const int t = thread_index(w);
  const int live = w.warp_live[t / kWarp];
  if (mask == 0xffffffffu && live < kWarp) report(w, PARTIAL_WARP, site, t, -1, nullptr, 0, 0, -1, 0, live, nullptr);
}

}  // namespace san
}  // namespace fusecc_cpu

// --------------------------------------------------------------------------- GCC's -fsanitize=thread hooks

#define FUSECC_SAN_HOOKS(n)                                                                                       \
  extern "C" FUSECC_CPU_HARNESS void __tsan_read##n(void* p) {                                                     \
    fusecc_cpu::san::check_access(p, n, false, __builtin_return_address(0));                                       \
  }                                                                                                               \
  extern "C" FUSECC_CPU_HARNESS void __tsan_write##n(void* p) {                                                    \
    fusecc_cpu::san::check_access(p, n, true, __builtin_return_address(0));                                        \
  }                                                                                                               \
  extern "C" FUSECC_CPU_HARNESS void __tsan_unaligned_read##n(void* p) {                                           \
    fusecc_cpu::san::check_access(p, n, false, __builtin_return_address(0));                                       \
  }                                                                                                               \
  extern "C" FUSECC_CPU_HARNESS void __tsan_unaligned_write##n(void* p) {                                          \
    fusecc_cpu::san::check_access(p, n, true, __builtin_return_address(0));                                        \
  }
FUSECC_SAN_HOOKS(1)
FUSECC_SAN_HOOKS(2)
FUSECC_SAN_HOOKS(4)
FUSECC_SAN_HOOKS(8)
FUSECC_SAN_HOOKS(16)
#undef FUSECC_SAN_HOOKS

extern "C" FUSECC_CPU_HARNESS void __tsan_read_range(void* p, long n) {
  fusecc_cpu::san::check_access(p, int(n), false, __builtin_return_address(0));
}
extern "C" FUSECC_CPU_HARNESS void __tsan_write_range(void* p, long n) {
  fusecc_cpu::san::check_access(p, int(n), true, __builtin_return_address(0));
}
extern "C" FUSECC_CPU_HARNESS void __tsan_func_entry(void*) {}
extern "C" FUSECC_CPU_HARNESS void __tsan_func_exit(void*) {}
extern "C" FUSECC_CPU_HARNESS void __tsan_init() {}
extern "C" FUSECC_CPU_HARNESS void __tsan_vptr_update(void*, void*) {}
extern "C" FUSECC_CPU_HARNESS void __tsan_vptr_read(void*) {}

#endif  // FUSECC_CUDA_CPU_SANITIZER_H
