// read_inputs_jsonl: valid files and every bad-line case, with the line number in the message.
#include "rlparity/replay/inputs.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "rlparity/util/error.hpp"
#include "unit/scratch_test_util.hpp"

namespace rlp {
namespace {

namespace fs = std::filesystem;

class InputsTest : public rlp_test::ScratchDirTest {
 protected:
  // Writes an inputs file and returns its path.
  std::string write_inputs(const std::string& text, const std::string& name = "in.jsonl") {
    return write(name, text);
  }
  // Expects an InputError whose message contains the path and every fragment.
  void expect_error(const std::string& text, std::initializer_list<std::string> fragments, int vocab = 100,
                    int ctx = 16) {
    const std::string path = write_inputs(text);
    try {
      read_inputs_jsonl(path, vocab, ctx);
      ADD_FAILURE() << "no error for:\n" << text;
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      for (const auto& f : fragments)
        EXPECT_NE(msg.find(f), std::string::npos) << "missing '" << f << "' in: " << msg;
    }
  }
};

const std::string kGood = R"({"id": "a", "prompt": [1, 2, 3], "response": [4, 5]})";

TEST_F(InputsTest, ReadsValidFile) {
  const std::string path = write_inputs(
      "{\"id\": \"q1\", \"prompt\": [1, 2], \"response\": [3], \"logprobs\": [-0.5]}\r\n"
      "\n"
      "   \n"
      "{\"id\": 7, \"prompt\": [0, 99]}\n"
      "{\"prompt\": [5], \"id\": -3, \"response\": [6, 7, 8]}");  // no trailing newline
  const auto seqs = read_inputs_jsonl(path, 100, 16);
  ASSERT_EQ(seqs.size(), 3u);
  EXPECT_EQ(seqs[0].id, "q1");
  EXPECT_EQ(seqs[0].prompt, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(seqs[0].response, (std::vector<int32_t>{3}));
  EXPECT_TRUE(seqs[0].has_response);
  EXPECT_EQ(seqs[0].engine_logprobs, (std::vector<double>{-0.5}));
  EXPECT_EQ(seqs[0].line, 1);
  EXPECT_EQ(seqs[1].id, "7");
  EXPECT_FALSE(seqs[1].has_response);
  EXPECT_TRUE(seqs[1].response.empty());
  EXPECT_EQ(seqs[1].line, 4);
  EXPECT_EQ(seqs[2].id, "-3");
  EXPECT_EQ(seqs[2].line, 5);
  EXPECT_EQ(seqs[2].response.size(), 3u);
}

TEST_F(InputsTest, ContextBoundaryIsInclusive) {
  const std::string path = write_inputs(R"({"id": 1, "prompt": [1, 2, 3], "response": [4]})"
                                        "\n");
  EXPECT_EQ(read_inputs_jsonl(path, 100, 4).size(), 1u);
}

TEST_F(InputsTest, MalformedJson) {
  expect_error(kGood + "\n\n{\"id\": \"b\", \"prompt\": [1, 2\n", {"line 3", "malformed JSON"});
  expect_error("[1, 2]\n", {"line 1", "expected a JSON object"});
}

TEST_F(InputsTest, MissingOrEmptyPromptAndId) {
  expect_error(kGood + "\n{\"id\": \"b\"}\n", {"line 2", "missing \"prompt\""});
  expect_error(kGood + "\n{\"id\": \"b\", \"prompt\": []}\n", {"line 2", "\"prompt\" is empty"});
  expect_error("{\"prompt\": [1]}\n", {"line 1", "missing \"id\""});
  expect_error("{\"id\": \"\", \"prompt\": [1]}\n", {"line 1", "empty string"});
  expect_error("{\"id\": 1.5, \"prompt\": [1]}\n", {"line 1", "\"id\" must be a string or an integer"});
  expect_error("{\"id\": \"x\", \"prompt\": \"hello\"}\n", {"line 1", "must be an array"});
  expect_error("{\"id\": \"x\", \"prompt\": [1], \"response\": []}\n", {"line 1", "\"response\" is empty"});
}

TEST_F(InputsTest, NonIntegerAndOutOfVocabIds) {
  expect_error(kGood + "\n{\"id\": \"b\", \"prompt\": [1, 2.5]}\n",
               {"line 2", "\"prompt\"[1]", "not an integer"});
  expect_error(kGood + "\n{\"id\": \"b\", \"prompt\": [1, \"7\"]}\n", {"line 2", "not an integer"});
  expect_error(kGood + "\n{\"id\": \"b\", \"prompt\": [1], \"response\": [true]}\n",
               {"line 2", "\"response\"[0]"});
  expect_error(kGood + "\n{\"id\": \"b\", \"prompt\": [-1]}\n",
               {"line 2", "-1", "outside the vocabulary [0, 100)"});
  expect_error(kGood + "\n{\"id\": \"b\", \"prompt\": [1], \"response\": [2, 100]}\n",
               {"line 2", "\"response\"[1] = 100", "outside the vocabulary"});
  expect_error("{\"id\": \"b\", \"prompt\": [18446744073709551615]}\n", {"line 1", "outside the vocabulary"});
}

TEST_F(InputsTest, TooLongForContext) {
  expect_error(
      kGood + "\n{\"id\": \"b\", \"prompt\": [1,2,3,4,5,6,7,8,9,10], \"response\": [1,2,3,4,5,6,7]}\n",
      {"line 2", "17 tokens exceeds the model context of 16"});
  expect_error("{\"id\": \"b\", \"prompt\": [1,2,3,4,5]}\n", {"line 1", "exceeds the model context of 4"},
               100, 4);
}

TEST_F(InputsTest, LogprobsProblems) {
  expect_error(kGood + "\n{\"id\": \"b\", \"prompt\": [1], \"response\": [2, 3], \"logprobs\": [-1]}\n",
               {"line 2", "\"logprobs\" has 1 values but \"response\" has 2 tokens"});
  expect_error("{\"id\": \"b\", \"prompt\": [1], \"logprobs\": [-1]}\n",
               {"line 1", "without a \"response\""});
  expect_error("{\"id\": \"b\", \"prompt\": [1], \"response\": [2], \"logprobs\": [\"x\"]}\n",
               {"line 1", "not a number"});
}

TEST_F(InputsTest, DuplicateAndUnknownKeys) {
  expect_error(kGood + "\n" + kGood + "\n", {"line 2", "duplicate id \"a\"", "first used on line 1"});
  expect_error("{\"id\": 5, \"prompt\": [1]}\n{\"id\": \"5\", \"prompt\": [1]}\n",
               {"line 2", "duplicate id \"5\""});
  expect_error(kGood + "\n{\"id\": \"b\", \"prompt\": [1], \"tokens\": [1]}\n",
               {"line 2", "unknown key \"tokens\"", "allowed keys: id, prompt, response, logprobs"});
}

TEST_F(InputsTest, EmptyMissingAndDirectory) {
  expect_error("", {"no sequences"});
  expect_error("\n  \n\n", {"no sequences"});
  try {
    read_inputs_jsonl((dir_ / "nope.jsonl").string(), 100, 16);
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("nope.jsonl"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos);
  }
  EXPECT_THROW(read_inputs_jsonl(dir_.string(), 100, 16), InputError);
}

TEST_F(InputsTest, LineOver64MiBIsRejected) {
  std::string big = kGood + "\n{\"id\": \"b\", \"prompt\": [1], \"pad\": \"";
  big.append(kMaxInputLineBytes, 'x');
  big += "\"}\n";
  expect_error(big, {"line 2", "longer than 64 MiB"});
}

}  // namespace
}  // namespace rlp
