// Token ids to text (issue 17, tokens as text): byte-level BPE (GPT-2's alphabet, worked by hand),
// SentencePiece-style pieces with byte fallback, a Unigram vocabulary, added tokens, malformed
// files, the table-cell escaping, the TinyStories-656K fixture's tokenizer, and summary/report
// showing the worst tokens in context from the CLI.
#include "rlparity/model/tokenizer.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "unit/scratch_test_util.hpp"

namespace rlp {
namespace {

const std::string kFixture = std::string(RLPARITY_SOURCE_DIR) + "/fixtures/models/tinystories656K";

TEST(Tokenizer, ByteLevelBpe) {
  // GPT-2's alphabet: space 0x20 is the 33rd non-printable byte -> U+0120 "Ġ", newline 0x0A ->
  // U+010A "Ċ"; "€" = E2 82 AC -> "â" (printable), U+0124 "Ĥ" (0x82, the 37th), "¬" (printable).
  const Tokenizer t = Tokenizer::parse(R"({
    "model": {"type": "BPE", "vocab": {"Hello": 0, "\u0120world": 1, "\u010a": 2, "\u0120\u00e2\u0124\u00ac": 3,
                                       "\u00e2\u0124": 4, "\u00ac": 5}},
    "added_tokens": [{"id": 6, "content": "<|endoftext|>", "special": true}],
    "decoder": {"type": "ByteLevel", "add_prefix_space": false}})",
                                       "t.json");
  EXPECT_EQ(t.decode({0, 1, 2, 3}), "Hello world\n \xE2\x82\xAC");
  EXPECT_EQ(t.decode({4, 5}), "\xE2\x82\xAC");           // a character split over two tokens
  EXPECT_EQ(t.decode({4}), "\xEF\xBF\xBD\xEF\xBF\xBD");  // half of one: U+FFFD per byte
  EXPECT_EQ(t.decode({0, 6}), "Hello<|endoftext|>");     // added tokens are text
  EXPECT_EQ(t.decode({99}), "<id 99>");
}

TEST(Tokenizer, SentencePieceWithByteFallbackAndUnigram) {
  const Tokenizer t = Tokenizer::parse(R"({
    "model": {"type": "BPE", "byte_fallback": true,
              "vocab": {"<unk>": 0, "\u2581Hello": 1, "<0xE2>": 2, "<0x82>": 3, "<0xAC>": 4, "\u2581wor": 5, "ld": 6}},
    "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
      {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}})",
                                       "t.json");
  EXPECT_EQ(t.decode({1, 5, 6, 2, 3, 4}), " Hello world\xE2\x82\xAC");
  const Tokenizer u = Tokenizer::parse(R"({
    "model": {"type": "Unigram", "vocab": [["<unk>", 0.0], ["\u2581a", -1.5], ["b", -2.0]]},
    "decoder": {"type": "Metaspace", "replacement": "\u2581"}})",
                                       "u.json");
  EXPECT_EQ(u.size(), 3u);
  EXPECT_EQ(u.decode({1, 2, 1}), " ab a");
}

struct TokenizerFiles : rlp_test::ScratchDirTest {};

TEST_F(TokenizerFiles, MalformedFilesAreRefusedByField) {
  EXPECT_NE(input_error([] { Tokenizer::parse("{\"decoder\": {}}", "t.json"); }).find("t.json: key 'model'"),
            std::string::npos);
  EXPECT_NE(input_error([] {
              Tokenizer::parse(R"({"model": {"vocab": {"a": -1}}})", "t.json");
            }).find("model.vocab[\"a\"]: expected a token id"),
            std::string::npos);
  EXPECT_NE(input_error([] {
              Tokenizer::parse(R"({"model": {"vocab": [["a"], 3]}})", "t.json");
            }).find("model.vocab[1]: expected [piece, score]"),
            std::string::npos);
  EXPECT_NE(input_error([] { Tokenizer::parse("{\"model\": ", "t.json"); }).find("invalid JSON"),
            std::string::npos);
  EXPECT_FALSE(Tokenizer::open(dir_.string()).has_value());  // no tokenizer.json: ids are shown
  write("tokenizer.json", "[1, 2]");
  EXPECT_NE(input_error([&] { Tokenizer::open(dir_.string()); }).find("top level"), std::string::npos);
}

TEST(Tokenizer, PrintableText) {
  EXPECT_EQ(printable_text("a\nb\\c\x01\t", 100), "a\\nb\\\\c\\x01\\t");
  EXPECT_EQ(printable_text("abcdef", 4), "abc\xE2\x80\xA6");
  EXPECT_EQ(printable_text("abcdef", 4, true),
            "\xE2\x80\xA6"
            "def");
  EXPECT_EQ(printable_text("\xC3\xA9t\xC3\xA9", 3), "\xC3\xA9t\xC3\xA9");  // characters, not bytes
}

// The fixture's pieces for ids 80, 147, 201, 282, 57 are "▁", "On", "ce▁", "upon▁a▁tim", "e" (read
// from its tokenizer.json by hand).
TEST(Tokenizer, TinyStoriesFixture) {
  const auto t = Tokenizer::open(kFixture);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->size(), 2048u);
  EXPECT_EQ(t->decode({1, 80, 147, 201, 282, 57}), "<|start_story|> Once upon a time");
}

TEST_F(TokenizerFiles, SummaryAndReportShowTheWorstTokensInContext) {
  const std::string in = write("in.jsonl", "{\"id\": \"once\", \"prompt\": [1, 80, 147, 201, 282, 57]}\n");
  const std::string out = (dir_ / "run.h5").string(), cli = RLPARITY_CLI_PATH;
  auto r = rlp_test::run_command(cli + " replay -q --checkpoint " + kFixture + " --inputs " + in +
                                 " --recipes bf16,fp8-gen --max-new-tokens 12 --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  r = rlp_test::run_command(cli + " summary " + out + " --worst 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("worst tokens (largest |log ratio|)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("upon a time"), std::string::npos) << r.output;  // the prompt, as context
  const std::string md = (dir_ / "r.md").string();
  r = rlp_test::run_command(cli + " report -q " + out + " -o " + (dir_ / "r.html").string() + " --markdown " +
                            md);
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream f(md);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("| context | token |"), std::string::npos) << text;
  // An explicit tokenizer that is not there is an error; --worst 0 prints no token list.
  r = rlp_test::run_command(cli + " summary " + out + " --tokenizer " + (dir_ / "none").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--tokenizer"), std::string::npos) << r.output;
  r = rlp_test::run_command(cli + " summary " + out + " --worst 0");
  EXPECT_EQ(r.output.find("worst tokens"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace rlp
