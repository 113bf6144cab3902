// Conservative peak-memory estimate of a replay run (see the header and docs/robustness.md).
#include "rlparity/replay/memory_estimate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <thread>

#include "rlparity/util/error.hpp"

namespace rlp {
namespace {

// Saturating arithmetic: an absurd config must give an absurd estimate, not a wrapped small one.
uint64_t sat_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}
uint64_t sat_add(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}
uint64_t u(int64_t x) { return x > 0 ? static_cast<uint64_t>(x) : 0; }

struct ParamCounts {
  // Per layer: the weights of its linears an fp8 path quantizes (q, k, v, o and the dense MLP, or a
  // MoE layer's experts and shared expert) and their 128x128 blocks.
  std::vector<uint64_t> linear, fp8_scales;
  uint64_t largest_linear = 0;
  uint64_t other = 0;  // embeddings, lm_head copy, norms, biases, routers, shared-expert gates (never fp8)
  uint64_t linear_total() const {
    uint64_t t = 0;
    for (uint64_t x : linear) t = sat_add(t, x);
    return t;
  }
};

ParamCounts count_params(const ModelSpec& s) {
  const uint64_t H = u(s.hidden), I = u(s.intermediate), V = u(s.vocab), hd = u(s.head_dim);
  const uint64_t q = sat_mul(u(s.heads), hd), kv = sat_mul(u(s.kv_heads), hd), L = u(s.layers);
  const uint64_t E = u(s.num_experts), Im = u(s.moe_intermediate), Is = u(s.shared_expert_intermediate);
  ParamCounts c;
  uint64_t per_layer_other = 2 * H;
  if (s.qkv_bias) per_layer_other = sat_add(per_layer_other, q + 2 * kv);
  if (s.qk_norm) per_layer_other = sat_add(per_layer_other, 2 * hd);
  // embed + lm_head (always its own prepared copy, tied or not) + final norm.
  c.other = sat_add(sat_add(sat_mul(2, sat_mul(V, H)), H), sat_mul(L, per_layer_other));
  for (int l = 0; l < s.layers; ++l) {
    uint64_t params = 0, blocks = 0;
    // `count` linears of [o x i] (counted arithmetically: a hostile config's expert count never
    // becomes a loop or an allocation here).
    auto add = [&](uint64_t count, uint64_t o, uint64_t i) {
      params = sat_add(params, sat_mul(count, sat_mul(o, i)));
      blocks = sat_add(blocks, sat_mul(count, sat_mul((o + 127) / 128, (i + 127) / 128)));
      c.largest_linear = std::max(c.largest_linear, sat_mul(o, i));
    };
    add(1, q, H);
    add(2, kv, H);
    add(1, H, q);
    if (!s.is_moe_layer(l)) {
      add(2, I, H);
      add(1, H, I);
    } else {
      add(sat_mul(2, E), Im, H);
      add(E, H, Im);
      if (Is > 0) {
        add(2, Is, H);
        add(1, H, Is);
      }
      c.other = sat_add(c.other, sat_mul(sat_add(E, Is > 0 ? 1 : 0), H));  // router, shared-expert gate
    }
    c.linear.push_back(params);
    c.fp8_scales.push_back(blocks);
  }
  return c;
}

// Bytes one forward path holds for a sequence of n tokens of which r are scored: activations of one
// layer (h, xn, q, k, v, attn, o, gate, up, act, down, observed), the KV cache of every layer, the
// logits of every position and the kept log-prob rows, the per-layer hidden states kept for the layer
// metrics, and fp8 GEMM temporaries (codes and a dequantized copy of the largest input). `b` is the
// element size (4 for the emulated paths, 8 for the float64 oracle).
uint64_t path_bytes(const ModelSpec& s, uint64_t n, uint64_t r, uint64_t b) {
  const uint64_t H = u(s.hidden), I = u(s.intermediate), V = u(s.vocab), L = u(s.layers);
  const uint64_t q = sat_mul(u(s.heads), u(s.head_dim)), kv = sat_mul(u(s.kv_heads), u(s.head_dim));
  // The feed-forward's columns per row: a dense MLP's gate, up and act; a MoE block's router logits,
  // its k experts' outputs and gathered rows, one expert's gate, up and act at a time, and the
  // shared expert's.
  uint64_t ff = sat_mul(3, I);
  if (s.num_experts > 0) {
    const uint64_t k = u(s.experts_per_tok);
    const uint64_t moe =
        sat_add(sat_add(u(s.num_experts), sat_mul(sat_add(k, 1), H)),
                sat_add(sat_mul(3, u(s.moe_intermediate)), sat_mul(3, u(s.shared_expert_intermediate))));
    ff = std::max(ff, moe);
  }
  const uint64_t act_cols = sat_add(sat_add(sat_mul(5, H), sat_mul(2, q)), sat_add(sat_mul(2, kv), ff));
  uint64_t e = sat_mul(n, act_cols);                       // activations of one layer
  e = sat_add(e, sat_mul(sat_mul(2, L), sat_mul(n, kv)));  // KV cache
  e = sat_add(e, sat_mul(n, V));                           // logits of every position
  e = sat_add(e, sat_mul(r, V));                           // kept log-prob rows
  e = sat_add(e, sat_mul(L, sat_mul(r, H)));               // per-layer hidden states
  e = sat_add(e, sat_mul(n, std::max({H, I, q, V})));      // GEMM temporaries
  return sat_mul(e, b);
}

}  // namespace

MemoryEstimate estimate_replay_memory(const ReplayPlan& plan, const std::vector<InputSequence>& inputs,
                                      uint64_t checkpoint_bytes) {
  const ModelSpec& spec = plan.spec;
  const ReplayOptions& opt = plan.options;
  MemoryEstimate est;
  est.mapped_checkpoint = checkpoint_bytes;
  const ParamCounts pc = count_params(spec);
  const uint64_t L = u(spec.layers);

  // The distinct prepared weight forms run_replay holds: the recipes', and the sampler's when a
  // response is to be sampled.
  const bool sampling =
      std::any_of(inputs.begin(), inputs.end(), [](const InputSequence& s) { return !s.has_response; });
  std::set<std::size_t> used;
  for (const auto& f : plan.recipe_forms) used.insert({f.gen, f.train});
  if (sampling) used.insert(plan.sampler_form);
  std::vector<const PathStyle*> forms;
  for (std::size_t f : used) forms.push_back(&plan.weight_forms[f]);
  const bool kv_calibration = plan.needs_kv_scales;
  int n_act = 0, n_fp8 = 0;
  uint64_t weights = 0, largest_fp8_temp = 0;
  for (const PathStyle* s : forms) {
    uint64_t fp8_layers = 0;
    // Non-decoder tensors at 4 B/param: the embedding is held as floats (the lm_head as 2 B).
    uint64_t b = sat_mul(4, pc.other);
    for (int l = 0; l < spec.layers; ++l) {
      const auto li = static_cast<std::size_t>(l);
      if (s->fp8_linear && s->layer_is_fp8(l, spec.layers)) {
        ++fp8_layers;
        b = sat_add(b, sat_add(pc.linear[li], sat_mul(4, pc.fp8_scales[li])));
      } else {
        b = sat_add(b, sat_mul(2, pc.linear[li]));
      }
    }
    weights = sat_add(weights, b);
    if (fp8_layers > 0) {
      ++n_fp8;
      largest_fp8_temp = sat_mul(4, pc.largest_linear);  // float master copy while quantizing one linear
    } else {
      ++n_act;
    }
  }
  est.parts.emplace_back(
      fmt::format("prepared weights: {} act-dtype form(s) at 2 B/param, {} fp8 form(s) at "
                  "1 B/param + 4 B per 128x128 block scale (+ 4 B/param for embedding, norms, lm_head)",
                  n_act, n_fp8),
      weights);
  if (largest_fp8_temp)
    est.parts.emplace_back("fp8 quantization temporary (largest linear as float32)", largest_fp8_temp);
  if (kv_calibration) {
    const uint64_t b = sat_mul(4, sat_add(pc.other, pc.linear_total()));
    est.parts.emplace_back("fp8 KV-scale calibration: one extra act-dtype form while calibrating", b);
  }
  const uint64_t n_params = sat_add(pc.other, pc.linear_total());
  if (opt.oracle)
    est.parts.emplace_back("oracle weights (float64, 8 B/param incl. the lm_head copy)",
                           sat_mul(8, n_params));

  // Per worker: the longest sequence through the oracle and two emulated paths at once.
  uint64_t longest = 1, longest_r = 1, total_tokens = 0, total_response = 0;
  for (const auto& in : inputs) {
    const uint64_t r = in.has_response ? in.response.size() : u(opt.max_new_tokens);
    const uint64_t n = in.prompt.size() + r;
    longest = std::max(longest, n);
    longest_r = std::max(longest_r, r);
    total_tokens = sat_add(total_tokens, n);
    total_response = sat_add(total_response, r);
  }
  const uint64_t hw = std::max(1u, std::thread::hardware_concurrency());
  const uint64_t workers =
      std::max<uint64_t>(1, std::min<uint64_t>(plan.threads > 0 ? u(plan.threads) : hw, inputs.size()));
  uint64_t per_worker = sat_mul(2, path_bytes(spec, longest, longest_r, 4));
  if (opt.oracle) per_worker = sat_add(per_worker, path_bytes(spec, longest, longest_r, 8));
  est.parts.emplace_back(
      fmt::format("per-worker activations, KV caches and log-prob rows for the longest sequence "
                  "({} tokens) x {} worker(s)",
                  longest, workers),
      sat_mul(workers, per_worker));
  // A group's outputs are held together until its metrics are taken: every sequence's kept log-prob
  // rows and per-layer hidden states from the generation and training paths (float), the oracle's
  // hidden states and response-token log-probs (double); and a decode step advances the whole
  // group, so all its KV caches are live at once. The group size follows the longest response
  // (replay_group_size); when responses are still to be sampled they may come out shorter and the
  // groups larger, so the bound takes the largest group and the row budget instead.
  bool all_given = true;
  for (const auto& in : inputs) all_given = all_given && in.has_response;
  const uint64_t group = replay_group_size(spec, inputs.size(), longest_r);
  const uint64_t group_hi =
      all_given ? group : std::min<uint64_t>(kReplayGroup, std::max<std::size_t>(1, inputs.size()));
  const uint64_t rows_one = sat_mul(8, sat_mul(longest_r, u(spec.vocab)));
  uint64_t group_bytes = sat_mul(group, rows_one);
  if (!all_given) group_bytes = std::max(group_bytes, std::min(sat_mul(group_hi, rows_one), kGroupRowBytes));
  const uint64_t hidden_kept = sat_mul(L, sat_mul(longest_r, u(spec.hidden)));
  const uint64_t kv_width = sat_mul(u(spec.kv_heads), u(spec.head_dim));
  group_bytes = sat_add(group_bytes, sat_mul(sat_mul(group_hi, hidden_kept), 8));
  if (opt.oracle)
    group_bytes = sat_add(group_bytes, sat_mul(sat_mul(group_hi, sat_add(hidden_kept, longest_r)), 8));
  group_bytes =
      sat_add(group_bytes, sat_mul(sat_mul(group_hi, 4), sat_mul(sat_mul(2, L), sat_mul(longest, kv_width))));
  est.parts.emplace_back(
      fmt::format("one group of {} sequence(s): kept log-prob rows and hidden states of both paths "
                  "and the oracle's hidden states, decode KV caches",
                  group_hi),
      group_bytes);

  // A layer-wise decode (the CPU paths' default) runs up to kLayerwiseDecodeRows steps' rows of a
  // group through one forward call (at least one row per sequence): that call's activations and
  // logits, beside the group's kept rows.
  const bool layerwise = opt.decode_eval == DecodeEval::layerwise && !opt.backend &&
                         std::any_of(plan.recipes.begin(), plan.recipes.end(),
                                     [](const Recipe& r) { return r.gen.mode == SequenceMode::decode; });
  if (layerwise) {
    const uint64_t rows = std::min(std::max<uint64_t>(u(kLayerwiseDecodeRows), group_hi),
                                   sat_mul(group_hi, std::max<uint64_t>(1, longest_r - 1)));
    est.parts.emplace_back(fmt::format("layer-wise decode: one call of up to {} rows", rows),
                           path_bytes(spec, rows, 0, 4));
  }

  // The run's results: per-token metrics (8 doubles per recipe + oracle + engine), per-layer sums,
  // token ids and offsets.
  const uint64_t NR = plan.recipes.size();
  uint64_t results = sat_mul(8, sat_mul(total_response, sat_add(sat_mul(8, NR), 2)));
  results = sat_add(results, sat_mul(8, sat_mul(inputs.size(), sat_mul(NR, sat_mul(L, 5)))));
  results = sat_add(results, sat_mul(16, total_tokens));
  est.parts.emplace_back("results (per-token and per-layer metrics, token ids)", results);
  // Inputs, the mapping's page tables, allocator overhead: a fixed allowance.
  est.parts.emplace_back("fixed allowance (program, inputs, allocator overhead)", uint64_t{64} << 20);
  for (const auto& [what, b] : est.parts) {
    (void)what;
    est.total = sat_add(est.total, b);
  }
  return est;
}

uint64_t MemoryEstimate::node_total() const { return sat_mul(total, u(std::max(1, ranks_on_node))); }

void check_memory_limit(const MemoryEstimate& est, uint64_t limit, const std::string& limit_text) {
  if (limit == 0 || est.node_total() <= limit) return;
  RLP_THROW_INPUT(
      "estimated peak memory {}{} exceeds --max-memory {} ({}); refusing to start. Estimate:\n{}"
      "Fewer --threads, fewer or shorter sequences, fewer recipes{} or --no-oracle lower it.",
      format_bytes(est.node_total()), est.ranks_on_node > 1 ? " on this node" : "", limit_text,
      format_bytes(limit), est.describe(), est.ranks_on_node > 1 ? ", fewer ranks per node" : "");
}

std::string MemoryEstimate::describe() const {
  std::string s;
  for (const auto& [what, b] : parts) s += fmt::format("  {:>10}  {}\n", format_bytes(b), what);
  s += fmt::format("  {:>10}  total{}\n", format_bytes(total), ranks_on_node > 1 ? " per rank" : "");
  if (ranks_on_node > 1)
    s += fmt::format("  {:>10}  per node ({} ranks on this node, each with its own prepared weights)\n",
                     format_bytes(node_total()), ranks_on_node);
  if (mapped_checkpoint)
    s += fmt::format("  (not counted: {} of memory-mapped checkpoint files, file-backed and reclaimable)\n",
                     format_bytes(mapped_checkpoint));
  return s;
}

uint64_t parse_memory_size(const std::string& text) {
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  const std::string number = text.substr(0, i);
  std::string suffix = text.substr(i);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double value = 0;
  bool ok = !number.empty() && number != "." && std::count(number.begin(), number.end(), '.') <= 1;
  if (ok) {
    try {
      std::size_t used = 0;
      value = std::stod(number, &used);
      ok = used == number.size();
    } catch (const std::exception&) {
      ok = false;
    }
  }
  int shift = -1;
  const std::pair<const char*, int> units[] = {{"", 0},     {"B", 0},   {"K", 10},   {"KB", 10}, {"KIB", 10},
                                               {"M", 20},   {"MB", 20}, {"MIB", 20}, {"G", 30},  {"GB", 30},
                                               {"GIB", 30}, {"T", 40},  {"TB", 40},  {"TIB", 40}};
  for (const auto& [name, sh] : units)
    if (suffix == name) shift = sh;
  const double bytes = value * std::ldexp(1.0, shift < 0 ? 0 : shift);
  if (!ok || shift < 0 || !(bytes >= 1.0) || bytes >= 1.8e19)
    RLP_THROW_INPUT(
        "--max-memory: '{}' is not a memory size (expected e.g. 8G, 512M, 1.5GiB or a byte count)", text);
  return static_cast<uint64_t>(bytes);
}

std::string format_bytes(uint64_t bytes) {
  if (bytes == UINT64_MAX) return "over 16 EiB";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int k = 0;
  while (v >= 1024.0 && k < 6) {
    v /= 1024.0;
    ++k;
  }
  return k == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[k]);
}

}  // namespace rlp
