// Replay inputs: one JSON object per line (JSONL), e.g.
//   {"id": "q1", "prompt": [1, 2, 3], "response": [4, 5], "logprobs": [-0.1, -2.3]}
// "id" (string or integer, required, unique), "prompt" (non-empty array of token ids, required),
// "response" (non-empty array of token ids, optional: absent means "sample one"), "logprobs"
// (optional, a real engine's generation logprob of each response token; needs "response", same
// length). No other keys. Blank lines are skipped.
// A line may instead be an engine's response (vLLM completions/chat/offline, SGLang /generate;
// engine_responses.hpp), or an array of them: each of its sequences becomes one input, its logprobs
// the engine logprobs. The format of each line is detected from its keys unless `format` forces one.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rlparity/compare/engine_responses.hpp"

namespace rlp {

struct InputSequence {
  std::string id;  // integer ids are stored in decimal
  std::vector<int32_t> prompt;
  std::vector<int32_t> response;
  bool has_response = false;            // false: replay samples a response
  std::vector<double> engine_logprobs;  // optional "logprobs", same length as response
  int line = 0;                         // 1-based line number in the file
  // An engine response's top-k per response token (its top_logprobs with token ids), when it has
  // them: same length as response; replay bounds the engine-vs-path KL with them (topk_kl.hpp).
  std::vector<std::vector<TopLogprob>> engine_top;
};

inline constexpr std::size_t kMaxInputLineBytes = std::size_t{64} << 20;  // 64 MiB

// Reads and validates the whole file. Every problem is an rlp::InputError naming the file and the
// 1-based line number: malformed JSON, not an object, unknown key (the message lists the allowed
// keys), missing/empty id or prompt, non-integer token ids, ids outside [0, vocab_size),
// prompt + response longer than max_context, logprobs without response or of a different length,
// a duplicate id (naming the first line), a line over 64 MiB, a missing or malformed field of an
// engine response (naming the field's path); and for the file: missing, unreadable, a directory,
// or holding no sequences.
std::vector<InputSequence> read_inputs_jsonl(const std::string& path, int vocab_size, int max_context,
                                             std::optional<ResponseFormat> format = std::nullopt);

}  // namespace rlp
