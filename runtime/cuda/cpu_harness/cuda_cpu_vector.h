// cuda_cpu_vector.h: the CPU harness's side of the prelude's vector loads and
// cp.async helpers (passes/backends/cuda/vector_memory.py writes the calls;
// on the GPU the same calls are the prelude's inline PTX).
//
// fusecc_load_vector<V>(p), fusecc_store_vector<V>(p, v): one aligned V
// (float2/float4) at p. A misaligned address, which faults on a GPU, traps here.
//
// cp.async is emulated per thread with the semantics of PTX's groups:
//   fusecc_cp_async<BYTES>(dst, src, valid)  reads the source now (nothing
//       when !valid: zero fill), queues the copy, and poisons the
//       destination (all bits set: a NaN) so that a read before the wait
//       sees garbage, as it may on a GPU;
//   fusecc_cp_async_commit()  closes the thread's open copies into a group;
//   fusecc_cp_async_wait<N>()  lands every group but the N newest.
// Sanitized builds report the accesses where the program makes them: the
// global read and a shared write at the copy, and the shared write again at
// the wait that lands it (so a read by another thread in the wait's barrier
// interval is a race, and one in the copy's interval too).

#ifndef FUSECC_CUDA_CPU_VECTOR_H
#define FUSECC_CUDA_CPU_VECTOR_H

namespace fusecc_cpu {
namespace async_copy {

constexpr int kMaxCopies = 2048;  // in flight per thread (a 1-warp attention block stages 2 x 64 keys x (D + Dv) / 32 words each)
constexpr int kMaxGroups = 32;

struct Copy {
  unsigned char* dst;
  unsigned char data[16];
  uint32_t bytes;
  void* pc;
};

struct Queue {  // plain data (calloc'd: no instrumented constructor runs)
  uint32_t block;  // Worker::block_serial of the block these copies belong to
  int count, groups;
  int group_end[kMaxGroups];
  Copy copies[kMaxCopies];
};

// One queue per thread slot of this OS thread's worker, made on first use.
FUSECC_CPU_HARNESS inline Queue& queue() {
  static thread_local Queue* queues = nullptr;
  Worker& w = worker();
  if (!queues) queues = static_cast<Queue*>(calloc(kMaxThreads, sizeof(Queue)));  // lives as long as the OS thread
  Queue& q = queues[w.current - w.fibers];
  if (q.block != w.block_serial) q.block = w.block_serial, q.count = 0, q.groups = 0;  // a new block starts empty
  return q;
}

FUSECC_CPU_HARNESS inline void land(Queue& q, int end, void* wait_pc) {
  for (int i = 0; i < end; ++i) {
    Copy& c = q.copies[i];
#ifdef FUSECC_CPU_SANITIZE
    san::check_access(c.dst, int(c.bytes), true, wait_pc, false);  // counted at the issue
#else
    (void)wait_pc;
#endif
    memcpy(c.dst, c.data, c.bytes);
  }
  memmove(q.copies, q.copies + end, sizeof(Copy) * size_t(q.count - end));
  q.count -= end;
}

}  // namespace async_copy
}  // namespace fusecc_cpu

template <class V, class T>
FUSECC_CPU_HARNESS inline V fusecc_load_vector(const T* p) {
  static_assert(sizeof(V) % sizeof(T) == 0, "a vector of whole elements");
  if (reinterpret_cast<uintptr_t>(p) % sizeof(V)) fusecc_cpu::trap("misaligned vector load");
#ifdef FUSECC_CPU_SANITIZE
  fusecc_cpu::san::check_access(const_cast<T*>(p), int(sizeof(V)), false, __builtin_return_address(0));
#endif
  V v;
  memcpy(&v, p, sizeof(V));
  return v;
}

template <class V, class T>
FUSECC_CPU_HARNESS inline void fusecc_store_vector(T* p, V v) {
  static_assert(sizeof(V) % sizeof(T) == 0, "a vector of whole elements");
  if (reinterpret_cast<uintptr_t>(p) % sizeof(V)) fusecc_cpu::trap("misaligned vector store");
#ifdef FUSECC_CPU_SANITIZE
  fusecc_cpu::san::check_access(p, int(sizeof(V)), true, __builtin_return_address(0));
#endif
  memcpy(p, &v, sizeof(V));
}

template <int BYTES>
FUSECC_CPU_HARNESS inline void fusecc_cp_async(void* dst, const void* src, bool valid) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
  using namespace fusecc_cpu::async_copy;
  void* pc = __builtin_return_address(0);
  if (reinterpret_cast<uintptr_t>(dst) % BYTES || (valid && reinterpret_cast<uintptr_t>(src) % BYTES)) fusecc_cpu::trap("misaligned cp.async");
  Queue& q = queue();
  if (q.count == kMaxCopies) fusecc_cpu::trap("more cp.async copies in flight than the harness holds");
  Copy& c = q.copies[q.count++];
#ifdef FUSECC_CPU_SANITIZE
  if (valid) fusecc_cpu::san::check_access(const_cast<void*>(src), BYTES, false, pc);
  fusecc_cpu::san::check_access(dst, BYTES, true, pc);
#endif
  c.dst = static_cast<unsigned char*>(dst);
  c.bytes = BYTES;
  c.pc = pc;
  if (valid)
    memcpy(c.data, src, BYTES);
  else
    memset(c.data, 0, BYTES);
  memset(dst, 0xff, BYTES);  // in flight: not yet the data
}

FUSECC_CPU_HARNESS inline void fusecc_cp_async_commit() {
  using namespace fusecc_cpu::async_copy;
  Queue& q = queue();
  if (q.groups == kMaxGroups) fusecc_cpu::trap("more cp.async groups in flight than the harness holds");
  q.group_end[q.groups++] = q.count;
}

template <int N>
FUSECC_CPU_HARNESS inline void fusecc_cp_async_wait() {
  using namespace fusecc_cpu::async_copy;
  asm volatile("" ::: "memory");
  Queue& q = queue();
  const int done = q.groups - N;
  if (done > 0) {
    const int end = q.group_end[done - 1];
    fusecc_cpu::async_copy::land(q, end, __builtin_return_address(0));
    for (int g = done; g < q.groups; ++g) q.group_end[g - done] = q.group_end[g] - end;
    q.groups -= done;
  }
  asm volatile("" ::: "memory");
}

#endif  // FUSECC_CUDA_CPU_VECTOR_H
