#include "rlparity/replay/replay.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "rlparity/dist/job.hpp"
#include "rlparity/dist/pack.hpp"
#include "rlparity/metrics/engine_side.hpp"
#include "rlparity/metrics/statistics.hpp"
#include "rlparity/metrics/token_metrics.hpp"
#include "rlparity/metrics/topk_kl.hpp"
#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/model/forward.hpp"
#include "rlparity/model/oracle_ops.hpp"
#include "rlparity/replay/kv_calibration.hpp"
#include "rlparity/replay/path_runner.hpp"
#include "rlparity/replay/sequence_sharding.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/interrupt.hpp"
#include "rlparity/util/parallel.hpp"
#include "rlparity/util/process_memory.hpp"
#include "rlparity/util/strings.hpp"
#include "rlparity/util/version.hpp"

namespace rlp {

std::size_t replay_group_size(const ModelSpec& spec, std::size_t sequences, uint64_t longest_response,
                              std::size_t cap) {
  const uint64_t per_seq = std::max<uint64_t>(
      1, 8 * std::max<uint64_t>(1, longest_response) * static_cast<uint64_t>(std::max(1, spec.vocab)));
  const uint64_t fit = std::max<uint64_t>(1, kGroupRowBytes / per_seq);
  return static_cast<std::size_t>(
      std::min<uint64_t>({std::max<uint64_t>(1, cap), fit, std::max<uint64_t>(1, sequences)}));
}
uint64_t replay_kept_bytes_per_sequence(const ModelSpec& spec, std::size_t waiting_paths,
                                        uint64_t longest_response, bool oracle, bool deferred_heads) {
  const uint64_t R = std::max<uint64_t>(1, longest_response),
                 V = static_cast<uint64_t>(std::max(1, spec.vocab)),
                 H = static_cast<uint64_t>(std::max(1, spec.hidden));
  const uint64_t LH = static_cast<uint64_t>(std::max(1, spec.layers)) * H;
  uint64_t bytes = (waiting_paths + 1) * R * 4 * ((deferred_heads ? H : V) + LH);
  if (oracle) bytes += R * 8 * (LH + 1);
  return bytes;
}

std::size_t replay_block_groups(const ModelSpec& spec, std::size_t waiting_paths, std::size_t group_size,
                                uint64_t longest_response, bool oracle, bool deferred_heads) {
  const uint64_t per_group = std::max<uint64_t>(
      1, replay_kept_bytes_per_sequence(spec, waiting_paths, longest_response, oracle, deferred_heads) *
             std::max<std::size_t>(1, group_size));
  return static_cast<std::size_t>(std::max<uint64_t>(1, kBlockKeptBytes / per_group));
}

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Temperature sampling from a log-prob row; temperature 0 is greedy (lowest index on ties).
int32_t sample_token(const float* logp, int vocab, double temperature, uint64_t& rng) {
  int best = 0;
  for (int i = 1; i < vocab; ++i)
    if (logp[i] > logp[best]) best = i;
  if (temperature <= 0.0) return best;
  std::vector<double> w(static_cast<std::size_t>(vocab));
  double total = 0.0;
  for (int i = 0; i < vocab; ++i) {
    w[static_cast<std::size_t>(i)] = std::exp((logp[i] - logp[best]) / temperature);
    total += w[static_cast<std::size_t>(i)];
  }
  const double u = static_cast<double>(splitmix64(rng) >> 11) * 0x1p-53 * total;
  double acc = 0.0;
  for (int i = 0; i < vocab; ++i) {
    acc += w[static_cast<std::size_t>(i)];
    if (u < acc) return i;
  }
  return best;
}

std::vector<int32_t> sample_response(const EmulatedOps& ops, const std::vector<int32_t>& prompt,
                                     const ReplayOptions& opt, uint64_t seq_seed) {
  const ModelSpec& spec = ops.spec();
  const int P = static_cast<int>(prompt.size());
  const int max_new = std::min(opt.max_new_tokens, spec.max_positions - P);
  std::vector<int32_t> tokens = prompt, response;
  uint64_t rng = seq_seed;
  auto cache = ops.new_cache(P + max_new);
  EmulatedOps::Mat lp;
  forward_prefill(ops, cache, tokens.data(), P, ops.style().prefill_chunk, lp);
  for (int step = 0; step < max_new; ++step) {
    const int32_t t = sample_token(lp.row(lp.rows() - 1).data(), spec.vocab, opt.temperature, rng);
    response.push_back(t);
    tokens.push_back(t);
    const bool stop =
        std::find(spec.stop_tokens.begin(), spec.stop_tokens.end(), t) != spec.stop_tokens.end();
    if (stop || step + 1 == max_new) break;
    const int pos = static_cast<int>(tokens.size()) - 1;
    forward_decode(ops, {&cache}, &tokens.back(), &pos, lp);
  }
  return response;
}

template <class A, class B>
double sq_diff(const A& a, const B& b) {
  double s = 0.0;
  for (Eigen::Index i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a.data()[i]) - static_cast<double>(b.data()[i]);
    s += d * d;
  }
  return s;
}
template <class A>
double sq_norm(const A& a) {
  double s = 0.0;
  for (Eigen::Index i = 0; i < a.size(); ++i)
    s += static_cast<double>(a.data()[i]) * static_cast<double>(a.data()[i]);
  return s;
}

// Per-layer sums for relative L2 differences: |g-t|^2, |t|^2, |g-o|^2, |t-o|^2, |o|^2.
enum LayerSum { kGT, kT, kGO, kTO, kO, kNumLayerSums };

const char* const kTokenMetrics[] = {
    "logp_gen", "logp_train", "kl_gen_train", "kl_train_gen", "top1_agree", "entropy_gen", "js"};

// What a replay records about its own cost, in the run file's `extra` attribute ("resources"; an
// attribute, so that the datasets stay comparable bit for bit between runs): wall seconds per phase,
// the process's peak RSS (VmHWM: mapped checkpoint pages included) and the largest anonymous RSS seen
// after each preparation and path run.
class ResourceLog {
 public:
  // Adds the wall time from now to the end of the scope to phase `name`.
  class Scope {
   public:
    Scope(ResourceLog& log, const char* name)
        : log_(log), name_(name), t0_(std::chrono::steady_clock::now()) {}
    ~Scope() {
      log_.seconds_[name_] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
      log_.sample();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ResourceLog& log_;
    const char* name_;
    std::chrono::steady_clock::time_point t0_;
  };
  Scope phase(const char* name) { return Scope(*this, name); }
  void sample() { anon_max_ = std::max(anon_max_, proc_status_bytes("RssAnon")); }
  // Weight forms prepared, and forms that read their group's form instead (counted once each).
  void form_prepared() { ++forms_prepared_; }
  void form_shared(std::size_t form) { forms_shared_.insert(form); }
  nlohmann::json to_json() const {
    return {{"phase_seconds", seconds_},
            {"peak_rss_bytes", proc_status_bytes("VmHWM")},
            {"max_anon_rss_bytes", anon_max_},
            {"weight_forms_prepared", forms_prepared_},
            {"weight_forms_shared", forms_shared_.size()}};
  }

 private:
  std::map<std::string, double> seconds_;
  int forms_prepared_ = 0;
  std::set<std::size_t> forms_shared_;
  int64_t anon_max_ = -1;
};

// Weights in the plan's forms: prepared on first use, kept here or in the caller's cache. A form
// whose group's first form is held reads that form's weights when they are the same bits
// (refit_form_is_shareable; ReplayPlan::form_group).
class WeightsSource {
 public:
  WeightsSource(const Checkpoint& ckpt, const ReplayPlan& plan, PreparedWeightsCache* cache,
                ResourceLog* log = nullptr)
      : ckpt_(ckpt), plan_(plan), cache_(cache), log_(log), own_(plan.weight_forms.size()) {}
  const PreparedWeights& get(std::size_t form) {
    const std::size_t lead = plan_.form_group[form];
    if (const PreparedWeights* held = lead != form ? slot(lead).get() : nullptr) {
      if (refit_form_is_shareable(*held, ckpt_)) {
        if (log_) log_->form_shared(form);
        return *held;
      }
      // path_schedule ran the lead's paths first: this form is prepared on its own, the lead gone.
      release(lead);
      ckpt_.release_resident_pages();
    }
    std::unique_ptr<PreparedWeights>& s = slot(form);
    if (!s) {
      std::optional<ResourceLog::Scope> timed;
      if (log_) {
        timed.emplace(*log_, "prepare_weights");
        log_->form_prepared();
      }
      s = std::make_unique<PreparedWeights>(prepare_weights(ckpt_, plan_.weight_forms[form]));
    }
    return *s;
  }
  // Frees the forms of `form`'s group that this source owns (a caller's cache keeps its forms for
  // later replays).
  void release_group(std::size_t form) {
    for (std::size_t f = 0; f < own_.size(); ++f)
      if (plan_.form_group[f] == plan_.form_group[form]) release(f);
  }

 private:
  std::unique_ptr<PreparedWeights>& slot(std::size_t form) {
    return cache_ ? cache_->by_key[weights_key(plan_.weight_forms[form])] : own_[form];
  }
  void release(std::size_t form) {
    if (!cache_) own_[form].reset();
  }

  const Checkpoint& ckpt_;
  const ReplayPlan& plan_;
  PreparedWeightsCache* cache_;
  ResourceLog* log_;
  std::vector<std::unique_ptr<PreparedWeights>> own_;
};

// The job's sharding of `inputs` (one process: every sequence its own).
Sharding job_sharding(const ModelSpec& spec, const std::vector<InputSequence>& inputs,
                      const ReplayOptions& opt) {
  const Job& job = Job::current();
  return shard_sequences(inputs, job.size(), job.rank(), opt.max_new_tokens, spec.max_positions);
}

// Samples every missing response of this rank's sequences with `sampler`'s generation path (seeded
// per sequence index, so the rank that samples it does not matter), then shares them: every rank
// ends with every response.
void sample_missing(const ModelSpec& spec, const PreparedWeights& w, const Recipe& sampler,
                    const ReplayOptions& opt, const Sharding& shard, std::vector<InputSequence>& inputs) {
  std::vector<std::size_t> missing, mine;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].has_response) continue;
    missing.push_back(i);
    if (shard.owns(i)) mine.push_back(i);
  }
  if (missing.empty()) return;
  Job& job = Job::current();
  job.run_step(
      [&](const Job::Report&) {
        for (const std::size_t i : mine)
          if (inputs[i].prompt.size() >= static_cast<std::size_t>(spec.max_positions))
            RLP_THROW_INPUT(
                "sequence '{}' (line {}): its prompt of {} tokens fills the context of {}; no response can "
                "be sampled",
                inputs[i].id, inputs[i].line, inputs[i].prompt.size(), spec.max_positions);
        const EmulatedOps ops(spec, w, sampler.gen);
        parallel_for(mine.size(), 1, [&](std::size_t b, std::size_t e) {
          for (std::size_t m = b; m < e; ++m) {
            check_interrupted();
            const std::size_t i = mine[m];
            uint64_t seed = opt.seed ^ (0xD1B54A32D192ED03ull * (i + 1));
            inputs[i].response = sample_response(ops, inputs[i].prompt, opt, splitmix64(seed));
            inputs[i].has_response = true;
          }
        });
      },
      0);
  std::vector<char> was_missing(inputs.size(), 0);
  for (const std::size_t i : missing) was_missing[i] = 1;
  share_items(
      job, shard, [&](std::size_t i) { return was_missing[i] != 0; },
      [&](Packer& out, std::size_t i) { out.put_vector(inputs[i].response); },
      [&](Unpacker& in, std::size_t i) {
        inputs[i].response = in.get_vector<int32_t>();
        inputs[i].has_response = true;
      });
}

// A MoE run's router choices at every response token (RoutingResult's arrays): the two paths'
// per recipe, the oracle's once. Empty for a dense model.
struct RoutingSlots {
  std::vector<int32_t> moe_layers;  // the decoder layer of each MoE layer
  std::size_t k = 0;
  std::vector<std::vector<int32_t>> gen, train;  // per recipe: tokens x M x k
  std::vector<int32_t> oracle;                   // tokens x M x k
  std::vector<double> margin;                    // tokens x M

  RoutingSlots(const ModelSpec& spec, std::size_t recipes, std::size_t tokens, bool with_oracle) {
    for (int l = 0; l < spec.layers; ++l)
      if (spec.is_moe_layer(l)) moe_layers.push_back(l);
    if (moe_layers.empty()) return;
    k = static_cast<std::size_t>(spec.experts_per_tok);
    const std::size_t n = tokens * moe_layers.size() * k;
    gen.assign(recipes, std::vector<int32_t>(n, -1));
    train = gen;
    if (with_oracle) {
      oracle.assign(n, -1);
      margin.assign(tokens * moe_layers.size(), 0.0);
    }
  }
  bool any() const { return !moe_layers.empty(); }
  std::size_t per_token() const { return moe_layers.size() * k; }
  // Token `at`'s expert set at every MoE layer, from response row j of a path's output, ascending.
  void store(std::vector<int32_t>& dst, std::size_t at, const std::vector<std::vector<int32_t>>& experts,
             int j) const {
    for (std::size_t m = 0; m < moe_layers.size(); ++m) {
      const int32_t* ids =
          experts[static_cast<std::size_t>(moe_layers[m])].data() + static_cast<std::size_t>(j) * k;
      int32_t* out = dst.data() + (at * moe_layers.size() + m) * k;
      std::copy_n(ids, k, out);
      std::sort(out, out + k);
    }
  }
  RoutingResult result(std::size_t recipe) const {
    RoutingResult r;
    if (!any()) return r;
    r.moe_layers = static_cast<int>(moe_layers.size());
    r.k = static_cast<int>(k);
    r.moe_layer_index = moe_layers;
    r.gen_experts = gen[recipe];
    r.train_experts = train[recipe];
    r.oracle_experts = oracle;
    r.margin_oracle = margin;
    return r;
  }
};

// Every rank's per-sequence results (token metrics, oracle logprobs, per-layer sums, MoE routing)
// into every rank's arrays, bit for bit: each slot was written by the one rank that owns its sequence.
void gather_sequence_results(Job& job, const Sharding& shard, const std::vector<int64_t>& resp_off,
                             std::size_t sums_per_seq,
                             std::vector<std::map<std::string, std::vector<double>>>& tok,
                             std::vector<double>& logp_oracle, std::vector<double>& layer_sums,
                             std::vector<std::vector<float>>& token_rel, std::size_t layers,
                             std::vector<std::map<std::string, std::vector<double>>>& topk,
                             RoutingSlots& routing) {
  auto each_slot = [&](std::size_t i, const auto& visit) {
    const auto b = static_cast<std::size_t>(resp_off[i]);
    const auto n = static_cast<std::size_t>(resp_off[i + 1]) - b;
    for (auto& metrics : tok)
      for (auto& [name, values] : metrics) visit(values.data() + b, n);
    if (!logp_oracle.empty()) visit(logp_oracle.data() + b, n);
    visit(layer_sums.data() + i * sums_per_seq, sums_per_seq);
    for (auto& t : token_rel) visit(t.data() + b * layers, n * layers);
    for (auto& metrics : topk)
      for (auto& [name, values] : metrics) visit(values.data() + b, n);
    const std::size_t per = routing.per_token(), M = routing.moe_layers.size();
    for (auto* side : {&routing.gen, &routing.train})
      for (auto& ids : *side) visit(ids.data() + b * per, n * per);
    if (!routing.oracle.empty()) visit(routing.oracle.data() + b * per, n * per);
    if (!routing.margin.empty()) visit(routing.margin.data() + b * M, n * M);
  };
  share_items(
      job, shard, [](std::size_t) { return true; },
      [&](Packer& out, std::size_t i) { each_slot(i, [&](const auto* p, std::size_t n) { out.put(p, n); }); },
      [&](Unpacker& in, std::size_t i) { each_slot(i, [&](auto* p, std::size_t n) { in.get(p, n); }); });
}

}  // namespace

SeqTokens seq_tokens(const InputSequence& in) {
  SeqTokens st;
  st.tokens = in.prompt;
  st.tokens.insert(st.tokens.end(), in.response.begin(), in.response.end());
  st.prompt_len = static_cast<int>(in.prompt.size());
  st.response_len = static_cast<int>(in.response.size());
  return st;
}

RunData run_replay(const Checkpoint& ckpt, std::vector<InputSequence>& inputs, const ReplayOptions& options,
                   const ProgressFn& progress) {
  if (inputs.empty()) RLP_THROW_INPUT("no input sequences to replay");
  return run_replay(ckpt, inputs, make_replay_plan(ckpt.spec(), options), progress);
}

void sample_missing_responses(const Checkpoint& ckpt, std::vector<InputSequence>& inputs,
                              const ReplayPlan& plan, PreparedWeightsCache* cache) {
  if (plan.options.threads) set_thread_count(*plan.options.threads);
  if (std::all_of(inputs.begin(), inputs.end(), [](const InputSequence& s) { return s.has_response; }))
    return;
  WeightsSource weights(ckpt, plan, cache);
  sample_missing(ckpt.spec(), weights.get(plan.sampler_form), plan.sampler, plan.options,
                 job_sharding(ckpt.spec(), inputs, plan.options), inputs);
}

RunData run_replay(const Checkpoint& ckpt, std::vector<InputSequence>& inputs, const ReplayPlan& plan,
                   const ProgressFn& progress, PreparedWeightsCache* cache) {
  const ModelSpec& spec = ckpt.spec();
  const ReplayOptions& opt = plan.options;
  if (inputs.empty()) RLP_THROW_INPUT("no input sequences to replay");
  if (opt.threads) set_thread_count(*opt.threads);
  const std::vector<Recipe>& recipes = plan.recipes;
  const Recipe& sampler = plan.sampler;

  // Weights in every form a path reads, prepared once (on first use) and shared between recipes.
  ResourceLog resources;
  WeightsSource weights(ckpt, plan, cache, &resources);
  auto weights_for = [&](std::size_t form) -> const PreparedWeights& { return weights.get(form); };

  // 1. Responses: sampled once, from one generation path, so every recipe replays the same tokens.
  // The sampler's generation path keeps a bf16 KV cache (ReplayPlan::sampler). In a job of several
  // ranks each replays its shard of the sequences (sharding.hpp) and the results are gathered.
  Job& job = Job::current();
  const Sharding shard = job_sharding(spec, inputs, opt);
  if (std::any_of(inputs.begin(), inputs.end(), [](const InputSequence& s) { return !s.has_response; })) {
    const PreparedWeights& w = weights_for(plan.sampler_form);
    const auto timed = resources.phase("sampling");
    sample_missing(spec, w, sampler, opt, shard, inputs);
  }
  const auto group_of = [&](std::size_t form) { return plan.form_group[form]; };
  if (std::none_of(plan.schedule.begin(), plan.schedule.end(), [&](const ReplayPlan::PathRun& r) {
        return group_of(r.form) == group_of(plan.sampler_form);
      }))
    weights.release_group(plan.sampler_form);
  for (const auto& in : inputs) {
    if (in.response.empty()) RLP_THROW_INPUT("sequence '{}' (line {}): empty response", in.id, in.line);
    if (in.prompt.size() + in.response.size() > static_cast<std::size_t>(spec.max_positions))
      RLP_THROW_INPUT("sequence '{}' (line {}): prompt + response = {} tokens exceeds the context of {}",
                      in.id, in.line, in.prompt.size() + in.response.size(), spec.max_positions);
  }

  // 2. fp8 KV-cache scales, when a recipe needs them.
  KvScales kv_scales;
  nlohmann::json kv_json = nullptr;
  if (plan.needs_kv_scales) {
    const auto timed = resources.phase("kv_calibration");
    if (opt.kv_scales_stale_dir.empty()) {
      kv_scales = calibrate_kv_scales(ckpt, inputs, opt.kv_scale_method, &shard);
    } else {
      const Checkpoint stale = Checkpoint::open(opt.kv_scales_stale_dir);
      if (stale.spec().layers != spec.layers || stale.spec().kv_heads != spec.kv_heads)
        RLP_THROW_INPUT("--kv-scales stale:{}: its shape does not match the replayed checkpoint",
                        opt.kv_scales_stale_dir);
      kv_scales = calibrate_kv_scales(stale, inputs, opt.kv_scale_method, &shard);
    }
    kv_json = {{"source", plan.kv_scales_source()},
               {"method", opt.kv_scale_method == KvScaleMethod::nemo ? "nemo" : "vllm"},
               {"q", kv_scales.q},
               {"k", kv_scales.k},
               {"v", kv_scales.v}};
  }

  // 3. The run's inputs.
  RunData run;
  run.tool_version = version();
  run.checkpoint_path = ckpt.dir();
  run.checkpoint_hash = ckpt.content_hash();
  run.created = utc_now();
  run.seed = opt.seed;
  run.model_spec = spec.to_json();
  const std::size_t S = inputs.size();
  std::vector<int64_t> resp_off(S + 1, 0);
  run.seq_offsets.push_back(0);
  bool any_engine = false;
  for (std::size_t i = 0; i < S; ++i) {
    const auto& in = inputs[i];
    run.token_ids.insert(run.token_ids.end(), in.prompt.begin(), in.prompt.end());
    run.token_ids.insert(run.token_ids.end(), in.response.begin(), in.response.end());
    run.seq_offsets.push_back(static_cast<int64_t>(run.token_ids.size()));
    run.prompt_lengths.push_back(static_cast<int32_t>(in.prompt.size()));
    run.seq_ids.push_back(in.id);
    resp_off[i + 1] = resp_off[i] + static_cast<int64_t>(in.response.size());
    any_engine = any_engine || !in.engine_logprobs.empty();
  }
  const auto T = static_cast<std::size_t>(resp_off[S]);
  if (any_engine) {
    run.engine_logprobs.assign(T, std::nan(""));
    for (std::size_t i = 0; i < S; ++i)
      std::copy(inputs[i].engine_logprobs.begin(), inputs[i].engine_logprobs.end(),
                run.engine_logprobs.begin() + resp_off[i]);
  }

  std::unique_ptr<OracleWeights> oracle_w;
  if (opt.oracle) oracle_w = std::make_unique<OracleWeights>(prepare_oracle_weights(ckpt));

  // 4. Per block of sequence groups: the oracle once, then the recipes' paths in the plan's schedule
  // (one weight form at a time), each path over every group of the block. A group's outputs wait
  // until both paths of its recipe ran; then its metrics are taken (each writes only its own slots).
  const std::size_t NR = recipes.size(), L = static_cast<std::size_t>(spec.layers);
  std::vector<std::map<std::string, std::vector<double>>> tok(NR);
  for (auto& m : tok)
    for (const char* name : kTokenMetrics) m[name].assign(T, 0.0);
  std::vector<double> logp_oracle(opt.oracle ? T : 0);
  std::vector<double> layer_sums(S * NR * L * kNumLayerSums, 0.0);
  // Per recipe, when the inputs carry an engine's top-k: bounds on KL(engine || gen) and
  // KL(engine || train) per response token (topk_kl.hpp; NaN where the engine gave no top-k).
  const bool any_top =
      std::any_of(inputs.begin(), inputs.end(), [](const InputSequence& s) { return !s.engine_top.empty(); });
  std::vector<std::map<std::string, std::vector<double>>> topk(any_top ? NR : 0);
  // topk_out[recipe]: the four arrays in the order gen lower, gen upper, train lower, train upper.
  std::vector<std::array<double*, 4>> topk_out(topk.size());
  for (std::size_t ri = 0; ri < topk.size(); ++ri) {
    std::size_t slot = 0;
    for (const char* side : {"gen", "train"})
      for (const char* bound : {"lower", "upper"}) {
        std::vector<double>& v = topk[ri][fmt::format("kl_topk_{}_engine_{}", bound, side)];
        v.assign(T, std::nan(""));
        topk_out[ri][slot++] = v.data();
      }
  }
  // Per recipe, response token x layer: |g - t| / |t| of that token's hidden state (token_rel_l2).
  std::vector<std::vector<float>> token_rel(NR, std::vector<float>(T * L, 0.0f));
  RoutingSlots routing(spec, NR, T, opt.oracle);
  const int64_t total_tokens = static_cast<int64_t>(T * NR);
  int64_t done_tokens = 0;

  const bool cpu_paths = opt.cpu_paths();
  auto make_runner = [&](const PathStyle& s, std::size_t form) -> std::unique_ptr<PathRunner> {
    if (!cpu_paths) return opt.backend->make_runner(spec, weights_for(form), s, &kv_scales);
    return std::make_unique<EmulatedRunner>(spec, weights_for(form), s, &kv_scales, opt.decode_eval);
  };
  std::size_t longest_r = 1;
  for (const auto& in : inputs) longest_r = std::max(longest_r, in.response.size());
  const std::size_t group_size = replay_group_size(spec, S, longest_r, plan.group_cap(thread_count()));
  const std::size_t block_groups = plan.blocks_of_one_group()
                                       ? 1
                                       : replay_block_groups(spec, schedule_waiting_paths(plan.schedule),
                                                             group_size, longest_r, opt.oracle, cpu_paths);
  const std::vector<std::size_t>& mine = shard.mine();
  const bool replay_routing = opt.routing_replay != RoutingReplayMode::off;
  using Outputs = std::vector<PathOutput<PathRunner::Mat>>;
  // Recipe ri's metrics for group member gi (sequence i), from its two paths' outputs.
  // Sequences in parallel; a lone sequence runs the rows of each chunk and its layers in parallel
  // instead (a nested parallel_for runs serially on a worker). Every value is computed by one task
  // in a fixed order: the same bits for any thread count.
  auto take_metrics = [&](std::size_t ri, const std::vector<std::size_t>& seq,
                          const std::vector<SeqTokens>& group, const Outputs& gen, const Outputs& train,
                          const std::vector<PathOutput<OracleOps::Mat>>& oracle) {
    auto& m = tok[ri];
    parallel_for(seq.size(), 1, [&](std::size_t b, std::size_t e) {
      PathRunner::Mat g_buf, t_buf;  // log-prob rows of deferred heads (log_prob_rows)
      for (std::size_t gi = b; gi < e; ++gi) {
        const std::size_t i = seq[gi];
        const auto& g = gen[gi];
        const auto& t = train[gi];
        const auto off = static_cast<std::size_t>(resp_off[i]);
        const int R = group[gi].response_len;
        for (int j0 = 0; j0 < R; j0 += kHeadRows) {
          const int n = std::min(kHeadRows, R - j0);
          const float* g_rows = log_prob_rows(g, j0, n, g_buf);
          const float* t_rows = log_prob_rows(t, j0, n, t_buf);
          parallel_for(static_cast<std::size_t>(n), 1, [&](std::size_t r0, std::size_t r1) {
            std::vector<double> scratch, top_lp;
            std::vector<int32_t> top_ids;
            for (int j = j0 + static_cast<int>(r0); j < j0 + static_cast<int>(r1); ++j) {
              const std::size_t at = off + static_cast<std::size_t>(j);
              const int32_t token = inputs[i].response[static_cast<std::size_t>(j)];
              const float* g_row = g_rows + static_cast<std::ptrdiff_t>(j - j0) * spec.vocab;
              const float* t_row = t_rows + static_cast<std::ptrdiff_t>(j - j0) * spec.vocab;
              const FullVocabStats fv = full_vocab_stats(g_row, t_row, spec.vocab);
              m.at("logp_gen")[at] = g_row[token];
              m.at("logp_train")[at] = t_row[token];
              m.at("kl_gen_train")[at] = fv.kl_gen_train;
              m.at("kl_train_gen")[at] = fv.kl_train_gen;
              m.at("top1_agree")[at] = fv.top1_agree ? 1.0 : 0.0;
              m.at("entropy_gen")[at] = fv.entropy_gen;
              m.at("js")[at] = fv.js;
              if (routing.any()) {
                routing.store(routing.gen[ri], at, g.experts, j);
                routing.store(routing.train[ri], at, t.experts, j);
              }
              if (inputs[i].engine_top.empty() || inputs[i].engine_top[static_cast<std::size_t>(j)].empty())
                continue;
              top_ids.clear();
              top_lp.clear();
              for (const TopLogprob& x : inputs[i].engine_top[static_cast<std::size_t>(j)]) {
                top_ids.push_back(x.token);
                top_lp.push_back(x.logprob);
              }
              for (int side = 0; side < 2; ++side) {
                const TopkKlBounds kb = topk_kl_bounds(top_ids.data(), top_lp.data(), top_ids.size(),
                                                       side == 0 ? g_row : t_row, spec.vocab, scratch);
                topk_out[ri][2 * side][at] = kb.lower;
                topk_out[ri][2 * side + 1][at] = kb.upper;
              }
            }
          });
        }
        float* rel = token_rel[ri].data() + off * L;
        parallel_for(static_cast<std::size_t>(R), kHeadRows, [&](std::size_t r0, std::size_t r1) {
          for (auto j = static_cast<Eigen::Index>(r0); j < static_cast<Eigen::Index>(r1); ++j)
            for (std::size_t l = 0; l < L; ++l) {
              const double d = sq_diff(g.hidden[l].row(j), t.hidden[l].row(j)),
                           n = sq_norm(t.hidden[l].row(j));
              rel[static_cast<std::size_t>(j) * L + l] = n > 0 ? static_cast<float>(std::sqrt(d / n)) : 0.0f;
            }
        });
        parallel_for(L, 1, [&](std::size_t l0, std::size_t l1) {
          for (std::size_t l = l0; l < l1; ++l) {
            double* sums = &layer_sums[((i * NR + ri) * L + l) * kNumLayerSums];
            sums[kGT] = sq_diff(g.hidden[l], t.hidden[l]);
            sums[kT] = sq_norm(t.hidden[l]);
            if (opt.oracle) {
              sums[kGO] = sq_diff(g.hidden[l], oracle[gi].hidden[l]);
              sums[kTO] = sq_diff(t.hidden[l], oracle[gi].hidden[l]);
              sums[kO] = sq_norm(oracle[gi].hidden[l]);
            }
          }
        });
      }
    });
  };
  // This rank's sequences, in groups of group_size (group member gi is sequence seq[gi]) and blocks
  // of block_groups groups.
  auto replay_my_sequences = [&](const Job::Report& report) {
    const std::size_t per_block = group_size * block_groups;
    for (std::size_t b0 = 0; b0 < mine.size(); b0 += per_block) {
      std::vector<std::vector<std::size_t>> seqs;
      std::vector<std::vector<SeqTokens>> groups;
      std::vector<int64_t> group_tokens;
      for (std::size_t m0 = b0; m0 < std::min(mine.size(), b0 + per_block); m0 += group_size) {
        seqs.emplace_back(mine.begin() + static_cast<std::ptrdiff_t>(m0),
                          mine.begin() + static_cast<std::ptrdiff_t>(std::min(mine.size(), m0 + group_size)));
        groups.emplace_back();
        group_tokens.push_back(0);
        for (const std::size_t i : seqs.back()) {
          group_tokens.back() += resp_off[i + 1] - resp_off[i];
          groups.back().push_back(seq_tokens(inputs[i]));
        }
      }
      const std::size_t NG = seqs.size();
      std::vector<std::vector<PathOutput<OracleOps::Mat>>> oracle(NG);
      if (opt.oracle) {
        const auto timed = resources.phase("oracle");
        const OracleOps ops(spec, *oracle_w);
        for (std::size_t g = 0; g < NG; ++g) {
          check_interrupted();
          oracle[g] = run_path_group(ops, SequenceMode::teacher_forced, groups[g], true, /*full_rows=*/false);
          for (std::size_t gi = 0; gi < seqs[g].size(); ++gi) {
            for (int j = 0; j < groups[g][gi].response_len; ++j) {
              const auto at = static_cast<std::size_t>(resp_off[seqs[g][gi]] + j);
              logp_oracle[at] = oracle[g][gi].logprobs(j, 0);
              if (!routing.any()) continue;
              routing.store(routing.oracle, at, oracle[g][gi].experts, j);
              for (std::size_t m = 0; m < routing.moe_layers.size(); ++m)
                routing.margin[at * routing.moe_layers.size() + m] =
                    oracle[g][gi]
                        .margin[static_cast<std::size_t>(routing.moe_layers[m])][static_cast<std::size_t>(j)];
            }
          }
        }
      }
      // kept[ri][side][g]: a path's outputs waiting for the other path of its recipe.
      std::vector<std::array<std::vector<Outputs>, 2>> kept(NR);
      for (auto& k : kept)
        for (auto& side : k) side.resize(NG);
      for (std::size_t u = 0; u < plan.schedule.size(); ++u) {
        const ReplayPlan::PathRun& path = plan.schedule[u];
        const std::size_t ri = path.recipe;
        const Recipe& rc = recipes[ri];
        // A new form: the pages the previous phase read need not stay resident beside it.
        if (u > 0 && group_of(plan.schedule[u - 1].form) != group_of(path.form))
          ckpt.release_resident_pages();
        const std::unique_ptr<PathRunner> runner = make_runner(path.train ? rc.train : rc.gen, path.form);
        const auto timed = resources.phase(path.train ? "training_paths" : "generation_paths");
        for (std::size_t g = 0; g < NG; ++g) {
          check_interrupted();
          std::vector<SeqTokens>& group = groups[g];
          Outputs& gen = kept[ri][0][g];
          // Routing replay: the generation path records its routing at every position and the
          // training path takes it (make_replay_plan checked the model and the training mode; the
          // schedule runs a recipe's generation path first).
          for (std::size_t gi = 0; gi < group.size(); ++gi) {
            group[gi].record_routing = replay_routing && !path.train;
            group[gi].routing_replay = {};
            if (replay_routing && path.train)
              group[gi].routing_replay = {&gen[gi].tape,
                                          opt.routing_replay == RoutingReplayMode::ids_weights};
          }
          kept[ri][path.train ? 1 : 0][g] =
              runner->run(path.train ? rc.train.mode : rc.gen.mode, group, true);
          if (kept[ri][0][g].empty() || kept[ri][1][g].empty()) continue;
          take_metrics(ri, seqs[g], group, kept[ri][0][g], kept[ri][1][g], oracle[g]);
          kept[ri][0][g] = {};
          kept[ri][1][g] = {};
          done_tokens += group_tokens[g];
          report(done_tokens);
        }
        const bool last_use = std::none_of(
            plan.schedule.begin() + static_cast<std::ptrdiff_t>(u) + 1, plan.schedule.end(),
            [&](const ReplayPlan::PathRun& r) { return group_of(r.form) == group_of(path.form); });
        // (one form for every path: kept for the next block)
        if (last_use && (!plan.blocks_of_one_group() || b0 + per_block >= mine.size()))
          weights.release_group(path.form);
      }
    }
  };
  job.run_step(replay_my_sequences, total_tokens, progress);
  if (job.distributed())
    gather_sequence_results(job, shard, resp_off, NR * L * kNumLayerSums, tok, logp_oracle, layer_sums,
                            token_rel, L, topk, routing);

  // 5. Per recipe: layer divergences (sums reduced in sequence order), statistics, settings.
  for (std::size_t ri = 0; ri < NR; ++ri) {
    RecipeResult r;
    r.name = recipes[ri].name;
    r.tokens = std::move(tok[ri]);
    if (opt.oracle) r.tokens["logp_oracle"] = logp_oracle;
    std::vector<double> gt(L), go(L), to(L);
    for (std::size_t l = 0; l < L; ++l) {
      double acc[kNumLayerSums] = {};
      for (std::size_t i = 0; i < S; ++i)
        for (int k = 0; k < kNumLayerSums; ++k)
          acc[k] += layer_sums[((i * NR + ri) * L + l) * kNumLayerSums + static_cast<std::size_t>(k)];
      gt[l] = acc[kT] > 0 ? std::sqrt(acc[kGT] / acc[kT]) : 0.0;
      go[l] = acc[kO] > 0 ? std::sqrt(acc[kGO] / acc[kO]) : 0.0;
      to[l] = acc[kO] > 0 ? std::sqrt(acc[kTO] / acc[kO]) : 0.0;
    }
    r.layers["rel_l2_gen_train"] = gt;
    r.token_rel_l2 = std::move(token_rel[ri]);
    if (opt.oracle) {
      r.layers["rel_l2_gen_oracle"] = go;
      r.layers["rel_l2_train_oracle"] = to;
    }
    r.settings = {{"recipe", r.name},
                  {"gen", recipes[ri].gen.to_json()},
                  {"train", recipes[ri].train.to_json()},
                  {"is_cap", opt.stats.is_cap},
                  {"ppo_eps", {opt.stats.ppo_eps_low, opt.stats.ppo_eps_high}},
                  {"icepop_bounds", {opt.stats.icepop_low, opt.stats.icepop_high}},
                  {"kv_scales", recipes[ri].needs_kv_scales() ? kv_json : nlohmann::json(nullptr)}};
    if (routing.any()) r.settings["routing_replay"] = routing_replay_name(opt.routing_replay);
    r.routing = routing.result(ri);
    compute_recipe_statistics(r, resp_off, opt.stats);
    if (any_top) r.engine = std::move(topk[ri]);
    if (!run.engine_logprobs.empty()) compute_engine_statistics(r, run.engine_logprobs, resp_off, opt.stats);
    run.recipes.push_back(std::move(r));
  }
  run.extra = {{"backend", opt.backend ? opt.backend->name : std::string("cpu")},
               {"sample_recipe", opt.sample_recipe},
               {"sample_path", sampler.gen.to_json()},
               {"max_new_tokens", opt.max_new_tokens},
               {"temperature", opt.temperature},
               {"unused_tensors", ckpt.unused_tensors()}};
  if (opt.backend && !opt.backend->info.empty()) run.extra["backend_info"] = opt.backend->info;
  run.extra["resources"] = resources.to_json();
  return run;
}

}  // namespace rlp
