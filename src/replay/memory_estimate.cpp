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
  uint64_t widest_linear = 0;  // the largest in-dimension of an fp8-able linear
  uint64_t other = 0;    // embeddings, lm_head copy, norms, biases, routers, shared-expert gates (never fp8)
  uint64_t vectors = 0;  // of which norms and biases
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
  c.vectors = sat_add(H, sat_mul(L, per_layer_other));
  c.other = sat_add(sat_mul(2, sat_mul(V, H)), c.vectors);
  for (int l = 0; l < s.layers; ++l) {
    uint64_t params = 0, blocks = 0;
    // `count` linears of [o x i] (counted arithmetically: a hostile config's expert count never
    // becomes a loop or an allocation here).
    auto add = [&](uint64_t count, uint64_t o, uint64_t i) {
      params = sat_add(params, sat_mul(count, sat_mul(o, i)));
      // (a per-channel checkpoint's own form holds one scale per row)
      const uint64_t per = std::max(sat_mul((o + 127) / 128, (i + 127) / 128), s.fp8.per_channel ? o : 0);
      blocks = sat_add(blocks, sat_mul(count, per));
      c.widest_linear = std::max(c.widest_linear, i);
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

// Elements of a KV cache per layer, position and kv_heads*head_dim column (KvCache): K, V, K^T, and
// the pair words of K^T and V (half as many words as values each).
constexpr uint64_t kKvCacheCopies = 4;

// Bytes one forward path holds for a sequence of n tokens of which r are scored: activations of one
// layer (h, xn, q, k, v, attn, o, gate, up, act, down, observed), the KV cache of every layer, the
// logits of every position and the kept log-prob rows (deferred_head: the final hidden rows, and the
// metrics' kHeadRows log-prob rows of it and of the other path), the per-layer hidden states kept
// for the layer metrics, and fp8 GEMM temporaries (codes and a dequantized copy of the largest
// input). `b` is the element size (4 for the emulated paths, 8 for the float64 oracle).
uint64_t path_bytes(const ModelSpec& s, uint64_t n, uint64_t r, uint64_t b, bool deferred_head) {
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
  uint64_t e = sat_mul(n, act_cols);                                    // activations of one layer
  e = sat_add(e, sat_mul(sat_mul(kKvCacheCopies, L), sat_mul(n, kv)));  // KV cache
  if (deferred_head) {
    const uint64_t metric_rows = std::min(r, u(kHeadRows));
    e = sat_add(e, sat_mul(n, H));                        // final hidden rows
    e = sat_add(e, sat_mul(sat_mul(2, metric_rows), V));  // the metrics' log-prob rows
    e = sat_add(e, sat_add(sat_mul(n, std::max({H, I, q})), sat_mul(metric_rows, V)));  // GEMM temporaries
  } else {
    e = sat_add(e, sat_mul(n, V));                       // logits of every position
    e = sat_add(e, sat_mul(r, V));                       // kept log-prob rows
    e = sat_add(e, sat_mul(n, std::max({H, I, q, V})));  // GEMM temporaries
  }
  e = sat_add(e, sat_mul(L, sat_mul(r, H)));  // per-layer hidden states
  return sat_mul(e, b);
}

}  // namespace

CheckpointStorage checkpoint_storage(const Checkpoint& ckpt) {
  CheckpointStorage st;
  std::set<DType> unquantized;
  std::set<const TensorView*> scales;  // fp8 weights' scale tensors, whatever their dtype or name
  for (const auto& [name, t] : ckpt.tensors())
    if (t.scale_inv != nullptr) scales.insert(t.scale_inv);
  for (const auto& [name, t] : ckpt.tensors()) {
    st.mapped_bytes += t.nbytes;
    if (t.dtype != DType::e4m3 && !scales.count(&t)) unquantized.insert(t.dtype);
  }
  if (unquantized == std::set<DType>{DType::bf16}) st.half16 = num::Half16::bf16;
  if (unquantized == std::set<DType>{DType::fp16}) st.half16 = num::Half16::fp16;
  return st;
}

MemoryEstimate estimate_replay_memory(const ReplayPlan& plan, const std::vector<InputSequence>& inputs,
                                      const CheckpointStorage& storage) {
  const ModelSpec& spec = plan.spec;
  const ReplayOptions& opt = plan.options;
  MemoryEstimate est;
  est.mapped_checkpoint = storage.mapped_bytes;
  const ParamCounts pc = count_params(spec);
  const uint64_t threads =
      plan.threads > 0 ? u(plan.threads) : std::max(1u, std::thread::hardware_concurrency());
  const uint64_t L = u(spec.layers);

  // One prepared form's own bytes: 16-bit matrices at 2 B/param (none when they are views of the
  // mapping), fp8 linears at 1 B/param + 4 B per 128x128 block scale, vectors as floats.
  uint64_t largest_fp8_temp = 0;
  auto form_bytes = [&](const PathStyle& s) {
    const bool mapped = storage.half16 && *storage.half16 == s.act;
    const uint64_t half = mapped ? 0 : 2;
    // embedding, lm_head, routers and gates 16-bit; norms and biases as floats.
    uint64_t b = sat_add(sat_mul(4, pc.vectors), sat_mul(half, pc.other - pc.vectors));
    for (int l = 0; l < spec.layers; ++l) {
      const auto li = static_cast<std::size_t>(l);
      if (s.fp8_linear && s.layer_is_fp8(l, spec.layers)) {
        b = sat_add(b, sat_add(pc.linear[li], sat_mul(4, pc.fp8_scales[li])));
        // Each quantizing thread widens one 128-row block row of a linear at a time (quantize.hpp).
        largest_fp8_temp = sat_mul(sat_mul(threads, 128 * 4), pc.widest_linear);
      } else {
        b = sat_add(b, sat_mul(half, pc.linear[li]));
      }
    }
    return b;
  };
  // The forms alive at once: the sampler's while responses are sampled, then along the schedule
  // each form from its first path to its last.
  const bool sampling =
      std::any_of(inputs.begin(), inputs.end(), [](const InputSequence& s) { return !s.has_response; });
  uint64_t peak_forms = sampling ? form_bytes(plan.weight_forms[plan.sampler_form]) : 0;
  const auto& runs = plan.schedule;
  for (std::size_t u0 = 0; u0 < runs.size(); ++u0) {
    std::set<std::size_t> alive;
    for (std::size_t f = 0; f < plan.weight_forms.size(); ++f) {
      bool before = false, after = false;
      for (std::size_t v = 0; v < runs.size(); ++v)
        if (runs[v].form == f) (v <= u0 ? before : after) = true;
      if (before && (after || runs[u0].form == f)) alive.insert(f);
    }
    if (sampling && std::any_of(runs.begin(), runs.end(),
                                [&](const ReplayPlan::PathRun& r) { return r.form == plan.sampler_form; }))
      alive.insert(plan.sampler_form);  // prepared for sampling, kept for its paths
    uint64_t b = 0;
    for (std::size_t f : alive) b = sat_add(b, form_bytes(plan.weight_forms[f]));
    peak_forms = std::max(peak_forms, b);
  }
  est.parts.emplace_back(
      fmt::format("prepared weights: the forms alive at once ({}; fp8 linears at 1 B/param + 4 B per "
                  "128x128 block scale, norms as floats)",
                  storage.half16 ? "16-bit matrices are views of the mapped checkpoint"
                                 : "16-bit matrices at 2 B/param"),
      peak_forms);
  if (largest_fp8_temp)
    est.parts.emplace_back("fp8 quantization temporaries (a 128-row block row as float32 per thread)",
                           largest_fp8_temp);
  if (plan.needs_kv_scales) {
    PathStyle calib = default_training_style();
    est.parts.emplace_back("fp8 KV-scale calibration: its act-dtype form while calibrating",
                           form_bytes(calib));
  }
  // The oracle holds its vectors as doubles; its matrices are widened from the mapping row by row.
  if (opt.oracle)
    est.parts.emplace_back("oracle vectors (norms and biases as float64)", sat_mul(8, pc.vectors));

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
  const uint64_t workers = std::max<uint64_t>(1, std::min<uint64_t>(threads, inputs.size()));
  // The oracle, on the CPU whatever the backend, runs its head over the response rows only.
  const bool cpu_paths = opt.cpu_paths();
  uint64_t per_worker = sat_mul(2, path_bytes(spec, longest, longest_r, 4, cpu_paths));
  if (opt.oracle) per_worker = sat_add(per_worker, path_bytes(spec, longest, longest_r, 8, true));
  est.parts.emplace_back(
      fmt::format("per-worker activations, KV caches and LM-head rows for the longest sequence "
                  "({} tokens) x {} worker(s)",
                  longest, workers),
      sat_mul(workers, per_worker));
  // A block of groups' outputs wait in memory until both paths of their recipe ran
  // (replay_kept_bytes_per_sequence: up to one path's per recipe and the running one's log-prob rows
  // and hidden states, the oracle's hidden states), and a decode step advances a whole group, so all
  // its KV caches are live at once. The group size follows the longest response (replay_group_size);
  // when responses are still to be sampled they may come out shorter and the groups larger, so the
  // bound takes the largest group and the block budget instead.
  bool all_given = true;
  for (const auto& in : inputs) all_given = all_given && in.has_response;
  const std::size_t cap = plan.group_cap(static_cast<std::size_t>(threads));
  const uint64_t group = replay_group_size(spec, inputs.size(), longest_r, cap);
  const uint64_t group_hi =
      all_given ? group : std::min<uint64_t>(cap, std::max<std::size_t>(1, inputs.size()));
  const std::size_t waiting = schedule_waiting_paths(plan.schedule);
  const uint64_t per_seq = replay_kept_bytes_per_sequence(spec, waiting, longest_r, opt.oracle, cpu_paths);
  const uint64_t seqs = std::max<std::size_t>(1, inputs.size());
  const uint64_t groups_per_block =
      plan.blocks_of_one_group()
          ? 1
          : replay_block_groups(spec, waiting, group, longest_r, opt.oracle, cpu_paths);
  const uint64_t block_seqs = std::min(seqs, sat_mul(group, groups_per_block));
  uint64_t kept = sat_mul(block_seqs, per_seq);
  if (!all_given) kept = std::max(kept, std::min(sat_mul(seqs, per_seq), std::max(kBlockKeptBytes, per_seq)));
  const uint64_t kv_width = sat_mul(u(spec.kv_heads), u(spec.head_dim));
  kept = sat_add(
      kept, sat_mul(sat_mul(group_hi, 4), sat_mul(sat_mul(kKvCacheCopies, L), sat_mul(longest, kv_width))));
  est.parts.emplace_back(
      fmt::format("kept outputs of a block of up to {} sequence(s) (the final hidden rows their deferred LM "
                  "heads read, or a backend's log-prob rows, and the hidden states of the paths waiting for "
                  "their recipe's other path; the oracle's hidden states), one group's decode KV caches",
                  block_seqs),
      kept);

  // A layer-wise decode (the CPU paths' default) runs up to kLayerwiseDecodeRows steps' rows of a
  // group through one forward call (at least one row per sequence): that call's activations and
  // logits, beside the group's kept rows.
  const bool layerwise = opt.decode_eval == DecodeEval::layerwise && cpu_paths &&
                         std::any_of(plan.recipes.begin(), plan.recipes.end(),
                                     [](const Recipe& r) { return r.gen.mode == SequenceMode::decode; });
  if (layerwise) {
    const uint64_t rows = std::min(std::max<uint64_t>(u(kLayerwiseDecodeRows), group_hi),
                                   sat_mul(group_hi, std::max<uint64_t>(1, longest_r - 1)));
    est.parts.emplace_back(fmt::format("layer-wise decode: one call of up to {} rows", rows),
                           path_bytes(spec, rows, 0, 4, true));
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
