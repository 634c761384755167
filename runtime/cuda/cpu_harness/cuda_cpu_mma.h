// cuda_cpu_mma.h: the warp-level mma.sync of generated CUDA C, emulated on
// the CPU (included by cuda_cpu.h). The prelude of a kernels.cu that uses
// tensor cores (passes/backends/cuda/mma.py) packs each lane's fragments into
// registers exactly as its inline PTX does (cvt.rn.f16x2.f32,
// cvt.rn.bf16x2.f32, cvt.rna.tf32.f32) and, under the harness, hands the
// registers to fusecc_cpu::mma::sync instead of `mma.sync.aligned...`.
//
// sync() gathers the warp's registers through three warp exchanges (A: two
// 64-bit halves of four .b32, B: two .b32), places every element by the PTX
// ISA's fragment tables (9.7.14.5, the same tables as dialects/nvgpu.py), and
// gives this lane its four D values: D = C + sum over k in order of A·B, each
// product exact in f32 (f16, bf16 and tf32 significands are at most 11 bits)
// and each sum rounded to f32 (docs/cuda-tensor-cores.md: how the hardware's
// summation differs). A full warp must take part; a sanitized run reports an
// mma in a partial warp like a full-mask shuffle in one.

#ifndef FUSECC_CUDA_CPU_MMA_H
#define FUSECC_CUDA_CPU_MMA_H

namespace fusecc_cpu {
namespace mma {

enum Kind : int { F16 = 0, BF16 = 1, TF32 = 2 };

// --- the register formats (what the prelude's packing instructions give)

FUSECC_CPU_HARNESS inline uint32_t pack_f16x2(float lo, float hi) {  // cvt.rn.f16x2.f32 d, hi, lo
  return uint32_t(float_to_half_bits(lo)) | (uint32_t(float_to_half_bits(hi)) << 16);
}

FUSECC_CPU_HARNESS inline uint32_t pack_bf16x2(float lo, float hi) {  // cvt.rn.bf16x2.f32 d, hi, lo
  return uint32_t(float_to_bf16_bits(lo)) | (uint32_t(float_to_bf16_bits(hi)) << 16);
}

// cvt.rna.tf32.f32: 10 mantissa bits, round to nearest, ties away from zero
// (add half of the 13 dropped bits' range to the magnitude, truncate).
FUSECC_CPU_HARNESS inline uint32_t to_tf32(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return u;  // NaN stays NaN
  return (u + 0x1000u) & 0xffffe000u;
}

FUSECC_CPU_HARNESS inline float element(Kind kind, const uint32_t* registers, int i) {
  if (kind == TF32) {
    float x;
    memcpy(&x, &registers[i], 4);
    return x;
  }
  const unsigned short half = static_cast<unsigned short>(registers[i >> 1] >> (16 * (i & 1)));  // element 2j low, 2j+1 high
  return kind == F16 ? half_bits_to_float(half) : bf16_bits_to_float(half);
}

// --- the fragment tables: (lane, i) -> (row, col)

struct Shape {
  int m, n, k, a_count, b_count;
};

FUSECC_CPU_HARNESS inline Shape shape(Kind kind) {
  return kind == TF32 ? Shape{16, 8, 8, 4, 2} : Shape{16, 8, 16, 8, 4};
}

FUSECC_CPU_HARNESS inline void a_at(Kind kind, int lane, int i, int& row, int& col) {
  const int g = lane >> 2, t = lane & 3;
  if (kind == TF32) {
    row = g + 8 * (i & 1);
    col = t + 4 * (i >= 2);
  } else {
    row = g + 8 * ((i >> 1) & 1);
    col = 2 * t + (i & 1) + 8 * (i >= 4);
  }
}

FUSECC_CPU_HARNESS inline void b_at(Kind kind, int lane, int i, int& row, int& col) {
  const int g = lane >> 2, t = lane & 3;
  row = kind == TF32 ? t + 4 * i : 2 * t + (i & 1) + 8 * (i >= 2);
  col = g;
}

FUSECC_CPU_HARNESS inline void c_at(int lane, int i, int& row, int& col) {
  const int g = lane >> 2, t = lane & 3;
  row = g + 8 * (i >= 2);
  col = 2 * t + (i & 1);
}

// --- the instruction

FUSECC_CPU_HARNESS inline void gather(uint64_t bits, uint64_t out[kWarp]) {
  asm volatile("" ::: "memory");
  const uint64_t* row = warp_exchange(bits);
  memcpy(out, row, sizeof(uint64_t) * kWarp);  // before the next exchange can reuse the row
  asm volatile("" ::: "memory");
}

FUSECC_CPU_HARNESS inline void sync(Kind kind, const uint32_t a[4], const uint32_t b[2], const float c[4], float d[4], void* site) {
#ifdef FUSECC_CPU_SANITIZE
  san::check_warp_operation(0xffffffffu, site);
#else
  (void)site;
#endif
  uint64_t a_low[kWarp], a_high[kWarp], b_all[kWarp];
  gather(uint64_t(a[0]) | (uint64_t(a[1]) << 32), a_low);
  gather(uint64_t(a[2]) | (uint64_t(a[3]) << 32), a_high);
  gather(uint64_t(b[0]) | (uint64_t(b[1]) << 32), b_all);
  const Shape s = shape(kind);
  float A[16][16] = {}, B[16][8] = {};
  for (int lane = 0; lane < kWarp; ++lane) {
    const uint32_t ar[4] = {uint32_t(a_low[lane]), uint32_t(a_low[lane] >> 32), uint32_t(a_high[lane]), uint32_t(a_high[lane] >> 32)};
    const uint32_t br[2] = {uint32_t(b_all[lane]), uint32_t(b_all[lane] >> 32)};
    int row, col;
    for (int i = 0; i < s.a_count; ++i) {
      a_at(kind, lane, i, row, col);
      A[row][col] = element(kind, ar, i);
    }
    for (int i = 0; i < s.b_count; ++i) {
      b_at(kind, lane, i, row, col);
      B[row][col] = element(kind, br, i);
    }
  }
  const int lane = lane_id();
  for (int i = 0; i < 4; ++i) {
    int row, col;
    c_at(lane, i, row, col);
    float acc = c[i];
    for (int kk = 0; kk < s.k; ++kk) {
      const float product = A[row][kk] * B[kk][col];  // exact: at most 22 significant bits
      acc = acc + product;
    }
    d[i] = acc;
  }
}

}  // namespace mma
}  // namespace fusecc_cpu

#endif  // FUSECC_CUDA_CPU_MMA_H
