// Causal softmax attention of one sequence with a narrow head (at most 16 dimensions), forward and backward, in plain
// C++ (no PyTorch): causal_attention.cpp runs it on every sequence of a batch, and a test builds it alone for several
// instruction sets and checks that every build computes the same numbers.
//
// The sequence is computed query by query, in one pass over its keys; the backward pass computes each query's weights
// again from its stored maximum and inverse sum rather than keeping them. Keys are taken in blocks of 16: lane l of a
// block holds the key at position j0 + l, sums over keys run lane by lane in the order of the blocks, and the 16 lanes
// are added by a fixed tree at the end. GCC's vector extension lowers the lanes to the CPU's own vectors (one part of
// 16 with AVX-512, two of 8 with AVX, four of 4 otherwise), and the build forbids fused multiply-adds
// (-ffp-contract=off): each lane does the same arithmetic on every x86 CPU, so a number is the same whatever the CPU's
// vectors, and a sequence's numbers do not depend on the others in its batch.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace narrow {

constexpr int LANES = 16;
#if defined(__AVX512F__)
constexpr int WIDTH = 16;
#elif defined(__AVX__)
constexpr int WIDTH = 8;
#else
constexpr int WIDTH = 4;
#endif
constexpr int PARTS = LANES / WIDTH;
constexpr int MAX_HEAD = 16;
constexpr float LOG2E = 1.4426950408889634f;
constexpr float NEG_INF = -std::numeric_limits<float>::infinity();

typedef float vec __attribute__((vector_size(WIDTH * 4)));
typedef float vec_unaligned __attribute__((vector_size(WIDTH * 4), aligned(4)));
typedef int32_t ivec __attribute__((vector_size(WIDTH * 4)));

struct Block {
  vec part[PARTS];
};

inline vec splat(float x) { return vec{} + x; }

inline Block load(const float* p) {
  Block b;
  for (int h = 0; h < PARTS; ++h) b.part[h] = *reinterpret_cast<const vec_unaligned*>(p + h * WIDTH);
  return b;
}

inline void store(float* p, const Block& b) {
  for (int h = 0; h < PARTS; ++h) *reinterpret_cast<vec_unaligned*>(p + h * WIDTH) = b.part[h];
}

// The block's lanes at key positions L and beyond (the future of query L - 1) set to `fill`.
inline Block masked(const Block& b, int64_t j0, int64_t L, float fill) {
  ivec position{};
  for (int l = 0; l < WIDTH; ++l) position[l] = l;
  Block out;
  for (int h = 0; h < PARTS; ++h) {
    const ivec at = position + static_cast<int32_t>(j0 + h * WIDTH);
    out.part[h] = at < static_cast<int32_t>(L) ? b.part[h] : splat(fill);
  }
  return out;
}

// 2^x for x <= 0 to within about one unit in the last place; x below -126 counts as -126 (a weight under 2^-126 of
// the row's largest). Rounds to nearest by the 1.5 * 2^23 shift, then a degree-7 Taylor polynomial on [-1/2, 1/2].
inline vec exp2_nonpositive(vec x) {
  x = x < -126.0f ? splat(-126.0f) : x;
  const vec shift = splat(12582912.0f);
  const vec r = (x + shift) - shift;
  const vec f = x - r;
  vec p = splat(1.525273380405984e-05f);
  p = p * f + 1.5403530393381606e-04f;
  p = p * f + 1.3333558146428443e-03f;
  p = p * f + 9.618129107628477e-03f;
  p = p * f + 5.550410866482158e-02f;
  p = p * f + 2.402265069591007e-01f;
  p = p * f + 6.931471805599453e-01f;
  p = p * f + 1.0f;
  const ivec bits = (__builtin_convertvector(r, ivec) + 127) << 23;
  return p * reinterpret_cast<const vec&>(bits);
}

// The sum of a block's lanes by a fixed tree (lane l with l + 8, then with l + 4, l + 2, l + 1): four dependent adds
// instead of fifteen, in the same order whatever the vectors.
inline float lane_total(const Block& b) {
  float x[LANES];
  for (int h = 0; h < PARTS; ++h)
    for (int l = 0; l < WIDTH; ++l) x[h * WIDTH + l] = b.part[h][l];
  for (int half = LANES / 2; half >= 1; half /= 2)
    for (int l = 0; l < half; ++l) x[l] += x[l + half];
  return x[0];
}

// Rows of the column buffers: T rounded up to whole blocks, plus one block, so that rows are never a multiple of 4 KiB
// apart (a store to one row then seems to alias the loads of the next and stalls them: the backward pass took 7 times
// as long).
inline int64_t padded(int64_t T) { return (T + LANES - 1) / LANES * LANES + LANES; }

// (T, D) rows as (D, Tp) columns, zeros after T, so that the loops over keys read whole blocks of contiguous memory.
template <int D>
void columns(const float* rows, int64_t T, int64_t Tp, float* out) {
  std::fill(out, out + D * Tp, 0.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int c = 0; c < D; ++c) out[c * Tp + t] = rows[t * D + c];
}

// Base-2 scores of the scaled query `qs` against the block of keys from j0 (lanes beyond the query's keys as they come).
template <int D>
inline Block block_scores(const float* qs, const float* kT, int64_t Tp, int64_t j0) {
  Block s = load(kT + j0);
  for (int h = 0; h < PARTS; ++h) s.part[h] = qs[0] * s.part[h];
  for (int c = 1; c < D; ++c) {
    const Block k = load(kT + c * Tp + j0);
    for (int h = 0; h < PARTS; ++h) s.part[h] += qs[c] * k.part[h];
  }
  return s;
}

template <int D>
void forward_sequence(const float* q, const float* k, const float* v, int64_t T, float* out, float* top,
                      float* inverse, float* kT, float* vT, float* s) {
  const int64_t Tp = padded(T);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))) * LOG2E;
  columns<D>(k, T, Tp, kT);
  columns<D>(v, T, Tp, vT);
  for (int64_t i = 0; i < T; ++i) {
    const int64_t L = i + 1;
    float qs[D];
    for (int c = 0; c < D; ++c) qs[c] = q[i * D + c] * scale;
    Block high;
    for (int h = 0; h < PARTS; ++h) high.part[h] = splat(NEG_INF);
    for (int64_t j0 = 0; j0 < L; j0 += LANES) {
      const Block b = masked(block_scores<D>(qs, kT, Tp, j0), j0, L, NEG_INF);
      store(s + j0, b);
      for (int h = 0; h < PARTS; ++h) high.part[h] = b.part[h] > high.part[h] ? b.part[h] : high.part[h];
    }
    float m = NEG_INF;
    for (int h = 0; h < PARTS; ++h)
      for (int l = 0; l < WIDTH; ++l) m = high.part[h][l] > m ? high.part[h][l] : m;
    Block total{}, acc[D]{};
    for (int64_t j0 = 0; j0 < L; j0 += LANES) {
      Block e = load(s + j0);
      for (int h = 0; h < PARTS; ++h) e.part[h] = exp2_nonpositive(e.part[h] - m);
      e = masked(e, j0, L, 0.0f);
      for (int h = 0; h < PARTS; ++h) total.part[h] += e.part[h];
      for (int c = 0; c < D; ++c) {
        const Block vc = load(vT + c * Tp + j0);
        for (int h = 0; h < PARTS; ++h) acc[c].part[h] += e.part[h] * vc.part[h];
      }
    }
    const float inv = 1.0f / lane_total(total);
    for (int c = 0; c < D; ++c) out[i * D + c] = lane_total(acc[c]) * inv;
    top[i] = m;
    inverse[i] = inv;
  }
}

template <int D>
void backward_sequence(const float* g, const float* q, const float* k, const float* v, const float* o,
                       const float* top, const float* inverse, int64_t T, float* dq, float* dk, float* dv, float* kT,
                       float* vT, float* dkT, float* dvT) {
  const int64_t Tp = padded(T);
  const float root = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))), scale = root * LOG2E;
  columns<D>(k, T, Tp, kT);
  columns<D>(v, T, Tp, vT);
  std::fill(dkT, dkT + D * Tp, 0.0f);
  std::fill(dvT, dvT + D * Tp, 0.0f);
  for (int64_t i = 0; i < T; ++i) {
    const int64_t L = i + 1;
    const float *gi = g + i * D, *qi = q + i * D, *oi = o + i * D;
    float qs[D], qr[D], delta = 0.0f;
    for (int c = 0; c < D; ++c) {
      qs[c] = qi[c] * scale;
      qr[c] = qi[c] * root;
      delta += gi[c] * oi[c];
    }
    const float m = top[i], inv = inverse[i];
    Block acc[D]{};
    for (int64_t j0 = 0; j0 < L; j0 += LANES) {
      Block p = block_scores<D>(qs, kT, Tp, j0);
      for (int h = 0; h < PARTS; ++h) p.part[h] = exp2_nonpositive(p.part[h] - m) * inv;
      p = masked(p, j0, L, 0.0f);
      Block ds = load(vT + j0);
      for (int h = 0; h < PARTS; ++h) ds.part[h] = gi[0] * ds.part[h];
      for (int c = 1; c < D; ++c) {
        const Block vc = load(vT + c * Tp + j0);
        for (int h = 0; h < PARTS; ++h) ds.part[h] += gi[c] * vc.part[h];
      }
      for (int h = 0; h < PARTS; ++h) ds.part[h] = p.part[h] * (ds.part[h] - delta);
      for (int c = 0; c < D; ++c) {
        Block dvc = load(dvT + c * Tp + j0), dkc = load(dkT + c * Tp + j0);
        const Block kc = load(kT + c * Tp + j0);
        for (int h = 0; h < PARTS; ++h) {
          dvc.part[h] += p.part[h] * gi[c];
          dkc.part[h] += ds.part[h] * qr[c];
          acc[c].part[h] += ds.part[h] * kc.part[h];
        }
        store(dvT + c * Tp + j0, dvc);
        store(dkT + c * Tp + j0, dkc);
      }
    }
    for (int c = 0; c < D; ++c) dq[i * D + c] = lane_total(acc[c]) * root;
  }
  for (int64_t t = 0; t < T; ++t)
    for (int c = 0; c < D; ++c) {
      dk[t * D + c] = dkT[c * Tp + t];
      dv[t * D + c] = dvT[c * Tp + t];
    }
}

}  // namespace narrow
