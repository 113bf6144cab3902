// Engine responses -> token ids and logprobs. The shapes were read in the engines' sources (cited in
// docs/compare.md):
//   vLLM  vllm/entrypoints/openai/completion/protocol.py (CompletionResponse, CompletionResponseChoice:
//         token_ids, prompt_token_ids, prompt_logprobs; CompletionLogProbs: tokens, token_logprobs,
//         top_logprobs), chat_completion/protocol.py (ChatCompletionResponse.prompt_token_ids,
//         ChatCompletionResponseChoice.token_ids, ChatCompletionLogProbsContent: token, logprob,
//         top_logprobs), serving_completion's _create_completion_logprobs (-inf written as -9999.0,
//         "token_id:N" strings with return_tokens_as_token_ids), vllm/outputs.py (RequestOutput:
//         request_id, prompt_token_ids, prompt_logprobs, outputs; CompletionOutput: index, token_ids,
//         logprobs as a list of {token id: Logprob(logprob, rank, decoded_token)}).
//   SGLang python/sglang/srt/managers/tokenizer_manager.py (meta_info.output_token_logprobs,
//         input_token_logprobs as (logprob, token_id, text-or-None) from detokenize_logprob_tokens;
//         output_top_logprobs per position from detokenize_top_logprobs_tokens).
#include "rlparity/compare/engine_responses.hpp"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <limits>

#include "rlparity/util/error.hpp"

namespace rlp {

namespace {

using nlohmann::json;

constexpr double kMaxLogprob = 1e-6;  // a logprob above this is not one (rounding tolerance)

constexpr std::array<const char*, 5> kNames = {"rlparity", "vllm-completions", "vllm-chat", "vllm-offline",
                                               "sglang"};

// Where a field is, for the messages.
struct Ctx {
  const std::string& where;
  ResponseFormat format;
};

[[noreturn]] void fail(const Ctx& c, const std::string& field, const std::string& problem) {
  RLP_THROW_INPUT("{}: {} response: \"{}\" {}", c.where, response_format_name(c.format), field, problem);
}

std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) {
    s.resize(40);
    s += "...";
  }
  return s;
}

bool present(const json& obj, const char* key) {
  return obj.is_object() && obj.contains(key) && !obj[key].is_null();
}

const json& need(const json& obj, const char* key, const std::string& path, const Ctx& c,
                 const char* hint = "") {
  if (!present(obj, key)) fail(c, path + key, fmt::format("is missing{}", hint));
  return obj[key];
}

const json& need_array(const json& obj, const char* key, const std::string& path, const Ctx& c,
                       const char* hint = "") {
  const json& a = need(obj, key, path, c, hint);
  if (!a.is_array()) fail(c, path + key, fmt::format("must be an array, got {}", a.type_name()));
  return a;
}

int32_t token_id(const json& v, const std::string& field, const Ctx& c) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
      v.get<int64_t>() > std::numeric_limits<int32_t>::max())
    fail(c, field, fmt::format("= {} is not a token id (an integer in [0, 2^31))", shown(v)));
  return static_cast<int32_t>(v.get<int64_t>());
}

std::vector<int32_t> token_ids(const json& a, const std::string& field, const Ctx& c) {
  std::vector<int32_t> out;
  out.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    out.push_back(token_id(a[i], fmt::format("{}[{}]", field, i), c));
  return out;
}

double logprob(const json& v, const std::string& field, const Ctx& c) {
  if (!v.is_number()) fail(c, field, fmt::format("= {} is not a number", shown(v)));
  const double x = v.get<double>();
  if (!std::isfinite(x)) fail(c, field, "is not finite");
  if (x > kMaxLogprob) fail(c, field, fmt::format("= {} is positive (a log-probability is <= 0)", x));
  return x;
}

// vLLM's "token_id:N" (return_tokens_as_token_ids); nullopt for a token written as text.
std::optional<int32_t> token_from_string(const json& v, const std::string& field, const Ctx& c) {
  if (!v.is_string()) fail(c, field, fmt::format("= {} is not a string", shown(v)));
  const std::string s = v.get<std::string>();
  static constexpr std::string_view kPrefix = "token_id:";
  if (s.rfind(kPrefix, 0) != 0) return std::nullopt;
  const std::string digits = s.substr(kPrefix.size());
  if (digits.empty() || digits.size() > 10 || digits.find_first_not_of("0123456789") != std::string::npos ||
      std::stoll(digits) > std::numeric_limits<int32_t>::max())
    fail(c, field, fmt::format("= \"{}\" is not token_id:N with N a token id", s.substr(0, 40)));
  return static_cast<int32_t>(std::stoll(digits));
}

// The response token ids of a vLLM choice: "token_ids" (return_token_ids), else the "token_id:N"
// strings of `tokens` (return_tokens_as_token_ids). `token_at(k)` gives the k-th token string.
template <class TokenAt>
std::vector<int32_t> vllm_response_ids(const json& choice, const std::string& path, std::size_t n_tokens,
                                       TokenAt token_at, const std::string& tokens_field, const char* suffix,
                                       const Ctx& c) {
  if (present(choice, "token_ids"))
    return token_ids(need_array(choice, "token_ids", path, c), path + "token_ids", c);
  if (n_tokens == 0)
    fail(c, path + "token_ids",
         "is missing (request with return_token_ids, or logprobs with return_tokens_as_token_ids)");
  std::vector<int32_t> out;
  for (std::size_t k = 0; k < n_tokens; ++k) {
    const std::string field = fmt::format("{}[{}]{}", tokens_field, k, suffix);
    const auto id = token_from_string(token_at(k), field, c);
    if (!id)
      fail(c, field,
           "is text, not token_id:N, and the choice has no token_ids (request with return_token_ids or "
           "return_tokens_as_token_ids)");
    out.push_back(*id);
  }
  return out;
}

// vLLM's prompt_logprobs: [null, {"<id>": {"logprob": x, ...}}, ...], one per prompt token.
std::vector<double> vllm_prompt_logprobs(const json& owner, const std::string& path,
                                         const std::vector<int32_t>& prompt, const Ctx& c) {
  if (!present(owner, "prompt_logprobs")) return {};
  const json& a = need_array(owner, "prompt_logprobs", path, c);
  const std::string field = path + "prompt_logprobs";
  if (a.size() != prompt.size())
    fail(c, field, fmt::format("has {} entries but the prompt has {} tokens", a.size(), prompt.size()));
  std::vector<double> out;
  for (std::size_t k = 1; k < a.size(); ++k) {
    const std::string key = std::to_string(prompt[k]);
    const std::string f = fmt::format("{}[{}]", field, k);
    if (!a[k].is_object() || !a[k].contains(key))
      fail(c, f, fmt::format("has no entry for prompt token {}", key));
    out.push_back(logprob(need(a[k][key], "logprob", f + "." + key + ".", c), f + "." + key + ".logprob", c));
  }
  return out;
}

// vLLM's {"<id>": {"logprob": x, "rank": r, "decoded_token": s}} of one position (offline outputs).
std::vector<TopLogprob> vllm_logprob_dict(const json& d, const std::string& field, const Ctx& c) {
  if (!d.is_object())
    fail(c, field, fmt::format("must be an object of token id -> Logprob, got {}", d.type_name()));
  std::vector<TopLogprob> out;
  for (const auto& [key, value] : d.items()) {
    const std::string f = field + "." + key;
    if (key.empty() || key.size() > 10 || key.find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(key) > std::numeric_limits<int32_t>::max())
      fail(c, f, "is not keyed by a token id");
    out.push_back({static_cast<int32_t>(std::stoll(key)),
                   logprob(need(value, "logprob", f + ".", c), f + ".logprob", c)});
  }
  return out;
}

void check_response(const EngineSequence& s, const std::string& field, const Ctx& c) {
  if (s.response.empty()) fail(c, field, "is empty (no response token)");
}

// The OpenAI-style response id: a non-empty string.
std::string response_id(const json& j, const Ctx& c) {
  const std::string rid = need(j, "id", "", c).is_string() ? j["id"].get<std::string>() : std::string();
  if (rid.empty()) fail(c, "id", "must be a non-empty string");
  return rid;
}

// One sequence per element of "choices", named "<response id>/<index>"; `fill(choice, prefix, seq)`
// reads the rest of it.
template <class Fill>
std::vector<EngineSequence> per_choice(const json& j, const std::string& rid, const Ctx& c, Fill fill) {
  const json& choices = need_array(j, "choices", "", c);
  if (choices.empty()) fail(c, "choices", "is empty");
  std::vector<EngineSequence> out;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    const json& ch = choices[i];
    const std::string p = fmt::format("choices[{}].", i);
    if (!ch.is_object()) fail(c, fmt::format("choices[{}]", i), "must be an object");
    EngineSequence s;
    s.where = c.where;
    s.id = fmt::format("{}/{}", rid, token_id(need(ch, "index", p, c), p + "index", c));
    fill(ch, p, s);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<EngineSequence> vllm_completions(const json& j, const Ctx& c) {
  return per_choice(j, response_id(j, c), c, [&](const json& ch, const std::string& p, EngineSequence& s) {
    s.prompt = token_ids(need_array(ch, "prompt_token_ids", p, c, " (request with return_token_ids)"),
                         p + "prompt_token_ids", c);
    const json* lp = present(ch, "logprobs") ? &ch["logprobs"] : nullptr;
    if (lp && !lp->is_object()) fail(c, p + "logprobs", "must be an object");
    const json* tokens = lp ? &need_array(*lp, "tokens", p + "logprobs.", c) : nullptr;
    s.response = vllm_response_ids(
        ch, p, tokens ? tokens->size() : 0, [&](std::size_t k) -> const json& { return (*tokens)[k]; },
        p + "logprobs.tokens", "", c);
    check_response(s, p + "token_ids", c);
    if (lp) {
      const std::string lpp = p + "logprobs.";
      const json& tl = need_array(*lp, "token_logprobs", lpp, c);
      if (tl.size() != s.response.size() || tokens->size() != s.response.size())
        fail(c, lpp + "token_logprobs",
             fmt::format("has {} values and tokens {} but the response has {} tokens (echo is not supported)",
                         tl.size(), tokens->size(), s.response.size()));
      for (std::size_t k = 0; k < tl.size(); ++k)
        s.logprobs.push_back(logprob(tl[k], fmt::format("{}token_logprobs[{}]", lpp, k), c));
      if (present(*lp, "top_logprobs")) {
        const json& top = need_array(*lp, "top_logprobs", lpp, c);
        if (top.size() != s.response.size())
          fail(c, lpp + "top_logprobs",
               fmt::format("has {} entries but the response has {} tokens", top.size(), s.response.size()));
        bool ids = true;  // the keys are token_id:N; text keys cannot be mapped to ids
        std::vector<std::vector<TopLogprob>> all;
        for (std::size_t k = 0; k < top.size(); ++k) {
          const std::string f = fmt::format("{}top_logprobs[{}]", lpp, k);
          if (!top[k].is_object()) fail(c, f, "must be an object of token -> logprob");
          std::vector<TopLogprob> pos;
          for (const auto& [key, value] : top[k].items()) {
            const double v = logprob(value, f + "." + key, c);
            const auto id = token_from_string(json(key), f + "." + key, c);
            ids = ids && id.has_value();
            if (id) pos.push_back({*id, v});
          }
          all.push_back(std::move(pos));
        }
        if (ids) s.top_logprobs = std::move(all);
      }
    }
    s.prompt_logprobs = vllm_prompt_logprobs(ch, p, s.prompt, c);
  });
}

std::vector<EngineSequence> vllm_chat(const json& j, const Ctx& c) {
  const std::string rid = response_id(j, c);
  const std::vector<int32_t> prompt = token_ids(
      need_array(j, "prompt_token_ids", "", c, " (request with return_token_ids)"), "prompt_token_ids", c);
  const std::vector<double> prompt_lp = vllm_prompt_logprobs(j, "", prompt, c);
  return per_choice(j, rid, c, [&](const json& ch, const std::string& p, EngineSequence& s) {
    s.prompt = prompt;
    s.prompt_logprobs = prompt_lp;
    const json* content = nullptr;
    if (present(ch, "logprobs")) {
      if (!ch["logprobs"].is_object()) fail(c, p + "logprobs", "must be an object");
      content = &need_array(ch["logprobs"], "content", p + "logprobs.", c);
    }
    const std::string cp = p + "logprobs.content";
    s.response = vllm_response_ids(
        ch, p, content ? content->size() : 0,
        [&](std::size_t k) -> const json& {
          return need((*content)[k], "token", fmt::format("{}[{}].", cp, k), c);
        },
        cp, ".token", c);
    check_response(s, p + "token_ids", c);
    if (content) {
      if (content->size() != s.response.size())
        fail(
            c, cp,
            fmt::format("has {} entries but the response has {} tokens", content->size(), s.response.size()));
      bool ids = true;
      std::vector<std::vector<TopLogprob>> all;
      for (std::size_t k = 0; k < content->size(); ++k) {
        const std::string f = fmt::format("{}[{}].", cp, k);
        const json& e = (*content)[k];
        // Each entry names its token; as token_id:N it must be the token of token_ids.
        const auto named = token_from_string(need(e, "token", f, c), f + "token", c);
        if (named && *named != s.response[k])
          fail(c, f + "token",
               fmt::format("= token_id:{} but the response token is {}", *named, s.response[k]));
        s.logprobs.push_back(logprob(need(e, "logprob", f, c), f + "logprob", c));
        std::vector<TopLogprob> pos;
        if (present(e, "top_logprobs")) {
          const json& top = need_array(e, "top_logprobs", f, c);
          for (std::size_t t = 0; t < top.size(); ++t) {
            const std::string tf = fmt::format("{}top_logprobs[{}].", f, t);
            const double v = logprob(need(top[t], "logprob", tf, c), tf + "logprob", c);
            const auto id = token_from_string(need(top[t], "token", tf, c), tf + "token", c);
            ids = ids && id.has_value();
            if (id) pos.push_back({*id, v});
          }
        }
        all.push_back(std::move(pos));
      }
      if (ids) s.top_logprobs = std::move(all);
    }
  });
}

std::vector<EngineSequence> vllm_offline(const json& j, const Ctx& c) {
  const json& rid_v = need(j, "request_id", "", c);
  if (!rid_v.is_string() || rid_v.get<std::string>().empty())
    fail(c, "request_id", "must be a non-empty string");
  const std::vector<int32_t> prompt =
      token_ids(need_array(j, "prompt_token_ids", "", c), "prompt_token_ids", c);
  const std::vector<double> prompt_lp = vllm_prompt_logprobs(j, "", prompt, c);
  const json& outputs = need_array(j, "outputs", "", c);
  if (outputs.empty()) fail(c, "outputs", "is empty");
  std::vector<EngineSequence> out;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const json& o = outputs[i];
    const std::string p = fmt::format("outputs[{}].", i);
    if (!o.is_object()) fail(c, fmt::format("outputs[{}]", i), "must be an object");
    EngineSequence s;
    s.where = c.where;
    s.id = fmt::format("{}/{}", rid_v.get<std::string>(), token_id(need(o, "index", p, c), p + "index", c));
    s.prompt = prompt;
    s.prompt_logprobs = prompt_lp;
    s.response = token_ids(need_array(o, "token_ids", p, c), p + "token_ids", c);
    check_response(s, p + "token_ids", c);
    if (present(o, "logprobs")) {
      const json& lps = need_array(o, "logprobs", p, c);
      if (lps.size() != s.response.size())
        fail(c, p + "logprobs",
             fmt::format("has {} entries but the response has {} tokens", lps.size(), s.response.size()));
      for (std::size_t k = 0; k < lps.size(); ++k) {
        const std::string f = fmt::format("{}logprobs[{}]", p, k);
        std::vector<TopLogprob> pos = vllm_logprob_dict(lps[k], f, c);
        const TopLogprob* sampled = nullptr;
        for (const auto& t : pos)
          if (t.token == s.response[k]) sampled = &t;
        if (!sampled) fail(c, f, fmt::format("has no entry for the sampled token {}", s.response[k]));
        s.logprobs.push_back(sampled->logprob);
        s.top_logprobs.push_back(std::move(pos));
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

// SGLang's (logprob, token_id, text-or-null) triple; `first_may_be_null`: the first prompt token has
// no logprob (input_token_logprobs[0] is [null, id, text]).
std::pair<double, int32_t> sglang_triple(const json& t, const std::string& field, bool logprob_may_be_null,
                                         const Ctx& c) {
  if (!t.is_array() || t.size() < 2 || t.size() > 3)
    fail(c, field, fmt::format("= {} is not a [logprob, token_id, text-or-null] triple", shown(t)));
  const int32_t id = token_id(t[1], field + "[1]", c);
  if (logprob_may_be_null && t[0].is_null()) return {std::nan(""), id};
  return {logprob(t[0], field + "[0]", c), id};
}

std::vector<EngineSequence> sglang(const json& j, const Ctx& c) {
  const json& meta = need(j, "meta_info", "", c);
  if (!meta.is_object()) fail(c, "meta_info", "must be an object");
  EngineSequence s;
  s.where = c.where;
  const json& id = need(meta, "id", "meta_info.", c);
  if (!id.is_string() || id.get<std::string>().empty()) fail(c, "meta_info.id", "must be a non-empty string");
  s.id = id.get<std::string>();
  s.response = token_ids(need_array(j, "output_ids", "", c), "output_ids", c);
  check_response(s, "output_ids", c);
  const json& in =
      need_array(meta, "input_token_logprobs", "meta_info.", c,
                 " (request with return_logprob and logprob_start_len=0: it carries the prompt's "
                 "token ids)");
  if (present(meta, "prompt_tokens") &&
      (!meta["prompt_tokens"].is_number_integer() ||
       meta["prompt_tokens"].get<int64_t>() != static_cast<int64_t>(in.size())))
    fail(c, "meta_info.input_token_logprobs",
         fmt::format("has {} entries but meta_info.prompt_tokens is {} (request with logprob_start_len=0)",
                     in.size(), shown(meta["prompt_tokens"])));
  for (std::size_t k = 0; k < in.size(); ++k) {
    const auto [lp, tok] =
        sglang_triple(in[k], fmt::format("meta_info.input_token_logprobs[{}]", k), k == 0, c);
    s.prompt.push_back(tok);
    if (k > 0) s.prompt_logprobs.push_back(lp);
  }
  if (present(meta, "output_token_logprobs")) {
    const json& out_lp = need_array(meta, "output_token_logprobs", "meta_info.", c);
    if (out_lp.size() != s.response.size())
      fail(c, "meta_info.output_token_logprobs",
           fmt::format("has {} entries but output_ids has {} tokens", out_lp.size(), s.response.size()));
    for (std::size_t k = 0; k < out_lp.size(); ++k) {
      const std::string f = fmt::format("meta_info.output_token_logprobs[{}]", k);
      const auto [lp, tok] = sglang_triple(out_lp[k], f, false, c);
      if (tok != s.response[k])
        fail(c, f + "[1]", fmt::format("= {} but output_ids[{}] = {}", tok, k, s.response[k]));
      s.logprobs.push_back(lp);
    }
  }
  if (present(meta, "output_top_logprobs")) {
    const json& top = need_array(meta, "output_top_logprobs", "meta_info.", c);
    if (top.size() != s.response.size())
      fail(c, "meta_info.output_top_logprobs",
           fmt::format("has {} entries but output_ids has {} tokens", top.size(), s.response.size()));
    for (std::size_t k = 0; k < top.size(); ++k) {
      const std::string f = fmt::format("meta_info.output_top_logprobs[{}]", k);
      if (!top[k].is_array()) fail(c, f, "must be an array of triples");
      std::vector<TopLogprob> pos;
      for (std::size_t t = 0; t < top[k].size(); ++t) {
        const auto [lp, tok] = sglang_triple(top[k][t], fmt::format("{}[{}]", f, t), false, c);
        pos.push_back({tok, lp});
      }
      s.top_logprobs.push_back(std::move(pos));
    }
  }
  return {std::move(s)};
}

}  // namespace

const char* response_format_name(ResponseFormat f) { return kNames[static_cast<std::size_t>(f)]; }

std::optional<ResponseFormat> parse_response_format(const std::string& name) {
  if (name == "auto") return std::nullopt;
  for (std::size_t i = 0; i < kNames.size(); ++i)
    if (name == kNames[i]) return static_cast<ResponseFormat>(i);
  RLP_THROW_INPUT("--inputs-format '{}': not one of auto, {}", name, fmt::join(kNames, ", "));
}

std::optional<ResponseFormat> detect_response_format(const json& j) {
  if (!j.is_object()) return std::nullopt;
  if (j.contains("choices")) {
    if (j.contains("object") && j["object"] == "chat.completion") return ResponseFormat::vllm_chat;
    if (j["choices"].is_array())
      for (const auto& ch : j["choices"])
        if (ch.is_object() && ch.contains("message")) return ResponseFormat::vllm_chat;
    return ResponseFormat::vllm_completions;
  }
  if (j.contains("outputs")) return ResponseFormat::vllm_offline;
  if (j.contains("meta_info") || j.contains("output_ids")) return ResponseFormat::sglang;
  return std::nullopt;
}

std::vector<EngineSequence> parse_engine_response(const json& j, ResponseFormat f, const std::string& where) {
  const Ctx c{where, f};
  if (!j.is_object())
    RLP_THROW_INPUT("{}: {} response: expected a JSON object, got {}", where,
                    kNames[static_cast<std::size_t>(f)], j.type_name());
  switch (f) {
    case ResponseFormat::vllm_completions: return vllm_completions(j, c);
    case ResponseFormat::vllm_chat: return vllm_chat(j, c);
    case ResponseFormat::vllm_offline: return vllm_offline(j, c);
    case ResponseFormat::sglang: return sglang(j, c);
    case ResponseFormat::rlparity: break;
  }
  RLP_CHECK(false, "parse_engine_response: rlparity's own format is read by its reader");
  return {};
}

}  // namespace rlp
