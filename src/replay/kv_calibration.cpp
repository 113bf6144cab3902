#include "rlparity/replay/kv_calibration.hpp"

#include <algorithm>
#include <cmath>

#include "rlparity/dist/job.hpp"
#include "rlparity/dist/pack.hpp"
#include "rlparity/model/forward.hpp"
#include "rlparity/model/weights.hpp"
#include "rlparity/numerics/formats.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {
namespace {

float amax(const EmulatedOps::Mat& m) {
  float a = 0.0f;
  for (Eigen::Index i = 0; i < m.size(); ++i) a = std::max(a, std::fabs(m.data()[i]));
  return a;
}

// Per forward call and layer: amax of q, k, v.
struct AmaxRecorder final : EmulatedOps::QkvObserver {
  std::vector<float> q, k, v;
  explicit AmaxRecorder(int layers) : q(static_cast<std::size_t>(layers)), k(q), v(q) {}
  void observe(int layer, const EmulatedOps::Mat& mq, const EmulatedOps::Mat& mk,
               const EmulatedOps::Mat& mv) override {
    const auto l = static_cast<std::size_t>(layer);
    q[l] = std::max(q[l], amax(mq));
    k[l] = std::max(k[l], amax(mk));
    v[l] = std::max(v[l], amax(mv));
  }
};

// 99.9th percentile by linear interpolation between order statistics (torch.quantile's default).
float quantile999(std::vector<float> xs) {
  std::sort(xs.begin(), xs.end());
  const double pos = 0.999 * static_cast<double>(xs.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, xs.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return static_cast<float>(xs[lo] + (xs[hi] - xs[lo]) * frac);
}

float nonzero(float s) { return s > 0.0f && std::isfinite(s) ? s : 1.0f; }

}  // namespace

KvScales calibrate_kv_scales(const Checkpoint& ckpt, const std::vector<InputSequence>& inputs,
                             KvScaleMethod method, const Sharding* shard) {
  const ModelSpec& spec = ckpt.spec();
  PathStyle style = default_training_style();
  const PreparedWeights weights = prepare_weights(ckpt, style);
  const std::size_t calls =
      method == KvScaleMethod::vllm ? std::min<std::size_t>(1, inputs.size()) : inputs.size();
  std::vector<AmaxRecorder> per_call(calls, AmaxRecorder(spec.layers));
  std::vector<std::size_t> mine;
  for (std::size_t i = 0; i < calls; ++i)
    if (!shard || shard->owns(i)) mine.push_back(i);
  Job& job = Job::current();
  job.run_step(
      [&](const Job::Report&) {
        parallel_for(mine.size(), 1, [&](std::size_t b, std::size_t e) {
          for (std::size_t m = b; m < e; ++m) {
            const std::size_t i = mine[m];
            std::vector<int32_t> tokens = inputs[i].prompt;
            tokens.insert(tokens.end(), inputs[i].response.begin(), inputs[i].response.end());
            const EmulatedOps local(spec, weights, style);
            local.set_qkv_observer(&per_call[i]);
            auto cache = local.new_cache(static_cast<int>(tokens.size()));
            EmulatedOps::Mat logprobs;
            forward(local, cache, tokens.data(), static_cast<int>(tokens.size()), 0, logprobs);
          }
        });
      },
      0);
  if (shard)
    share_items(
        job, *shard, [&](std::size_t i) { return i < calls; },
        [&](Packer& out, std::size_t i) {
          out.put_vector(per_call[i].q);
          out.put_vector(per_call[i].k);
          out.put_vector(per_call[i].v);
        },
        [&](Unpacker& in, std::size_t i) {
          per_call[i].q = in.get_vector<float>();
          per_call[i].k = in.get_vector<float>();
          per_call[i].v = in.get_vector<float>();
        });
  KvScales s;
  for (int l = 0; l < spec.layers; ++l) {
    const auto li = static_cast<std::size_t>(l);
    if (method == KvScaleMethod::vllm) {
      s.q.push_back(nonzero(per_call[0].q[li] / 200.0f));  // vLLM uses the K constant for q too
      s.k.push_back(nonzero(per_call[0].k[li] / 200.0f));
      s.v.push_back(nonzero(per_call[0].v[li] / 100.0f));
    } else {
      std::vector<float> q, k, v;
      for (const auto& c : per_call) {
        q.push_back(c.q[li]);
        k.push_back(c.k[li]);
        v.push_back(c.v[li]);
      }
      s.q.push_back(nonzero(quantile999(q) * 1.05f / num::kE4M3Max));
      s.k.push_back(nonzero(quantile999(k) * 1.05f / num::kE4M3Max));
      s.v.push_back(nonzero(quantile999(v) * 1.05f / num::kE4M3Max));
    }
  }
  return s;
}

}  // namespace rlp
