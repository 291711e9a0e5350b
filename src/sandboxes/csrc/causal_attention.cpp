// The kernel of narrow_attention.h on every sequence of a batch, in PyTorch's threads, as a PyTorch extension:
// forward returns the output with each query's maximum (base 2) and inverse sum, which backward reads.
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <vector>

#include "narrow_attention.h"

namespace {

using narrow::MAX_HEAD;
using narrow::padded;

template <int D>
void forward_all(const float* q, const float* k, const float* v, int64_t N, int64_t T, float* out, float* top,
                 float* inverse) {
  const int64_t Tp = padded(T);
  at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> buffer(2 * D * Tp + Tp);
    float *kT = buffer.data(), *vT = kT + D * Tp, *s = vT + D * Tp;
    for (int64_t n = begin; n < end; ++n)
      narrow::forward_sequence<D>(q + n * T * D, k + n * T * D, v + n * T * D, T, out + n * T * D, top + n * T,
                          inverse + n * T, kT, vT, s);
  });
}

template <int D>
void backward_all(const float* g, const float* q, const float* k, const float* v, const float* o, const float* top,
                  const float* inverse, int64_t N, int64_t T, float* dq, float* dk, float* dv) {
  const int64_t Tp = padded(T);
  at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> buffer(4 * D * Tp);
    float *kT = buffer.data(), *vT = kT + D * Tp, *dkT = vT + D * Tp, *dvT = dkT + D * Tp;
    for (int64_t n = begin; n < end; ++n) {
      const int64_t at = n * T * D;
      narrow::backward_sequence<D>(g + at, q + at, k + at, v + at, o + at, top + n * T, inverse + n * T, T, dq + at, dk + at,
                           dv + at, kT, vT, dkT, dvT);
    }
  });
}

void check(std::initializer_list<const torch::Tensor*> tensors) {
  const auto& first = **tensors.begin();
  TORCH_CHECK(first.dim() == 3 && first.size(2) >= 1 && first.size(2) <= MAX_HEAD,
              "(N, T, d) inputs with 1 <= d <= 16");
  for (const auto* t : tensors)
    TORCH_CHECK(t->device().is_cpu() && t->dtype() == torch::kFloat32 && t->is_contiguous() &&
                    t->sizes() == first.sizes(),
                "contiguous float32 CPU tensors of one shape");
}

#define HEAD_CASES(CALL) \
  switch (q.size(2)) {   \
    case 1: CALL(1); break; case 2: CALL(2); break; case 3: CALL(3); break; case 4: CALL(4); break;       \
    case 5: CALL(5); break; case 6: CALL(6); break; case 7: CALL(7); break; case 8: CALL(8); break;       \
    case 9: CALL(9); break; case 10: CALL(10); break; case 11: CALL(11); break; case 12: CALL(12); break; \
    case 13: CALL(13); break; case 14: CALL(14); break; case 15: CALL(15); break; default: CALL(16);     \
  }

}  // namespace

std::vector<torch::Tensor> forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  check({&q, &k, &v});
  const int64_t N = q.size(0), T = q.size(1);
  auto out = torch::empty_like(q);
  auto top = torch::empty({N, T}, q.options()), inverse = torch::empty({N, T}, q.options());
#define FORWARD(D)                                                                                              \
  forward_all<D>(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), N, T, out.data_ptr<float>(), \
                 top.data_ptr<float>(), inverse.data_ptr<float>())
  HEAD_CASES(FORWARD)
#undef FORWARD
  return {out, top, inverse};
}

std::vector<torch::Tensor> backward(const torch::Tensor& grad, const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v, const torch::Tensor& out, const torch::Tensor& top,
                                    const torch::Tensor& inverse) {
  check({&q, &k, &v, &grad, &out});
  const int64_t N = q.size(0), T = q.size(1);
  TORCH_CHECK(top.is_contiguous() && inverse.is_contiguous() && top.numel() == N * T && inverse.numel() == N * T,
              "a maximum and an inverse sum per query");
  auto dq = torch::empty_like(q), dk = torch::empty_like(k), dv = torch::empty_like(v);
#define BACKWARD(D)                                                                                                 \
  backward_all<D>(grad.data_ptr<float>(), q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(),          \
                  out.data_ptr<float>(), top.data_ptr<float>(), inverse.data_ptr<float>(), N, T, dq.data_ptr<float>(), \
                  dk.data_ptr<float>(), dv.data_ptr<float>())
  HEAD_CASES(BACKWARD)
#undef BACKWARD
  return {dq, dk, dv};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "causal attention of narrow heads: output, row maxima (base 2), inverse row sums");
  m.def("backward", &backward, "gradients of the causal attention with respect to queries, keys and values");
}
