// cuda_cpu.h: run CUDA C kernels on the CPU (fusecc's CPU harness).
//
// The harness compiles a .cu file unchanged with the host C++ compiler and
// this header force-included (`g++ -include cuda_cpu.h`). Each CUDA thread of
// a block is a cooperative fiber with its own stack; __syncthreads() and the
// warp operations switch fibers until every live thread of the block (or of
// the warp) has arrived. One OS worker thread runs one block at a time, so
// `__shared__` is a `static thread_local`; blocks are handed out to the worker
// threads through an atomic counter. docs/cuda-c-conventions.md lists what a
// kernel may use.

#ifndef FUSECC_CUDA_CPU_H
#define FUSECC_CUDA_CPU_H
#define FUSECC_CPU_EMULATION 1

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <math.h>
#include <sys/mman.h>
#include <tuple>
#include <type_traits>
#include <unistd.h>
#include <utility>

#if !defined(__x86_64__) && !defined(FUSECC_CPU_UCONTEXT)
#define FUSECC_CPU_UCONTEXT 1  // portable, slower fallback: swapcontext makes a syscall per switch
#endif
#ifdef FUSECC_CPU_UCONTEXT
#include <ucontext.h>
#endif

// Sanitized builds (-DFUSECC_CPU_SANITIZE, compiled with -fsanitize=thread for its
// instrumentation only: the __tsan_* hooks are defined below, libtsan is not linked):
// every load and store of the kernels reaches check_access(); the harness's own
// functions are left uninstrumented (GCC then does not inline them into kernels).
#ifdef FUSECC_CPU_SANITIZE
#define FUSECC_CPU_HARNESS __attribute__((no_sanitize_thread))
#include <dlfcn.h>
#include <pthread.h>
#else
#define FUSECC_CPU_HARNESS
#endif

#ifndef FUSECC_CPU_STACK_BYTES
#define FUSECC_CPU_STACK_BYTES (64 * 1024)
#endif

// --------------------------------------------------------------------------- qualifiers

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __constant__
// One OS worker thread runs one block at a time: per-thread statics are per-block memory.
#define __shared__ static thread_local
// The emitter's spelling of `extern __shared__ T name[];` (a statement inside the kernel body).
#define FUSECC_EXTERN_SHARED(type, name) type* name = reinterpret_cast<type*>(fusecc_cpu::dynamic_shared())

// --------------------------------------------------------------------------- vector types

struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
};
struct __align__(8) float2 { float x, y; };
struct __align__(16) float4 { float x, y, z, w; };
struct __align__(8) int2 { int x, y; };
struct __align__(16) int4 { int x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }

// Set by the scheduler before it resumes a thread's fiber (fibers never change OS thread).
static thread_local uint3 threadIdx;
static thread_local uint3 blockIdx;
static thread_local dim3 blockDim;
static thread_local dim3 gridDim;
static constexpr int warpSize = 32;

// --------------------------------------------------------------------------- fibers

namespace fusecc_cpu {

enum FiberState : int { RUNNABLE, AT_BARRIER, AT_WARP, DONE, ABORTED };

struct Fiber {
#ifdef FUSECC_CPU_UCONTEXT
  ucontext_t context;
#else
  void* sp;  // saved stack pointer while suspended
#endif
  uint3 tid;
  int state;
  unsigned warp_generation;  // picks one of two exchange rows, so a fast lane cannot overwrite a slow one's
  void* barrier_site;        // where it waits at __syncthreads() (sanitized builds)
};

constexpr int kMaxThreads = 1024;
constexpr int kWarp = 32;
constexpr int kMaxWarps = kMaxThreads / kWarp;

struct Worker {
  Fiber fibers[kMaxThreads];
  Fiber* current = nullptr;
#ifdef FUSECC_CPU_UCONTEXT
  ucontext_t scheduler;
#else
  void* scheduler_sp = nullptr;
#endif
  int live = 0, barrier_arrived = 0;
  int warp_live[kMaxWarps], warp_arrived[kMaxWarps];
  uint64_t exchange[kMaxWarps][2][kWarp];
  char* stacks = nullptr;
  size_t stack_slot = 0, stack_count = 0;
  unsigned char* dynamic_shared = nullptr;
  size_t dynamic_shared_capacity = 0;
  void (*body)(void*) = nullptr;  // runs the kernel for the current fiber's thread
  void* body_arg = nullptr;
  char error[512] = {0};
  bool reverse = false;             // run each interval's threads in descending order
  uint32_t block_serial = 0;        // one per block run by this worker (sanitizer shadow validity)
  uint32_t interval = 0;            // barrier intervals of the current block
  void* sanitizer = nullptr;        // fusecc_cpu::san::State of this worker, sanitized builds

  ~Worker() {
    if (stacks) munmap(stacks, stack_slot * stack_count);
    free(dynamic_shared);
  }
};

struct WorkerHolder {
  Worker* worker = nullptr;
  ~WorkerHolder() { delete worker; }
};

FUSECC_CPU_HARNESS inline Worker& worker() {
  static thread_local WorkerHolder holder;
  if (!holder.worker) holder.worker = new Worker();
  return *holder.worker;
}

FUSECC_CPU_HARNESS inline void* dynamic_shared() { return worker().dynamic_shared; }

}  // namespace fusecc_cpu

extern "C" __attribute__((visibility("hidden"), noreturn)) void fusecc_cpu_fiber_main(fusecc_cpu::Worker* w);

#ifndef FUSECC_CPU_UCONTEXT
// Save the callee-saved registers, MXCSR and the x87 control word on the
// current stack, store the stack pointer in *save, switch to `next`, restore.
// A new fiber's stack is laid out so that the first switch "returns" into
// fusecc_cpu_fiber_start with the Worker in rbx and a 16-byte aligned stack.
extern "C" __attribute__((visibility("hidden"))) void fusecc_cpu_switch(void** save, void* next);
extern "C" __attribute__((visibility("hidden"))) void fusecc_cpu_fiber_start();
asm(R"(
    .text
    .globl fusecc_cpu_switch
    .hidden fusecc_cpu_switch
    .type fusecc_cpu_switch, @function
fusecc_cpu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size fusecc_cpu_switch, .-fusecc_cpu_switch

    .globl fusecc_cpu_fiber_start
    .hidden fusecc_cpu_fiber_start
    .type fusecc_cpu_fiber_start, @function
fusecc_cpu_fiber_start:
    movq %rbx, %rdi
    call fusecc_cpu_fiber_main
    ud2
    .size fusecc_cpu_fiber_start, .-fusecc_cpu_fiber_start
)");
#endif

namespace fusecc_cpu {

FUSECC_CPU_HARNESS inline void suspend(Worker& w, Fiber& f) {
#ifdef FUSECC_CPU_UCONTEXT
  swapcontext(&f.context, &w.scheduler);
#else
  fusecc_cpu_switch(&f.sp, w.scheduler_sp);
#endif
}

FUSECC_CPU_HARNESS inline void resume(Worker& w, Fiber& f) {
  w.current = &f;
  threadIdx = f.tid;
#ifdef FUSECC_CPU_UCONTEXT
  swapcontext(&w.scheduler, &f.context);
#else
  fusecc_cpu_switch(&w.scheduler_sp, f.sp);
#endif
}

// Unmapped at the end of every launch: each compiled module has its own
// thread_local Worker, and a module's stacks (two mappings per slot: the stack
// and its guard page) kept on an idle pool thread would pile up in a process
// that runs many modules (the fuzzer hit the 65530-mapping limit after ~300).
FUSECC_CPU_HARNESS inline void release_stacks(Worker& w) {
  if (w.stacks) munmap(w.stacks, w.stack_slot * w.stack_count);
  w.stacks = nullptr;
  w.stack_count = 0;
}

FUSECC_CPU_HARNESS inline bool ensure_stacks(Worker& w, size_t count) {
  if (w.stack_count >= count) return true;
  if (w.stacks) munmap(w.stacks, w.stack_slot * w.stack_count);
  size_t page = size_t(sysconf(_SC_PAGESIZE));
  size_t rounded = 32;
  while (rounded < count) rounded *= 2;
  w.stack_slot = ((FUSECC_CPU_STACK_BYTES + page - 1) / page + 1) * page;  // + one guard page
  void* region = mmap(nullptr, w.stack_slot * rounded, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (region == MAP_FAILED) {
    w.stacks = nullptr;
    w.stack_count = 0;
    snprintf(w.error, sizeof w.error, "could not map %zu fiber stacks", rounded);
    return false;
  }
  w.stacks = static_cast<char*>(region);
  w.stack_count = rounded;
  for (size_t i = 0; i < rounded; ++i) mprotect(w.stacks + i * w.stack_slot, page, PROT_NONE);  // overflow faults
  return true;
}

FUSECC_CPU_HARNESS inline void start(Worker& w, Fiber& f, size_t index) {
  char* base = w.stacks + index * w.stack_slot;
#ifdef FUSECC_CPU_UCONTEXT
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = base;
  f.context.uc_stack.ss_size = w.stack_slot;
  f.context.uc_link = nullptr;
  makecontext(&f.context, reinterpret_cast<void (*)()>(+[]() { fusecc_cpu_fiber_main(&worker()); }), 0);
#else
  auto top = reinterpret_cast<uint64_t*>((reinterpret_cast<uintptr_t>(base) + w.stack_slot) & ~uintptr_t(15));
  uint64_t* sp = top - 8;  // [csr][r15][r14][r13][r12][rbx][rbp][return address]
  uint32_t mxcsr;
  uint16_t fpucw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  memcpy(reinterpret_cast<char*>(sp), &mxcsr, 4);
  memcpy(reinterpret_cast<char*>(sp) + 4, &fpucw, 2);
  sp[1] = sp[2] = sp[3] = sp[4] = 0;
  sp[5] = reinterpret_cast<uint64_t>(&w);
  sp[6] = 0;
  sp[7] = reinterpret_cast<uint64_t>(&fusecc_cpu_fiber_start);
  f.sp = sp;
#endif
}

FUSECC_CPU_HARNESS inline void release(Worker& w, int from, int to, int waiting) {
  for (int t = from; t < to; ++t)
    if (w.fibers[t].state == waiting) w.fibers[t].state = RUNNABLE;
}

FUSECC_CPU_HARNESS inline void describe_block(char* out, size_t size) {
  snprintf(out, size, "block (%u,%u,%u) (blockDim (%u,%u,%u))", blockIdx.x, blockIdx.y, blockIdx.z,
           blockDim.x, blockDim.y, blockDim.z);
}

}  // namespace fusecc_cpu

#ifdef FUSECC_CPU_SANITIZE
#include "cuda_cpu_sanitizer.h"
#endif

namespace fusecc_cpu {

// Runs every thread of the current block to completion; false (with
// w.error set) on a deadlock or a trap. Threads run in ascending order (w.reverse:
// descending) between barriers: a kernel that is right does not depend on it.
FUSECC_CPU_HARNESS inline bool run_block(Worker& w, int n) {
  if (!ensure_stacks(w, size_t(n))) return false;
  const unsigned bx = blockDim.x, by = blockDim.y;
  for (int t = 0; t < n; ++t) {
    Fiber& f = w.fibers[t];
    f.tid = {t % bx, (t / bx) % by, t / (bx * by)};
    f.state = RUNNABLE;
    f.warp_generation = 0;
    start(w, f, size_t(t));
  }
  w.live = n;
  w.barrier_arrived = 0;
  ++w.block_serial;
  w.interval = 0;
#ifdef FUSECC_CPU_SANITIZE
  san::block_begin(w);
#endif
  for (int i = 0; i < (n + kWarp - 1) / kWarp; ++i) {
    w.warp_live[i] = n - i * kWarp < kWarp ? n - i * kWarp : kWarp;
    w.warp_arrived[i] = 0;
  }
  while (w.live > 0) {
    bool ran = false;
    for (int k = 0; k < n; ++k) {
      const int t = w.reverse ? n - 1 - k : k;
      Fiber& f = w.fibers[t];
      if (f.state != RUNNABLE) continue;
      ran = true;
      resume(w, f);
      const int warp = t / kWarp;
      if (f.state == ABORTED) {
        w.current = nullptr;  // back in the scheduler: no thread runs
        return false;
      }
      if (f.state == DONE) {
        --w.live;
        --w.warp_live[warp];
      }
      if (w.warp_arrived[warp] > 0 && w.warp_arrived[warp] == w.warp_live[warp]) {
        w.warp_arrived[warp] = 0;
        release(w, warp * kWarp, warp * kWarp + kWarp < n ? warp * kWarp + kWarp : n, AT_WARP);
      }
      if (w.barrier_arrived > 0 && w.barrier_arrived == w.live) {
#ifdef FUSECC_CPU_SANITIZE
        san::barrier_complete(w, n);
#endif
        w.barrier_arrived = 0;
        ++w.interval;
        release(w, 0, n, AT_BARRIER);
      }
    }
    if (!ran) {
      int at_warp = 0;
      for (int i = 0; i < n; ++i) at_warp += w.fibers[i].state == AT_WARP;
      char where[160];
      describe_block(where, sizeof where);
      snprintf(w.error, sizeof w.error,
               "deadlock in %s: %d thread(s) wait at __syncthreads(), %d at a warp operation, %d exited "
               "(a barrier or warp operation that not every live thread reaches)",
               where, w.barrier_arrived, at_warp, n - w.live);
      w.current = nullptr;
      return false;
    }
  }
  w.current = nullptr;
#ifdef FUSECC_CPU_SANITIZE
  san::block_end(w, n);
#endif
  return true;
}

FUSECC_CPU_HARNESS inline void block_barrier(void* site = nullptr) {
  Worker& w = worker();
  Fiber& f = *w.current;
  f.state = AT_BARRIER;
  f.barrier_site = site;
  ++w.barrier_arrived;
  suspend(w, f);
}

FUSECC_CPU_HARNESS inline int lane_id() {
  Worker& w = worker();
  return int(w.current - w.fibers) % kWarp;
}

// Publishes `bits` for this lane, waits for every live lane of the warp, and
// returns the warp's row of published values.
FUSECC_CPU_HARNESS inline const uint64_t* warp_exchange(uint64_t bits) {
  Worker& w = worker();
  Fiber& f = *w.current;
  const int t = int(&f - w.fibers);
  uint64_t* row = w.exchange[t / kWarp][f.warp_generation++ & 1];
  row[t % kWarp] = bits;
  f.state = AT_WARP;
  ++w.warp_arrived[t / kWarp];
  suspend(w, f);
  return row;
}

template <class T>
FUSECC_CPU_HARNESS inline T shuffle(T value, int source_lane, unsigned mask = 0xffffffffu, void* site = nullptr) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move values of at most 8 bytes");
#ifdef FUSECC_CPU_SANITIZE
  san::check_warp_operation(mask, site);
#else
  (void)mask;
  (void)site;
#endif
  uint64_t bits = 0;
  memcpy(&bits, &value, sizeof(T));
  asm volatile("" ::: "memory");
  const uint64_t* row = warp_exchange(bits);
  asm volatile("" ::: "memory");
  T out;
  memcpy(&out, &row[source_lane], sizeof(T));
  return out;
}

FUSECC_CPU_HARNESS inline void trap(const char* what) {
  Worker& w = worker();
  char where[160];
  describe_block(where, sizeof where);
  snprintf(w.error, sizeof w.error, "%s in %s, thread (%u,%u,%u)", what, where, threadIdx.x, threadIdx.y, threadIdx.z);
  w.current->state = ABORTED;
  suspend(w, *w.current);
  __builtin_unreachable();
}

}  // namespace fusecc_cpu

extern "C" FUSECC_CPU_HARNESS void fusecc_cpu_fiber_main(fusecc_cpu::Worker* w) {
  w->body(w->body_arg);
  w->current->state = fusecc_cpu::DONE;
  fusecc_cpu::suspend(*w, *w->current);
  __builtin_unreachable();
}

// --------------------------------------------------------------------------- synchronisation

// The empty asm statements with a "memory" clobber stop the compiler from
// keeping shared-memory values in registers across the switch (it may assume
// an opaque call cannot touch a static whose address never escapes).
FUSECC_CPU_HARNESS inline void __syncthreads() {
  asm volatile("" ::: "memory");
  fusecc_cpu::block_barrier(__builtin_return_address(0));
  asm volatile("" ::: "memory");
}

FUSECC_CPU_HARNESS inline void __syncwarp(unsigned = 0xffffffffu) {
  asm volatile("" ::: "memory");
  fusecc_cpu::warp_exchange(0);
  asm volatile("" ::: "memory");
}

inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
[[noreturn]] inline void __trap() { fusecc_cpu::trap("__trap()"); }

// Shuffles: the mask is not checked; every live lane of the warp must take part.
template <class T>
FUSECC_CPU_HARNESS inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize) {
  const int lane = fusecc_cpu::lane_id();
  return fusecc_cpu::shuffle(var, (lane & ~(width - 1)) | (src_lane & (width - 1)), mask, __builtin_return_address(0));
}

template <class T>
FUSECC_CPU_HARNESS inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  const int lane = fusecc_cpu::lane_id();
  return fusecc_cpu::shuffle(var, (lane & (width - 1)) >= int(delta) ? lane - int(delta) : lane, mask, __builtin_return_address(0));
}

template <class T>
FUSECC_CPU_HARNESS inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  const int lane = fusecc_cpu::lane_id();
  return fusecc_cpu::shuffle(var, (lane & (width - 1)) + int(delta) < width ? lane + int(delta) : lane, mask, __builtin_return_address(0));
}

template <class T>
FUSECC_CPU_HARNESS inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
  const int lane = fusecc_cpu::lane_id();
  const int source = lane ^ lane_mask;
  return fusecc_cpu::shuffle(var, source < (lane & ~(width - 1)) + width ? source : lane, mask, __builtin_return_address(0));
}

// --------------------------------------------------------------------------- atomics (relaxed, like CUDA's)

template <class T>
FUSECC_CPU_HARNESS inline T atomicAdd(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_add(value, std::memory_order_relaxed);
}
template <class T>
FUSECC_CPU_HARNESS inline T atomicSub(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_sub(value, std::memory_order_relaxed);
}
template <class T>
FUSECC_CPU_HARNESS inline T atomicExch(T* address, T value) {
  return std::atomic_ref<T>(*address).exchange(value, std::memory_order_relaxed);
}
template <class T>
FUSECC_CPU_HARNESS inline T atomicCAS(T* address, T compare, T value) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, value, std::memory_order_relaxed);
  return compare;
}
template <class T>
FUSECC_CPU_HARNESS inline T atomicMax(T* address, T value) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load(std::memory_order_relaxed);
  while (old < value && !ref.compare_exchange_weak(old, value, std::memory_order_relaxed)) {
  }
  return old;
}
template <class T>
FUSECC_CPU_HARNESS inline T atomicMin(T* address, T value) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load(std::memory_order_relaxed);
  while (value < old && !ref.compare_exchange_weak(old, value, std::memory_order_relaxed)) {
  }
  return old;
}

// --------------------------------------------------------------------------- math

inline int __float_as_int(float x) { int r; memcpy(&r, &x, 4); return r; }
inline unsigned __float_as_uint(float x) { unsigned r; memcpy(&r, &x, 4); return r; }
inline float __int_as_float(int x) { float r; memcpy(&r, &x, 4); return r; }
inline float __uint_as_float(unsigned x) { float r; memcpy(&r, &x, 4); return r; }
inline long long __double_as_longlong(double x) { long long r; memcpy(&r, &x, 8); return r; }
inline double __longlong_as_double(long long x) { double r; memcpy(&r, &x, 8); return r; }

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return exp10f(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __tanhf(float x) { return tanhf(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
template <class T>
inline T __ldg(const T* p) { return *p; }

// CUDA's global min/max overloads (mixed argument types are ambiguous here: keep them equal).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

// --------------------------------------------------------------------------- f16 / bf16 storage types

namespace fusecc_cpu {
inline unsigned short float_to_half_bits(float x) {
  _Float16 h = static_cast<_Float16>(x);  // round to nearest even
  unsigned short bits;
  memcpy(&bits, &h, 2);
  return bits;
}
inline float half_bits_to_float(unsigned short bits) {
  _Float16 h;
  memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}
inline unsigned short float_to_bf16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<unsigned short>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<unsigned short>(u >> 16);
}
inline float bf16_bits_to_float(unsigned short bits) {
  uint32_t u = uint32_t(bits) << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}
}  // namespace fusecc_cpu

struct __align__(2) __half {
  unsigned short __x;
  constexpr __half() : __x(0) {}  // constant-initialised: a static thread_local array (CPU __shared__) needs no TLS guard
  __half(float x) : __x(fusecc_cpu::float_to_half_bits(x)) {}
  operator float() const { return fusecc_cpu::half_bits_to_float(__x); }
};
struct __align__(2) __nv_bfloat16 {
  unsigned short __x;
  constexpr __nv_bfloat16() : __x(0) {}  // constant-initialised: a static thread_local array (CPU __shared__) needs no TLS guard
  __nv_bfloat16(float x) : __x(fusecc_cpu::float_to_bf16_bits(x)) {}
  operator float() const { return fusecc_cpu::bf16_bits_to_float(__x); }
};
typedef __half half;
typedef __nv_bfloat16 nv_bfloat16;

inline __half __float2half(float x) { return __half(x); }
inline __half __float2half_rn(float x) { return __half(x); }
inline float __half2float(__half x) { return float(x); }
inline unsigned short __half_as_ushort(__half x) { return x.__x; }
inline __half __ushort_as_half(unsigned short bits) { __half h; h.__x = bits; return h; }
inline __nv_bfloat16 __float2bfloat16(float x) { return __nv_bfloat16(x); }
inline __nv_bfloat16 __float2bfloat16_rn(float x) { return __nv_bfloat16(x); }
inline float __bfloat162float(__nv_bfloat16 x) { return float(x); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 x) { return x.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short bits) { __nv_bfloat16 h; h.__x = bits; return h; }

// Tensor cores: mma.sync, emulated with the PTX fragment tables.
#include "cuda_cpu_mma.h"

// Vector loads and cp.async, emulated per thread (the prelude's helpers on the GPU).
#include "cuda_cpu_vector.h"

// --------------------------------------------------------------------------- launching

namespace fusecc_cpu {

// Mirrored by ctypes in loader.py: keep the two in step.
struct LaunchParams {
  uint32_t grid[3];
  uint32_t block[3];
  uint64_t shared_bytes;
  void** args;           // args[i] points at the value of parameter i, as cuLaunchKernel takes them
  int64_t* next_block;   // shared by the worker threads of one launch
  int32_t* failed;       // set once; the first failing worker writes `error`
  char* error;
  uint64_t error_capacity;
  int32_t reverse;       // run each block's threads in descending order
  int32_t region_count;  // sanitized builds: the launch's buffers (and memory to ignore)
  const void* regions;   // san::Region[region_count]
  void* report;          // san::Report
  void* counters;        // san::Counters, or null
  int64_t block_limit;   // run only the first blocks (counters need no results); 0: all
};

enum ParamKind : int32_t { OTHER, POINTER, SIGNED, UNSIGNED, FLOAT, F16, BF16, BOOL };

struct ParamInfo {
  int32_t kind, size, pointee_kind, pointee_size;
};

template <class T>
constexpr int32_t kind_of() {
  if constexpr (std::is_same_v<T, bool>) return BOOL;
  else if constexpr (std::is_same_v<T, __half>) return F16;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return BF16;
  else if constexpr (std::is_floating_point_v<T>) return FLOAT;
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) return SIGNED;
  else if constexpr (std::is_integral_v<T>) return UNSIGNED;
  else if constexpr (std::is_pointer_v<T>) return POINTER;
  else return OTHER;
}

template <class P>
void describe(ParamInfo& info) {
  using T = std::remove_cv_t<std::remove_reference_t<P>>;
  info.kind = kind_of<T>();
  info.size = int32_t(sizeof(T));
  info.pointee_kind = OTHER;
  info.pointee_size = 0;
  if constexpr (std::is_pointer_v<T>) {
    using E = std::remove_cv_t<std::remove_pointer_t<T>>;
    if constexpr (!std::is_void_v<E>) {
      info.pointee_kind = kind_of<E>();
      info.pointee_size = int32_t(sizeof(E));
    }
  }
}

template <class... Args>
int signature(void (*)(Args...), ParamInfo* out, int capacity) {
  int i = 0;
  ((i < capacity ? describe<Args>(out[i]) : void(), ++i), ...);
  return int(sizeof...(Args));
}

FUSECC_CPU_HARNESS inline void fail(const LaunchParams* p, const char* message) {
  int32_t expected = 0;
  if (__atomic_compare_exchange_n(p->failed, &expected, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    snprintf(p->error, p->error_capacity, "%s", message);
}

template <class... Args, size_t... I>
FUSECC_CPU_HARNESS int run(void (*kernel)(Args...), const LaunchParams* p, std::index_sequence<I...>) {
  using Values = std::tuple<std::remove_cv_t<std::remove_reference_t<Args>>...>;
  Values values(*static_cast<std::remove_cv_t<std::remove_reference_t<Args>>*>(p->args[I])...);
  struct Call {
    void (*kernel)(Args...);
    Values* values;
  } call{kernel, &values};

  Worker& w = worker();
  struct ReleaseStacks {
    Worker& w;
    ~ReleaseStacks() { release_stacks(w); }
  } release{w};
  w.body = [](void* arg) {
    auto* c = static_cast<Call*>(arg);
    std::apply(c->kernel, *c->values);
  };
  w.body_arg = &call;
  gridDim = dim3(p->grid[0], p->grid[1], p->grid[2]);
  blockDim = dim3(p->block[0], p->block[1], p->block[2]);
  const int threads = int(p->block[0] * p->block[1] * p->block[2]);
  w.reverse = p->reverse != 0;
  if (p->shared_bytes > w.dynamic_shared_capacity) {
    free(w.dynamic_shared);
    // + 64 bytes: a sanitized run reports accesses past shared_bytes, which then land in memory of its own
    w.dynamic_shared = static_cast<unsigned char*>(aligned_alloc(64, (p->shared_bytes + 127) / 64 * 64));
    w.dynamic_shared_capacity = w.dynamic_shared ? p->shared_bytes : 0;
    if (!w.dynamic_shared) {
      fail(p, "could not allocate the dynamic shared memory");
      return 1;
    }
  }
  const int64_t grid_blocks = int64_t(p->grid[0]) * p->grid[1] * p->grid[2];
  const int64_t total = p->block_limit > 0 && p->block_limit < grid_blocks ? p->block_limit : grid_blocks;
#ifdef FUSECC_CPU_SANITIZE
  san::begin_launch(w, p->shared_bytes, p->region_count, p->regions, p->report, p->counters);
#endif
  for (;;) {
    if (__atomic_load_n(p->failed, __ATOMIC_RELAXED)) return 1;
    const int64_t b = __atomic_fetch_add(p->next_block, 1, __ATOMIC_RELAXED);
    if (b >= total) return 0;
    blockIdx = {unsigned(b % p->grid[0]), unsigned(b / p->grid[0] % p->grid[1]),
                unsigned(b / (int64_t(p->grid[0]) * p->grid[1]))};
    if (!run_block(w, threads)) {
      fail(p, w.error);
      return 1;
    }
  }
}

template <class... Args>
int run(void (*kernel)(Args...), const LaunchParams* p) {
  return run(kernel, p, std::index_sequence_for<Args...>{});
}

}  // namespace fusecc_cpu

// The loader appends one of these per kernel found in the source.
#define FUSECC_CPU_EXPORT(name)                                                                             \
  extern "C" __attribute__((visibility("default"))) int fusecc_launch_##name(                                \
      const fusecc_cpu::LaunchParams* p) {                                                                  \
    return fusecc_cpu::run(name, p);                                                                        \
  }                                                                                                         \
  extern "C" __attribute__((visibility("default"))) int fusecc_signature_##name(fusecc_cpu::ParamInfo* out, \
                                                                                int capacity) {             \
    return fusecc_cpu::signature(name, out, capacity);                                                      \
  }

#endif  // FUSECC_CUDA_CPU_H
