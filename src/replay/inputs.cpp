#include "rlparity/replay/inputs.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "rlparity/compare/engine_responses.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/json_depth.hpp"

namespace rlp {

namespace {

using nlohmann::json;

constexpr const char* kAllowedKeys = "id, prompt, response, logprobs";

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

struct LineCtx {
  const std::string& path;
  int line;
};

#define RLP_INPUT_FAIL(ctx, ...) \
  RLP_THROW_INPUT("inputs file '{}', line {}: {}", (ctx).path, (ctx).line, ::fmt::format(__VA_ARGS__))

std::vector<int32_t> token_array(const json& v, const char* key, int vocab, const LineCtx& ctx) {
  if (!v.is_array()) RLP_INPUT_FAIL(ctx, "\"{}\" must be an array of token ids, got {}", key, v.type_name());
  std::vector<int32_t> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const json& e = v[i];
    int64_t id = 0;
    if (e.is_number_unsigned()) {
      const uint64_t u = e.get<uint64_t>();
      id = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
               ? std::numeric_limits<int64_t>::max()
               : static_cast<int64_t>(u);
    } else if (e.is_number_integer()) {
      id = e.get<int64_t>();
    } else {
      RLP_INPUT_FAIL(ctx, "\"{}\"[{}] is not an integer token id (got {} {})", key, i, e.type_name(),
                     e.dump());
    }
    if (id < 0 || id >= vocab)
      RLP_INPUT_FAIL(ctx, "\"{}\"[{}] = {} is outside the vocabulary [0, {})", key, i, id, vocab);
    out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

void check_context(const InputSequence& seq, int max_context, const LineCtx& ctx) {
  const std::size_t total = seq.prompt.size() + seq.response.size();
  if (total > static_cast<std::size_t>(max_context))
    RLP_INPUT_FAIL(ctx,
                   "sequence \"{}\": prompt ({}) + response ({}) = {} tokens exceeds the model context of {}",
                   seq.id, seq.prompt.size(), seq.response.size(), total, max_context);
}

// rlparity's own line: {"id", "prompt", "response"?, "logprobs"?}.
InputSequence parse_rlparity(const json& j, int vocab, int max_context, const LineCtx& ctx) {
  for (const auto& [key, value] : j.items()) {
    (void)value;
    if (key != "id" && key != "prompt" && key != "response" && key != "logprobs")
      RLP_INPUT_FAIL(ctx, "unknown key \"{}\" (allowed keys: {})", key, kAllowedKeys);
  }
  InputSequence seq;
  seq.line = ctx.line;
  auto id_it = j.find("id");
  if (id_it == j.end()) RLP_INPUT_FAIL(ctx, "missing \"id\" (a string or an integer)");
  if (id_it->is_string()) {
    seq.id = id_it->get<std::string>();
    if (seq.id.empty()) RLP_INPUT_FAIL(ctx, "\"id\" is an empty string");
    if (seq.id.find('\0') != std::string::npos) RLP_INPUT_FAIL(ctx, "\"id\" contains a NUL character");
  } else if (id_it->is_number_integer()) {
    seq.id = id_it->dump();  // decimal, signed or unsigned
  } else {
    RLP_INPUT_FAIL(ctx, "\"id\" must be a string or an integer, got {} {}", id_it->type_name(),
                   id_it->dump());
  }
  auto p_it = j.find("prompt");
  if (p_it == j.end()) RLP_INPUT_FAIL(ctx, "missing \"prompt\" (an array of token ids)");
  seq.prompt = token_array(*p_it, "prompt", vocab, ctx);
  if (seq.prompt.empty()) RLP_INPUT_FAIL(ctx, "\"prompt\" is empty");
  auto r_it = j.find("response");
  if (r_it != j.end()) {
    seq.response = token_array(*r_it, "response", vocab, ctx);
    if (seq.response.empty())
      RLP_INPUT_FAIL(ctx, "\"response\" is empty (omit the key to have a response sampled)");
    seq.has_response = true;
  }
  check_context(seq, max_context, ctx);
  auto l_it = j.find("logprobs");
  if (l_it != j.end()) {
    if (!seq.has_response) RLP_INPUT_FAIL(ctx, "\"logprobs\" given without a \"response\"");
    if (!l_it->is_array())
      RLP_INPUT_FAIL(ctx, "\"logprobs\" must be an array of numbers, got {}", l_it->type_name());
    if (l_it->size() != seq.response.size())
      RLP_INPUT_FAIL(ctx, "\"logprobs\" has {} values but \"response\" has {} tokens", l_it->size(),
                     seq.response.size());
    seq.engine_logprobs.reserve(l_it->size());
    for (std::size_t i = 0; i < l_it->size(); ++i) {
      const json& e = (*l_it)[i];
      if (!e.is_number()) RLP_INPUT_FAIL(ctx, "\"logprobs\"[{}] is not a number (got {})", i, e.type_name());
      seq.engine_logprobs.push_back(e.get<double>());
    }
  }
  return seq;
}

// The sequences of one engine response (engine_responses.hpp), checked against the vocabulary and
// the context like rlparity's lines.
std::vector<InputSequence> engine_sequences(const json& j, ResponseFormat f, const std::string& where,
                                            int vocab, int max_context, const LineCtx& ctx) {
  std::vector<InputSequence> out;
  for (EngineSequence& e : parse_engine_response(j, f, where)) {
    InputSequence seq;
    seq.id = std::move(e.id);
    seq.line = ctx.line;
    for (const auto* ids : {&e.prompt, &e.response})
      for (std::size_t i = 0; i < ids->size(); ++i)
        if ((*ids)[i] >= vocab)
          RLP_THROW_INPUT("{}: sequence \"{}\": {} token {} = {} is outside the vocabulary [0, {})", where,
                          seq.id, ids == &e.prompt ? "prompt" : "response", i, (*ids)[i], vocab);
    if (e.prompt.empty()) RLP_THROW_INPUT("{}: sequence \"{}\": the prompt is empty", where, seq.id);
    seq.prompt = std::move(e.prompt);
    seq.response = std::move(e.response);
    seq.has_response = true;
    seq.engine_logprobs = std::move(e.logprobs);
    if (!e.top_logprobs.empty()) {
      if (e.top_logprobs.size() != seq.response.size())
        RLP_THROW_INPUT("{}: sequence \"{}\": top_logprobs cover {} of the {} response tokens", where, seq.id,
                        e.top_logprobs.size(), seq.response.size());
      for (std::size_t t = 0; t < e.top_logprobs.size(); ++t) {
        std::vector<int32_t> seen;
        for (const TopLogprob& x : e.top_logprobs[t]) {
          if (x.token < 0 || x.token >= vocab)
            RLP_THROW_INPUT(
                "{}: sequence \"{}\": top_logprobs of response token {}: token {} is outside the "
                "vocabulary [0, {})",
                where, seq.id, t, x.token, vocab);
          if (std::find(seen.begin(), seen.end(), x.token) != seen.end())
            RLP_THROW_INPUT("{}: sequence \"{}\": top_logprobs of response token {} list token {} twice",
                            where, seq.id, t, x.token);
          if (!(x.logprob <= 0.0))
            RLP_THROW_INPUT(
                "{}: sequence \"{}\": top_logprobs of response token {}: logprob {} of token {} is "
                "not <= 0",
                where, seq.id, t, x.logprob, x.token);
          seen.push_back(x.token);
        }
      }
      seq.engine_top = std::move(e.top_logprobs);
    }
    check_context(seq, max_context, ctx);
    out.push_back(std::move(seq));
  }
  return out;
}

// One line: rlparity's object, an engine's response object, or (engine formats only) an array of
// responses. `forced`: --inputs-format; nullopt detects each object's format from its keys.
std::vector<InputSequence> parse_line(const std::string& text, int vocab, int max_context, const LineCtx& ctx,
                                      std::optional<ResponseFormat> forced) {
  if (json_nesting_depth(text) > kMaxJsonDepth)
    RLP_INPUT_FAIL(ctx, "JSON is nested deeper than {} levels", kMaxJsonDepth);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers like 1e400
    RLP_INPUT_FAIL(ctx, "malformed JSON: {}", e.what());
  }
  const std::string where = fmt::format("inputs file '{}', line {}", ctx.path, ctx.line);
  if (j.is_array() && forced != ResponseFormat::rlparity) {
    std::vector<InputSequence> out;
    for (std::size_t i = 0; i < j.size(); ++i) {
      const std::string at = fmt::format("{} [{}]", where, i);
      const auto f = forced ? forced : detect_response_format(j[i]);
      if (!f)
        RLP_THROW_INPUT(
            "{}: expected a JSON object that is a response of an engine format (vllm-completions, vllm-chat, "
            "vllm-offline, sglang), got {}",
            at, j[i].is_object() ? "an object of none" : j[i].type_name());
      for (auto& s : engine_sequences(j[i], *f, at, vocab, max_context, ctx)) out.push_back(std::move(s));
    }
    return out;
  }
  if (!j.is_object()) RLP_INPUT_FAIL(ctx, "expected a JSON object, got {}", j.type_name());
  const ResponseFormat f = forced.value_or(detect_response_format(j).value_or(ResponseFormat::rlparity));
  if (f == ResponseFormat::rlparity) return {parse_rlparity(j, vocab, max_context, ctx)};
  return engine_sequences(j, f, where, vocab, max_context, ctx);
}

bool is_blank(const std::string& s) {
  for (char c : s)
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n' && c != '\f' && c != '\v') return false;
  return true;
}

}  // namespace

std::vector<InputSequence> read_inputs_jsonl(const std::string& path, int vocab_size, int max_context,
                                             std::optional<ResponseFormat> format) {
  RLP_CHECK(vocab_size > 0 && max_context > 0,
            "read_inputs_jsonl: vocab_size {} and max_context {} must be > 0", vocab_size, max_context);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) RLP_THROW_INPUT("inputs file '{}' is a directory", path);
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) RLP_THROW_INPUT("cannot open inputs file '{}': {}", path, std::strerror(errno));

  std::vector<InputSequence> out;
  std::unordered_map<std::string, int> seen;  // id -> line
  std::string cur;
  int line_no = 0;
  auto finish_line = [&]() {
    ++line_no;
    if (!is_blank(cur)) {
      LineCtx ctx{path, line_no};
      for (InputSequence& seq : parse_line(cur, vocab_size, max_context, ctx, format)) {
        auto [it, inserted] = seen.emplace(seq.id, line_no);
        if (!inserted) RLP_INPUT_FAIL(ctx, "duplicate id \"{}\" (first used on line {})", seq.id, it->second);
        out.push_back(std::move(seq));
      }
    }
    cur.clear();
  };
  std::vector<char> buf(std::size_t{1} << 20);
  for (;;) {
    const ssize_t got = ::read(fd.get(), buf.data(), buf.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      RLP_THROW_INPUT("cannot read inputs file '{}' (after line {}): {}", path, line_no,
                      std::strerror(errno));
    }
    if (got == 0) break;
    const char* p = buf.data();
    const char* end = p + got;
    while (p < end) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)));
      const char* stop = nl ? nl : end;
      cur.append(p, stop);
      if (cur.size() > kMaxInputLineBytes)
        RLP_THROW_INPUT("inputs file '{}', line {}: line is longer than {} MiB", path, line_no + 1,
                        kMaxInputLineBytes >> 20);
      if (!nl) break;
      finish_line();
      p = nl + 1;
    }
  }
  if (!cur.empty()) finish_line();
  if (out.empty())
    RLP_THROW_INPUT("inputs file '{}' holds no sequences (it is empty or only blank lines)", path);
  return out;
}

}  // namespace rlp
