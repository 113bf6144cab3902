// Token ids back to text, from a checkpoint's tokenizer.json (the Hugging Face tokenizers format),
// for showing tokens and their contexts in summaries and reports. Decoding only: no tokenizer
// library, no encoding. What it reads:
//   model.vocab: {token: id} (BPE, WordPiece) or [[piece, score], ...] (Unigram, id = index), and
//     added_tokens [{id, content}], which win over the vocabulary;
//   the decoder: ByteLevel (GPT-2's byte-to-unicode alphabet, "Ġ" for a space: each character maps
//     back to one byte), or SentencePiece's (Metaspace, or a Sequence of Replace "▁" -> " ",
//     ByteFallback "<0xNN>" -> byte NN, Fuse, Strip), also when model.byte_fallback says so.
// The bytes of a token sequence are joined before they are read as UTF-8, so a character split over
// byte tokens comes out whole; invalid UTF-8 becomes U+FFFD.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace rlp {

class Tokenizer {
 public:
  // The tokenizer of checkpoint directory `dir`: nullopt when it has no tokenizer.json; an
  // InputError naming the file and the field for one that is malformed.
  static std::optional<Tokenizer> open(const std::string& dir);
  // The tokenizer.json at `path` (InputError when it cannot be read or is malformed).
  static Tokenizer open_file(const std::string& path);
  // From a tokenizer.json document (`source` names it in errors).
  static Tokenizer parse(const std::string& json_text, const std::string& source);

  // The UTF-8 text of ids[0..n) (the first piece's leading "▁" stays a space: contexts are shown
  // mid-sequence). An id the tokenizer does not know becomes "<id N>".
  std::string decode(const int32_t* ids, std::size_t n) const;
  std::string decode(const std::vector<int32_t>& ids) const { return decode(ids.data(), ids.size()); }
  std::size_t size() const { return pieces_.size(); }

 private:
  std::map<int32_t, std::string> pieces_;        // id -> token string as stored
  std::set<int32_t> added_;                      // added_tokens: their content is text, never bytes
  bool byte_level_ = false;                      // ByteLevel decoder
  bool byte_fallback_ = false;                   // "<0xNN>" pieces are bytes
  std::string space_piece_;                      // the piece standing for a space ("▁"), empty for none
  std::map<std::string, uint8_t> byte_of_char_;  // ByteLevel: character -> byte
  void append_bytes(int32_t id, std::string& out) const;
};

// Text for a table cell: \n, \t, \r and other control characters escaped ("\n", "\x01"), a
// backslash doubled; at most max_chars characters, an ellipsis where cut (from the left when
// keep_end, so a context keeps the text next to its token).
std::string printable_text(const std::string& utf8, std::size_t max_chars, bool keep_end = false);

}  // namespace rlp
