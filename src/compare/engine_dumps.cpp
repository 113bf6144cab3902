#include "rlparity/compare/engine_dumps.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "rlparity/compare/engine_responses.hpp"
#include "rlparity/metrics/topk_kl.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/json_depth.hpp"
#include "rlparity/util/strings.hpp"
#include "rlparity/util/version.hpp"

namespace rlp::compare {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kMaxLogprob = 1e-6;  // logprobs above this are not logprobs (rounding tolerance)

struct Line {
  json value;
  std::string where;  // "file:line"
};

// std::getline, but refusing a line longer than kMaxDumpLineBytes before buffering more of it.
bool getline_capped(std::istream& in, std::string& text, const std::string& path, int lineno) {
  text.clear();
  char buf[1 << 16];
  bool any = false;
  for (;;) {
    in.getline(buf, sizeof buf);
    const auto got = static_cast<std::size_t>(in.gcount());
    if (in.bad()) return false;
    bool done = true;
    if (in.eof()) {  // last line without '\n' (or nothing left)
      text.append(buf, got);
      any = any || got > 0;
    } else if (in.fail()) {  // buffer full, the line goes on
      in.clear();
      text.append(buf, got);
      any = true;
      done = false;
    } else {  // got counts the extracted '\n'
      text.append(buf, got - 1);
      any = true;
    }
    if (text.size() > kMaxDumpLineBytes)
      RLP_THROW_INPUT("{}:{}: line is longer than {} MiB", path, lineno, kMaxDumpLineBytes >> 20);
    if (done) return any;
  }
}

// Reads a JSONL file: one object per non-blank line (or, with `arrays`, an array of objects: engine
// responses of a batch).
std::vector<Line> read_jsonl(const std::string& path, bool arrays = false) {
  std::error_code ec;
  if (!fs::exists(path, ec)) RLP_THROW_INPUT("dump file '{}' does not exist", path);
  if (fs::is_directory(path, ec)) RLP_THROW_INPUT("dump file '{}' is a directory", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) RLP_THROW_INPUT("cannot read dump file '{}'", path);
  std::vector<Line> out;
  std::string text;
  int lineno = 0;
  while (getline_capped(in, text, path, lineno + 1)) {
    ++lineno;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    Line l;
    l.where = path + ":" + std::to_string(lineno);
    check_json_depth(text, l.where);
    try {
      l.value = json::parse(text);
    } catch (const json::exception& e) {
      RLP_THROW_INPUT("{}: not valid JSON: {}", l.where, e.what());
    }
    if (arrays && l.value.is_array()) {
      for (std::size_t i = 0; i < l.value.size(); ++i) {
        if (!l.value[i].is_object()) RLP_THROW_INPUT("{} [{}]: expected a JSON object", l.where, i);
        out.push_back({std::move(l.value[i]), fmt::format("{} [{}]", l.where, i)});
      }
      continue;
    }
    if (!l.value.is_object()) RLP_THROW_INPUT("{}: expected a JSON object", l.where);
    out.push_back(std::move(l));
  }
  if (in.bad()) RLP_THROW_INPUT("error reading dump file '{}'", path);
  if (out.empty()) RLP_THROW_INPUT("dump file '{}' holds no sequences", path);
  return out;
}

std::string get_id(const json& j, const std::string& where) {
  if (!j.contains("id")) RLP_THROW_INPUT("{}: missing \"id\"", where);
  const json& v = j["id"];
  if (v.is_string()) {
    if (v.get<std::string>().empty()) RLP_THROW_INPUT("{}: \"id\" is empty", where);
    return v.get<std::string>();
  }
  if (v.is_number_integer()) return v.dump();
  RLP_THROW_INPUT("{}: \"id\" must be a string or an integer", where);
}

std::vector<int32_t> get_tokens(const json& j, const char* key, const std::string& where,
                                const std::string& id, bool required) {
  std::vector<int32_t> out;
  if (!j.contains(key) || j[key].is_null()) {
    if (required) RLP_THROW_INPUT("{}: sequence '{}': missing \"{}\"", where, id, key);
    return out;
  }
  const json& a = j[key];
  if (!a.is_array())
    RLP_THROW_INPUT("{}: sequence '{}': \"{}\" must be an array of token ids", where, id, key);
  for (std::size_t i = 0; i < a.size(); ++i) {
    const json& t = a[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() > std::numeric_limits<int32_t>::max())
      RLP_THROW_INPUT("{}: sequence '{}': \"{}\"[{}] = {} is not a token id (an integer in [0, 2^31))", where,
                      id, key, i, t.dump());
    out.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return out;
}

// One logprob value: finite and <= 1e-6.
double check_logprob(const json& t, const char* key, std::size_t i, const std::string& where,
                     const std::string& id) {
  if (!t.is_number())
    RLP_THROW_INPUT("{}: sequence '{}': \"{}\"[{}] = {} is not a finite number", where, id, key, i, t.dump());
  const double v = t.get<double>();
  if (!std::isfinite(v)) RLP_THROW_INPUT("{}: sequence '{}': \"{}\"[{}] is not finite", where, id, key, i);
  if (v > kMaxLogprob)
    RLP_THROW_INPUT("{}: sequence '{}': \"{}\"[{}] = {} is positive (a log-probability must be <= 0)", where,
                    id, key, i, v);
  return v;
}

std::vector<double> get_logprobs(const json& j, const char* key, const std::string& where,
                                 const std::string& id, std::size_t expected) {
  if (!j.contains(key)) RLP_THROW_INPUT("{}: sequence '{}': missing \"{}\"", where, id, key);
  const json& a = j[key];
  if (!a.is_array()) RLP_THROW_INPUT("{}: sequence '{}': \"{}\" must be an array of numbers", where, id, key);
  if (a.size() != expected)
    RLP_THROW_INPUT("{}: sequence '{}': \"{}\" has {} values but the response has {} tokens", where, id, key,
                    a.size(), expected);
  std::vector<double> out;
  out.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out.push_back(check_logprob(a[i], key, i, where, id));
  return out;
}

void check_unique(std::map<std::string, std::string>& seen, const std::string& id, const std::string& where) {
  auto [it, fresh] = seen.emplace(id, where);
  if (!fresh) RLP_THROW_INPUT("{}: duplicate sequence id '{}' (first at {})", where, id, it->second);
}

struct SideLine {
  std::string id, where;
  std::vector<int32_t> prompt, response;
  std::vector<double> logprobs;
  std::vector<std::vector<TopLogprob>> top;  // an engine response's top-k per response token, or empty
};

// The fields every dump line has: where it came from, a unique id, the prompt and a non-empty
// response (DumpSequence and SideLine both carry them).
template <class Seq>
void read_sequence_fields(const Line& l, std::map<std::string, std::string>& seen, Seq& s) {
  s.where = l.where;
  s.id = get_id(l.value, l.where);
  check_unique(seen, s.id, l.where);
  s.prompt = get_tokens(l.value, "prompt", l.where, s.id, false);
  s.response = get_tokens(l.value, "response", l.where, s.id, true);
  if (s.response.empty()) RLP_THROW_INPUT("{}: sequence '{}': \"response\" is empty", l.where, s.id);
}

// One side: rlparity's lines {"id", "prompt", "response", "logprobs"}, or engine responses
// (engine_responses.hpp) whose logprobs are that side's.
std::vector<SideLine> read_side(const std::string& path, std::optional<ResponseFormat> format) {
  std::vector<SideLine> out;
  std::map<std::string, std::string> seen;
  for (const auto& l : read_jsonl(path, format != ResponseFormat::rlparity)) {
    const ResponseFormat f =
        format.value_or(detect_response_format(l.value).value_or(ResponseFormat::rlparity));
    if (f != ResponseFormat::rlparity) {
      for (EngineSequence& e : parse_engine_response(l.value, f, l.where)) {
        if (e.logprobs.empty())
          RLP_THROW_INPUT("{}: sequence '{}': the {} response carries no logprobs (request with logprobs)",
                          l.where, e.id, response_format_name(f));
        check_unique(seen, e.id, l.where);
        if (!e.top_logprobs.empty() && e.top_logprobs.size() != e.response.size())
          RLP_THROW_INPUT("{}: sequence '{}': top_logprobs cover {} of the {} response tokens", l.where, e.id,
                          e.top_logprobs.size(), e.response.size());
        out.push_back({std::move(e.id), l.where, std::move(e.prompt), std::move(e.response),
                       std::move(e.logprobs), std::move(e.top_logprobs)});
      }
      continue;
    }
    SideLine s;
    read_sequence_fields(l, seen, s);
    s.logprobs = get_logprobs(l.value, "logprobs", l.where, s.id, s.response.size());
    out.push_back(std::move(s));
  }
  return out;
}

// Numeric suffix of names like step_12 / rank_3 (-1 when it does not match).
long long numeric_suffix(const std::string& name, const std::string& prefix, const std::string& suffix) {
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 15 || !std::all_of(digits.begin(), digits.end(), ::isdigit))
    return -1;
  return std::stoll(digits);
}

std::vector<fs::path> numbered_entries(const fs::path& dir, const std::string& prefix,
                                       const std::string& suffix, bool directories) {
  std::vector<std::pair<long long, fs::path>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (directories ? !e.is_directory() : !e.is_regular_file()) continue;
    const long long n = numeric_suffix(e.path().filename().string(), prefix, suffix);
    if (n >= 0) found.emplace_back(n, e.path());
  }
  if (ec) RLP_THROW_INPUT("cannot list directory '{}': {}", dir.string(), ec.message());
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& [n, p] : found) out.push_back(p);
  return out;
}

std::string json_scalar_text(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return "?";
  return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
}

}  // namespace

std::vector<DumpSequence> read_combined_dump(const std::string& path) {
  std::vector<DumpSequence> out;
  std::map<std::string, std::string> seen;
  for (const auto& l : read_jsonl(path)) {
    DumpSequence d;
    read_sequence_fields(l, seen, d);
    d.gen_logprobs = get_logprobs(l.value, "gen_logprobs", l.where, d.id, d.response.size());
    d.train_logprobs = get_logprobs(l.value, "train_logprobs", l.where, d.id, d.response.size());
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<DumpSequence> read_split_dumps(const std::string& gen_path, const std::string& train_path,
                                           std::optional<ResponseFormat> format) {
  const std::vector<SideLine> gen = read_side(gen_path, format);
  const std::vector<SideLine> train = read_side(train_path, format);
  std::map<std::string, const SideLine*> by_id;
  for (const auto& t : train) by_id[t.id] = &t;
  std::vector<DumpSequence> out;
  for (const auto& g : gen) {
    auto it = by_id.find(g.id);
    if (it == by_id.end())
      RLP_THROW_INPUT("{}: sequence '{}' has no line in the training file '{}'", g.where, g.id, train_path);
    const SideLine& t = *it->second;
    if (g.prompt != t.prompt)
      RLP_THROW_INPUT("sequence '{}': the prompt differs between {} and {}", g.id, g.where, t.where);
    if (g.response.size() != t.response.size())
      RLP_THROW_INPUT("sequence '{}': the response has {} tokens at {} but {} at {}", g.id, g.response.size(),
                      g.where, t.response.size(), t.where);
    if (g.response != t.response)
      RLP_THROW_INPUT("sequence '{}': the response token ids differ between {} and {}", g.id, g.where,
                      t.where);
    DumpSequence d;
    d.id = g.id;
    d.where = g.where + " + " + t.where;
    d.prompt = g.prompt;
    d.response = g.response;
    d.gen_logprobs = g.logprobs;
    d.train_logprobs = t.logprobs;
    if (!g.top.empty() && !t.top.empty()) {
      d.gen_top = g.top;
      d.train_top = t.top;
    }
    out.push_back(std::move(d));
    by_id.erase(it);
  }
  if (!by_id.empty()) {
    const SideLine& t = *by_id.begin()->second;  // report the first by id
    RLP_THROW_INPUT("{}: sequence '{}' has no line in the generation file '{}' ({} training-only id(s))",
                    t.where, t.id, gen_path, by_id.size());
  }
  return out;
}

std::vector<DumpSequence> read_prime_rl_exports(const std::string& dir, std::size_t* dropped,
                                                std::vector<std::string>* files_out) {
  std::error_code ec;
  fs::path root(dir);
  if (!fs::is_directory(root, ec)) RLP_THROW_INPUT("--prime-rl: '{}' is not a directory", dir);
  if (fs::is_directory(root / "token_exports", ec)) root /= "token_exports";
  std::vector<fs::path> files = numbered_entries(root, "rank_", ".jsonl", false);
  if (files.empty())
    for (const auto& step : numbered_entries(root, "step_", "", true))
      for (auto& f : numbered_entries(step, "rank_", ".jsonl", false)) files.push_back(f);
  if (files.empty())
    RLP_THROW_INPUT("--prime-rl: no token_exports/step_N/rank_R.jsonl files under '{}'", dir);

  std::vector<DumpSequence> out;
  std::map<std::string, std::string> seen;
  std::size_t drop = 0;
  for (const auto& f : files) {
    if (files_out) files_out->push_back(f.string());
    for (const auto& l : read_jsonl(f.string())) {
      const json& j = l.value;
      std::string id;
      if (j.contains("run_id") && j["run_id"].is_string()) id = j["run_id"].get<std::string>() + "/";
      id += "step_" + json_scalar_text(j, j.contains("export_step") ? "export_step" : "step") + "/rank_" +
            json_scalar_text(j, "rank") + "/" + json_scalar_text(j, "export_sequence_idx");
      check_unique(seen, id, l.where);
      const std::vector<int32_t> tokens = get_tokens(j, "token_ids", l.where, id, true);
      if (!j.contains("loss_mask") || !j["loss_mask"].is_array())
        RLP_THROW_INPUT("{}: sequence '{}': missing \"loss_mask\" (an array of booleans)", l.where, id);
      const json& mask = j["loss_mask"];
      for (const char* key : {"inference_logprobs", "trainer_logprobs"}) {
        if (!j.contains(key) || !j[key].is_array())
          RLP_THROW_INPUT("{}: sequence '{}': missing \"{}\" (an array)", l.where, id, key);
        if (j[key].size() != tokens.size())
          RLP_THROW_INPUT("{}: sequence '{}': \"{}\" has {} values but \"token_ids\" has {}", l.where, id,
                          key, j[key].size(), tokens.size());
      }
      if (mask.size() != tokens.size())
        RLP_THROW_INPUT("{}: sequence '{}': \"loss_mask\" has {} values but \"token_ids\" has {}", l.where,
                        id, mask.size(), tokens.size());
      DumpSequence d;
      d.id = id;
      d.where = l.where;
      bool in_response = false;
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (!mask[i].is_boolean())
          RLP_THROW_INPUT("{}: sequence '{}': \"loss_mask\"[{}] is not a boolean", l.where, id, i);
        if (mask[i].get<bool>()) {
          in_response = true;
          d.response.push_back(tokens[i]);
          d.gen_logprobs.push_back(
              check_logprob(j["inference_logprobs"][i], "inference_logprobs", i, l.where, id));
          d.train_logprobs.push_back(
              check_logprob(j["trainer_logprobs"][i], "trainer_logprobs", i, l.where, id));
        } else if (!in_response) {
          d.prompt.push_back(tokens[i]);
        } else {
          ++drop;
        }
      }
      if (d.response.empty())
        RLP_THROW_INPUT("{}: sequence '{}': no loss_mask position is true", l.where, id);
      out.push_back(std::move(d));
    }
  }
  if (dropped) *dropped = drop;
  return out;
}

RunData build_compare_run(const std::vector<DumpSequence>& seqs, const std::string& name, const json& source,
                          const StatsOptions& stats) {
  if (seqs.empty()) RLP_THROW_INPUT("no sequences to compare");
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos)
    RLP_THROW_INPUT("--name '{}': not a valid recipe name (empty, '.', '..', or contains '/')", name);
  RunData run;
  run.tool_version = version();
  run.created = utc_now();
  run.model_spec = json::object();
  run.extra = json::object();
  run.extra["source"] = source;
  run.extra["kl_estimators"] = kKlEstimatorNote;
  RecipeResult r;
  r.name = name;
  r.settings = {{"kind", "compare"},
                {"source", source.is_object() && source.contains("format") ? source["format"] : json("dump")},
                {"kl_estimators", kKlEstimatorNote}};
  auto& lg = r.tokens["logp_gen"];
  auto& lt = r.tokens["logp_train"];
  // When both sides gave their top-k: the lower bound on the full-vocabulary KL(gen || train)
  // (topk_kl.hpp; no upper bound exists between two top-k lists), NaN where either lacks one.
  const bool tops =
      std::any_of(seqs.begin(), seqs.end(), [](const DumpSequence& s) { return !s.gen_top.empty(); });
  std::vector<double> kl_lower;
  run.seq_offsets.push_back(0);
  for (const auto& s : seqs) {
    if (s.response.size() != s.gen_logprobs.size() || s.response.size() != s.train_logprobs.size())
      RLP_THROW_INPUT("{}: sequence '{}': {} response tokens, {} generation and {} training logprobs",
                      s.where, s.id, s.response.size(), s.gen_logprobs.size(), s.train_logprobs.size());
    run.token_ids.insert(run.token_ids.end(), s.prompt.begin(), s.prompt.end());
    run.token_ids.insert(run.token_ids.end(), s.response.begin(), s.response.end());
    run.seq_offsets.push_back(static_cast<int64_t>(run.token_ids.size()));
    run.prompt_lengths.push_back(static_cast<int32_t>(s.prompt.size()));
    run.seq_ids.push_back(s.id);
    lg.insert(lg.end(), s.gen_logprobs.begin(), s.gen_logprobs.end());
    lt.insert(lt.end(), s.train_logprobs.begin(), s.train_logprobs.end());
    for (std::size_t j = 0; tops && j < s.response.size(); ++j) {
      if (s.gen_top.empty() || s.gen_top[j].empty() || s.train_top[j].empty()) {
        kl_lower.push_back(std::nan(""));
        continue;
      }
      std::vector<int32_t> pid, qid;
      std::vector<double> plp, qlp;
      for (const auto& x : s.gen_top[j]) {
        pid.push_back(x.token);
        plp.push_back(x.logprob);
      }
      for (const auto& x : s.train_top[j]) {
        qid.push_back(x.token);
        qlp.push_back(x.logprob);
      }
      kl_lower.push_back(
          topk_kl_lower(pid.data(), plp.data(), pid.size(), qid.data(), qlp.data(), qid.size()));
    }
  }
  if (tops) r.tokens["kl_topk_lower"] = std::move(kl_lower);
  compute_recipe_statistics(r, response_offsets(run.seq_offsets, run.prompt_lengths), stats);
  run.recipes.push_back(std::move(r));
  return run;
}

}  // namespace rlp::compare
