// Responses as the generation engines write them (vLLM's OpenAI completions and chat completions
// responses, vLLM's offline RequestOutput dumped to JSON, SGLang's /generate response), turned into
// token ids and the engine's per-token logprobs. Read by `replay --inputs` and by `compare --gen/--train`;
// the field names, and the source files they were read in, are in docs/compare.md.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace rlp {

// How a line of an inputs or dump file is read. `rlparity` is rlparity's own JSONL (and, for
// compare, prime-rl's export keeps its own option).
enum class ResponseFormat { rlparity, vllm_completions, vllm_chat, vllm_offline, sglang };

// "rlparity", "vllm-completions", "vllm-chat", "vllm-offline", "sglang".
const char* response_format_name(ResponseFormat f);
// --inputs-format: "auto" gives nullopt (detect per line); another name its format. InputError
// naming the option and listing the names for anything else.
std::optional<ResponseFormat> parse_response_format(const std::string& name);

// One candidate and its logprob among an engine's top-k at a position.
struct TopLogprob {
  int32_t token = 0;
  double logprob = 0.0;
};

// One sequence of an engine response (a completions or chat response gives one per choice, an
// offline RequestOutput one per output).
struct EngineSequence {
  std::string id;  // "<response id>/<choice index>" (vLLM), meta_info.id (SGLang)
  std::vector<int32_t> prompt, response;
  std::vector<double> logprobs;  // per response token; empty when the response carries none
  // Per response token, the engine's top-k where its token ids are known (empty otherwise).
  std::vector<std::vector<TopLogprob>> top_logprobs;
  // Per prompt token from the second on (the first has none), when the response carries them.
  std::vector<double> prompt_logprobs;
  std::string where;  // "file:line" (and "[i]" for an element of a line holding an array)
};

// The engine that wrote `j`, from its distinctive keys: "choices" (vLLM completions, or chat when
// its "object" is "chat.completion" or a choice has "message"), "outputs" (vLLM offline),
// "meta_info" or "output_ids" (SGLang); nullopt for anything else (rlparity's JSONL).
std::optional<ResponseFormat> detect_response_format(const nlohmann::json& j);

// The sequences of one response object `j` written by engine `f` (not rlparity). Every missing or
// malformed field is an InputError "<where>: <format> response: \"<field path>\" <problem>", e.g.
// "d.jsonl:3: vllm-completions response: \"choices[0].logprobs.token_logprobs[2]\" is null".
// Token ids are checked to be integers in [0, 2^31), logprobs finite numbers <= 1e-6 (vLLM writes
// -inf as -9999.0, SGLang as -999999999.0: both kept as they are).
std::vector<EngineSequence> parse_engine_response(const nlohmann::json& j, ResponseFormat f,
                                                  const std::string& where);

}  // namespace rlp
