// Engine responses (engine_responses.hpp) from samples written by hand after the engines' response
// classes (docs/compare.md cites them): every field read, each field's absence and corruption refused
// with the field's path, detection, and the responses as replay inputs.
#include "rlparity/compare/engine_responses.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "rlparity/replay/inputs.hpp"
#include "rlparity/util/error.hpp"
#include "unit/scratch_test_util.hpp"

namespace rlp {
namespace {

using nlohmann::json;

// vLLM /v1/completions, n=2, logprobs=2, prompt_logprobs=1: choice 0 with return_token_ids (tokens as
// text), choice 1 with return_tokens_as_token_ids only.
const json kCompletions = json::parse(R"({
  "id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
  "choices": [
    {"index": 0, "text": " b c", "finish_reason": "length", "stop_reason": null,
     "logprobs": {"text_offset": [0, 2], "token_logprobs": [-0.25, -1.5], "tokens": [" b", " c"],
                  "top_logprobs": [{" b": -0.25, " x": -2.0}, {" c": -1.5, " y": -1.0}]},
     "token_ids": [11, 12], "prompt_token_ids": [1, 5, 7],
     "prompt_logprobs": [null, {"5": {"logprob": -3.0, "rank": 4, "decoded_token": "a"}},
                         {"7": {"logprob": -0.5, "rank": 1, "decoded_token": "b"},
                          "8": {"logprob": -1.5, "rank": 2, "decoded_token": "q"}}]},
    {"index": 1, "text": "de", "finish_reason": "length",
     "logprobs": {"text_offset": [0, 1], "token_logprobs": [-0.125, -9999.0], "tokens": ["token_id:13", "token_id:14"],
                  "top_logprobs": [{"token_id:13": -0.125, "token_id:20": -2.5}, {"token_id:14": -9999.0}]},
     "prompt_token_ids": [1, 5, 7]}],
  "usage": {"prompt_tokens": 3, "total_tokens": 7, "completion_tokens": 4}})");

// vLLM /v1/chat/completions with logprobs, top_logprobs=2, return_token_ids, return_tokens_as_token_ids.
const json kChat = json::parse(R"({
  "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m", "prompt_token_ids": [1, 2, 3],
  "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop",
    "logprobs": {"content": [
      {"token": "token_id:40", "logprob": -0.5, "bytes": [104],
       "top_logprobs": [{"token": "token_id:40", "logprob": -0.5}, {"token": "token_id:41", "logprob": -1.25}]},
      {"token": "token_id:2", "logprob": -0.125, "bytes": [], "top_logprobs": []}]},
    "token_ids": [40, 2]}],
  "usage": {"prompt_tokens": 3, "total_tokens": 5, "completion_tokens": 2}})");

// vLLM offline LLM.generate(..., SamplingParams(logprobs=1)) RequestOutput, dumped field by field.
const json kOffline = json::parse(R"({
  "request_id": "0", "prompt": "a b", "prompt_token_ids": [1, 4], "prompt_logprobs": null, "finished": true,
  "outputs": [{"index": 0, "text": "c", "token_ids": [9, 2], "cumulative_logprob": -1.0, "finish_reason": "stop",
    "logprobs": [{"9": {"logprob": -0.75, "rank": 1, "decoded_token": "c"},
                  "3": {"logprob": -1.0, "rank": 2, "decoded_token": "d"}},
                 {"2": {"logprob": -0.25, "rank": 1, "decoded_token": "</s>"}}]}]})");

// SGLang /generate with return_logprob, logprob_start_len=0, top_logprobs_num=2.
const json kSglang = json::parse(R"({
  "text": "xy", "output_ids": [30, 31],
  "meta_info": {"id": "rid-1", "prompt_tokens": 3, "completion_tokens": 2,
    "finish_reason": {"type": "length", "length": 2},
    "input_token_logprobs": [[null, 1, null], [-2.5, 8, null], [-0.75, 9, null]],
    "output_token_logprobs": [[-0.5, 30, null], [-1.0, 31, "y"]],
    "output_top_logprobs": [[[-0.5, 30, null], [-1.5, 33, null]], [[-1.0, 31, null]]]}})");

TEST(EngineResponses, EveryFormatReadFieldByField) {
  EXPECT_EQ(detect_response_format(kCompletions), ResponseFormat::vllm_completions);
  EXPECT_EQ(detect_response_format(kChat), ResponseFormat::vllm_chat);
  EXPECT_EQ(detect_response_format(kOffline), ResponseFormat::vllm_offline);
  EXPECT_EQ(detect_response_format(kSglang), ResponseFormat::sglang);
  EXPECT_EQ(detect_response_format(json::parse(R"({"id": 1, "prompt": [1]})")), std::nullopt);

  auto c = parse_engine_response(kCompletions, ResponseFormat::vllm_completions, "f:1");
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].id, "cmpl-1/0");
  EXPECT_EQ(c[0].prompt, (std::vector<int32_t>{1, 5, 7}));
  EXPECT_EQ(c[0].response, (std::vector<int32_t>{11, 12}));
  EXPECT_EQ(c[0].logprobs, (std::vector<double>{-0.25, -1.5}));
  EXPECT_TRUE(c[0].top_logprobs.empty());  // keyed by text: no ids
  EXPECT_EQ(c[0].prompt_logprobs, (std::vector<double>{-3.0, -0.5}));
  EXPECT_EQ(c[1].id, "cmpl-1/1");
  EXPECT_EQ(c[1].response, (std::vector<int32_t>{13, 14}));
  EXPECT_EQ(c[1].logprobs, (std::vector<double>{-0.125, -9999.0}));  // vLLM's -inf, kept
  ASSERT_EQ(c[1].top_logprobs.size(), 2u);
  ASSERT_EQ(c[1].top_logprobs[0].size(), 2u);
  EXPECT_EQ(c[1].top_logprobs[0][1].token, 20);
  EXPECT_EQ(c[1].top_logprobs[0][1].logprob, -2.5);

  auto h = parse_engine_response(kChat, ResponseFormat::vllm_chat, "f:2");
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].id, "chatcmpl-1/0");
  EXPECT_EQ(h[0].prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(h[0].response, (std::vector<int32_t>{40, 2}));
  EXPECT_EQ(h[0].logprobs, (std::vector<double>{-0.5, -0.125}));
  ASSERT_EQ(h[0].top_logprobs.size(), 2u);
  EXPECT_EQ(h[0].top_logprobs[0][1].token, 41);

  auto o = parse_engine_response(kOffline, ResponseFormat::vllm_offline, "f:3");
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o[0].id, "0/0");
  EXPECT_EQ(o[0].prompt, (std::vector<int32_t>{1, 4}));
  EXPECT_EQ(o[0].response, (std::vector<int32_t>{9, 2}));
  EXPECT_EQ(o[0].logprobs, (std::vector<double>{-0.75, -0.25}));  // the sampled token's entry, not rank 1's
  EXPECT_EQ(o[0].top_logprobs[0].size(), 2u);

  auto s = parse_engine_response(kSglang, ResponseFormat::sglang, "f:4");
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].id, "rid-1");
  EXPECT_EQ(s[0].prompt, (std::vector<int32_t>{1, 8, 9}));
  EXPECT_EQ(s[0].response, (std::vector<int32_t>{30, 31}));
  EXPECT_EQ(s[0].logprobs, (std::vector<double>{-0.5, -1.0}));
  EXPECT_EQ(s[0].prompt_logprobs, (std::vector<double>{-2.5, -0.75}));
  EXPECT_EQ(s[0].top_logprobs[0][1].token, 33);
}

struct FieldCase {
  const char* pointer;    // JSON pointer of the field
  const char* path;       // how the message names it
  const char* on_delete;  // fragment of the error when the field is removed; nullptr: optional
};

std::string error_of(const json& j, ResponseFormat f) {
  try {
    (void)parse_engine_response(j, f, "sample.jsonl:7");
  } catch (const InputError& e) {
    return e.what();
  }
  return {};
}

// Each field removed (refused unless optional) and replaced by a value of the wrong type (always
// refused), the message naming the file, the line and the field.
void check_fields(const json& sample, ResponseFormat f, const std::vector<FieldCase>& cases) {
  ASSERT_EQ(error_of(sample, f), "");
  for (const auto& c : cases) {
    const json::json_pointer ptr(c.pointer);
    ASSERT_TRUE(sample.contains(ptr)) << c.pointer;
    json removed = sample;
    removed.at(ptr.parent_pointer()).is_array()
        ? removed.at(ptr.parent_pointer()).erase(std::stoul(ptr.back()))
        : static_cast<void>(removed.at(ptr.parent_pointer()).erase(ptr.back()));
    const std::string del = error_of(removed, f);
    if (c.on_delete) {
      EXPECT_NE(del.find(c.on_delete), std::string::npos) << c.pointer << " removed: '" << del << "'";
      EXPECT_NE(del.find("sample.jsonl:7"), std::string::npos) << del;
    } else {
      EXPECT_EQ(del, "") << c.pointer << " is optional";
    }
    json corrupt = sample;
    corrupt[ptr] = sample[ptr].is_string() ? json(5) : json("x");
    const std::string bad = error_of(corrupt, f);
    EXPECT_NE(bad.find(c.path), std::string::npos) << c.pointer << " corrupted: '" << bad << "'";
    EXPECT_NE(bad.find("sample.jsonl:7"), std::string::npos) << bad;
  }
}

TEST(EngineResponses, VllmCompletionsFieldsAbsentOrCorrupt) {
  check_fields(
      kCompletions, ResponseFormat::vllm_completions,
      {{"/id", "\"id\"", "\"id\" is missing"},
       {"/choices", "\"choices\"", "\"choices\" is missing"},
       {"/choices/0/index", "choices[0].index", "choices[0].index\" is missing"},
       {"/choices/0/prompt_token_ids", "choices[0].prompt_token_ids",
        "choices[0].prompt_token_ids\" is missing (request with return_token_ids)"},
       {"/choices/0/prompt_token_ids/1", "choices[0].prompt_token_ids[1]", "choices[0].prompt_logprobs"},
       {"/choices/0/token_ids", "choices[0].token_ids", "choices[0].logprobs.tokens[0]\" is text"},
       {"/choices/0/token_ids/1", "choices[0].token_ids[1]", "choices[0].logprobs.token_logprobs"},
       {"/choices/0/logprobs", "choices[0].logprobs", nullptr},
       {"/choices/0/logprobs/token_logprobs", "choices[0].logprobs.token_logprobs",
        "token_logprobs\" is missing"},
       {"/choices/0/logprobs/token_logprobs/1", "choices[0].logprobs.token_logprobs[1]",
        "choices[0].logprobs.token_logprobs"},
       {"/choices/0/logprobs/tokens", "choices[0].logprobs.tokens",
        "choices[0].logprobs.tokens\" is missing"},
       {"/choices/0/logprobs/top_logprobs", "choices[0].logprobs.top_logprobs", nullptr},
       {"/choices/0/logprobs/top_logprobs/1", "choices[0].logprobs.top_logprobs[1]",
        "choices[0].logprobs.top_logprobs"},
       {"/choices/0/prompt_logprobs", "choices[0].prompt_logprobs", nullptr},
       {"/choices/0/prompt_logprobs/1/5/logprob", "choices[0].prompt_logprobs[1].5.logprob",
        "choices[0].prompt_logprobs[1].5.logprob\" is missing"},
       {"/choices/1/logprobs/tokens/0", "choices[1].logprobs.tokens[0]",
        "choices[1].logprobs.token_logprobs"},
       {"/choices/1/logprobs/top_logprobs/0/token_id:20", "choices[1].logprobs.top_logprobs[0].token_id:20",
        nullptr}});
  // A positive logprob, a malformed token_id:N and an empty response.
  json j = kCompletions;
  j["choices"][1]["logprobs"]["token_logprobs"][0] = 0.5;
  EXPECT_NE(error_of(j, ResponseFormat::vllm_completions).find("token_logprobs[0]\" = 0.5 is positive"),
            std::string::npos);
  j = kCompletions;
  j["choices"][1]["logprobs"]["tokens"][1] = "token_id:1x";
  EXPECT_NE(error_of(j, ResponseFormat::vllm_completions).find("is not token_id:N"), std::string::npos);
  j = kCompletions;
  j["choices"][0]["token_ids"] = json::array();
  EXPECT_NE(error_of(j, ResponseFormat::vllm_completions).find("is empty"), std::string::npos);
}

TEST(EngineResponses, VllmChatFieldsAbsentOrCorrupt) {
  check_fields(
      kChat, ResponseFormat::vllm_chat,
      {{"/id", "\"id\"", "\"id\" is missing"},
       {"/prompt_token_ids", "\"prompt_token_ids\"", "prompt_token_ids\" is missing (request with"},
       {"/choices/0/index", "choices[0].index", "choices[0].index\" is missing"},
       {"/choices/0/token_ids", "choices[0].token_ids", nullptr},  // token_id:N tokens suffice
       {"/choices/0/logprobs", "choices[0].logprobs", nullptr},
       {"/choices/0/logprobs/content", "choices[0].logprobs.content",
        "choices[0].logprobs.content\" is missing"},
       {"/choices/0/logprobs/content/0/logprob", "choices[0].logprobs.content[0].logprob",
        "choices[0].logprobs.content[0].logprob\" is missing"},
       {"/choices/0/logprobs/content/0/token", "choices[0].logprobs.content[0].token",
        "choices[0].logprobs.content[0].token\" is missing"},
       {"/choices/0/logprobs/content/0/top_logprobs", "choices[0].logprobs.content[0].top_logprobs", nullptr},
       {"/choices/0/logprobs/content/0/top_logprobs/1/logprob",
        "choices[0].logprobs.content[0].top_logprobs[1].logprob", "top_logprobs[1].logprob\" is missing"}});
  // Without token_ids, a token given as text cannot be mapped to an id.
  json j = kChat;
  j["choices"][0].erase("token_ids");
  j["choices"][0]["logprobs"]["content"][1]["token"] = "</s>";
  EXPECT_NE(error_of(j, ResponseFormat::vllm_chat).find("content[1].token\" is text"), std::string::npos);
}

TEST(EngineResponses, VllmOfflineFieldsAbsentOrCorrupt) {
  check_fields(
      kOffline, ResponseFormat::vllm_offline,
      {{"/request_id", "\"request_id\"", "\"request_id\" is missing"},
       {"/prompt_token_ids", "\"prompt_token_ids\"", "\"prompt_token_ids\" is missing"},
       {"/outputs", "\"outputs\"", "\"outputs\" is missing"},
       {"/outputs/0/index", "outputs[0].index", "outputs[0].index\" is missing"},
       {"/outputs/0/token_ids", "outputs[0].token_ids", "outputs[0].token_ids\" is missing"},
       {"/outputs/0/token_ids/0", "outputs[0].token_ids[0]", "outputs[0].logprobs"},
       {"/outputs/0/logprobs", "outputs[0].logprobs", nullptr},
       {"/outputs/0/logprobs/1", "outputs[0].logprobs[1]", "outputs[0].logprobs"},
       {"/outputs/0/logprobs/0/9", "outputs[0].logprobs[0].9", "no entry for the sampled token 9"},
       {"/outputs/0/logprobs/0/3/logprob", "outputs[0].logprobs[0].3.logprob", "3.logprob\" is missing"}});
}

TEST(EngineResponses, SglangFieldsAbsentOrCorrupt) {
  check_fields(kSglang, ResponseFormat::sglang,
               {{"/output_ids", "\"output_ids\"", "\"output_ids\" is missing"},
                {"/output_ids/1", "output_ids[1]", "meta_info.output_token_logprobs"},
                {"/meta_info", "\"meta_info\"", "\"meta_info\" is missing"},
                {"/meta_info/id", "meta_info.id", "meta_info.id\" is missing"},
                {"/meta_info/prompt_tokens", "meta_info.input_token_logprobs", nullptr},
                {"/meta_info/input_token_logprobs", "meta_info.input_token_logprobs",
                 "input_token_logprobs\" is missing (request with return_logprob and logprob_start_len=0"},
                {"/meta_info/input_token_logprobs/1", "meta_info.input_token_logprobs[1]",
                 "meta_info.prompt_tokens is 3"},
                {"/meta_info/input_token_logprobs/1/0", "meta_info.input_token_logprobs[1][0]",
                 "input_token_logprobs[1][1]\" = null"},
                {"/meta_info/output_token_logprobs", "meta_info.output_token_logprobs", nullptr},
                {"/meta_info/output_token_logprobs/0/1", "meta_info.output_token_logprobs[0][1]",
                 "output_token_logprobs[0][1]\" = null"},
                {"/meta_info/output_top_logprobs", "meta_info.output_top_logprobs", nullptr},
                {"/meta_info/output_top_logprobs/0/1", "meta_info.output_top_logprobs[0][1]", nullptr}});
  json j = kSglang;
  j["meta_info"]["output_token_logprobs"][1][1] = 32;  // the triple's id disagrees with output_ids
  EXPECT_NE(
      error_of(j, ResponseFormat::sglang).find("output_token_logprobs[1][1]\" = 32 but output_ids[1] = 31"),
      std::string::npos);
}

class EngineInputs : public rlp_test::ScratchDirTest {};

TEST_F(EngineInputs, ReplayReadsEngineLinesDetectedOrForced) {
  const std::string path =
      write("in.jsonl", kChat.dump() + "\n" + json::array({kSglang, kOffline}).dump() + "\n" +
                            R"({"id": "own", "prompt": [1], "response": [2], "logprobs": [-0.5]})" + "\n");
  const auto seqs = read_inputs_jsonl(path, 100, 16);
  ASSERT_EQ(seqs.size(), 4u);
  EXPECT_EQ(seqs[0].id, "chatcmpl-1/0");
  EXPECT_EQ(seqs[0].engine_logprobs, (std::vector<double>{-0.5, -0.125}));
  EXPECT_TRUE(seqs[0].has_response);
  EXPECT_EQ(seqs[1].id, "rid-1");
  EXPECT_EQ(seqs[1].line, 2);
  EXPECT_EQ(seqs[2].id, "0/0");
  EXPECT_EQ(seqs[3].id, "own");

  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // Out of the vocabulary (33 > 32), over the context, forced to another format, a half-matching line.
  std::string m = message([&] { read_inputs_jsonl(path, 32, 16); });
  EXPECT_NE(
      m.find("line 1: sequence \"chatcmpl-1/0\": response token 0 = 40 is outside the vocabulary [0, 32)"),
      std::string::npos)
      << m;
  m = message([&] { read_inputs_jsonl(path, 100, 4); });
  EXPECT_NE(m.find("exceeds the model context of 4"), std::string::npos) << m;
  m = message([&] { read_inputs_jsonl(path, 100, 16, ResponseFormat::sglang); });
  EXPECT_NE(m.find("line 1: sglang response: \"meta_info\" is missing"), std::string::npos) << m;
  const std::string half = write("half.jsonl", R"({"id": "x", "choices": [{"index": 0, "token_ids": [3]}]})");
  m = message([&] { read_inputs_jsonl(half, 100, 16); });
  EXPECT_NE(
      m.find("half.jsonl', line 1: vllm-completions response: \"choices[0].prompt_token_ids\" is missing"),
      std::string::npos)
      << m;
  m = message([&] { (void)parse_response_format("vllm"); });
  EXPECT_NE(m.find("--inputs-format 'vllm': not one of auto, rlparity, vllm-completions"), std::string::npos)
      << m;
  const std::string dup = write("dup.jsonl", kSglang.dump() + "\n" + kSglang.dump() + "\n");
  m = message([&] { read_inputs_jsonl(dup, 100, 16); });
  EXPECT_NE(m.find("line 2: duplicate id \"rid-1\""), std::string::npos) << m;
}

}  // namespace
}  // namespace rlp
