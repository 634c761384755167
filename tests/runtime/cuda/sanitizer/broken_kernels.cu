// Positive controls for the harness's sanitizer: each kernel but `correct`
// has one deliberate bug, named by the comment on the line it must be
// reported at (test_sanitizer.py finds the lines by these markers).

// Reverses a block's slice through shared memory; the barrier between the
// store and the load is missing.
extern "C" __global__ void missing_barrier(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float tile[64];
  const int t = threadIdx.x, base = blockIdx.x * 64;
  tile[t] = x[base + t];
  y[base + t] = tile[63 - t];  // BUG: missing_barrier
}

// Thread 0 loads a value every thread then uses, with no barrier between.
extern "C" __global__ void broadcast_race(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float value[1];
  if (threadIdx.x == 0) value[0] = x[blockIdx.x];
  y[blockIdx.x * blockDim.x + threadIdx.x] = value[0] * 2.0f;  // BUG: broadcast_race
}

// A shifted copy that reads one element past the end of x.
extern "C" __global__ void out_of_bounds_read(const float* __restrict__ x, float* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i + 1];  // BUG: out_of_bounds_read
}

// An accumulator in shared memory that nobody zeroed.
extern "C" __global__ void uninitialised_shared(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float sums[32];
  const int t = threadIdx.x;
  sums[t] += x[blockIdx.x * 32 + t];  // BUG: uninitialised_shared
  y[blockIdx.x * 32 + t] = sums[t];
}

// A full-mask shuffle in a block of 16 threads: lanes 16..31 do not exist.
extern "C" __global__ void partial_warp_shuffle(const float* __restrict__ x, float* __restrict__ y) {
  const float v = x[threadIdx.x];
  y[threadIdx.x] = __shfl_xor_sync(0xffffffffu, v, 1);  // BUG: partial_warp_shuffle
}

// Half the block waits at one barrier, half at another.
extern "C" __global__ void divergent_barrier(float* __restrict__ y) {
  if (threadIdx.x < 16) {
    y[threadIdx.x] = 1.0f;
    __syncthreads();  // BUG: divergent_barrier
  } else {
    __syncthreads();
    y[threadIdx.x] = 2.0f;
  }
}

// Threads past 16 leave before the barrier the others wait at.
extern "C" __global__ void barrier_after_exit(float* __restrict__ y) {
  if (threadIdx.x >= 16) return;
  __syncthreads();  // BUG: barrier_after_exit
  y[threadIdx.x] = 1.0f;
}

// Writes one element past a static shared array.
extern "C" __global__ void shared_out_of_bounds(float* __restrict__ y) {
  __shared__ float tile[32];
  tile[threadIdx.x + 1] = 1.0f;  // BUG: shared_out_of_bounds
  __syncthreads();
  y[threadIdx.x] = threadIdx.x > 0 ? tile[threadIdx.x] : 0.0f;
}

// Negative control: missing_barrier with its barrier.
extern "C" __global__ void correct(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float tile[64];
  const int t = threadIdx.x, base = blockIdx.x * 64;
  tile[t] = x[base + t];
  __syncthreads();
  y[base + t] = tile[63 - t];
}
