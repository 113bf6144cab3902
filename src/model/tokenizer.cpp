#include "rlparity/model/tokenizer.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "rlparity/util/error.hpp"
#include "rlparity/util/json_depth.hpp"

namespace rlp {
namespace {

using json = nlohmann::json;

void put_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The code point at s[i] and its length in bytes; 0xFFFD and 1 for an invalid sequence.
std::pair<uint32_t, std::size_t> next_utf8(const std::string& s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return {c, 1};
  const std::size_t len = c >= 0xF0 && c < 0xF5 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
  if (len == 0 || i + len > s.size()) return {0xFFFD, 1};
  uint32_t cp = c & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (std::size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return {0xFFFD, 1};
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  const uint32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return {0xFFFD, 1};
  return {cp, len};
}

// GPT-2's bytes_to_unicode (the ByteLevel pre-tokenizer and decoder, tokenizers'
// pre_tokenizers/byte_level.rs): printable Latin-1 bytes map to themselves, the other 68 to 256+n.
std::map<std::string, uint8_t> byte_level_alphabet() {
  std::map<std::string, uint8_t> m;
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    std::string ch;
    put_utf8(static_cast<uint32_t>(printable ? b : 256 + n++), ch);
    m[ch] = static_cast<uint8_t>(b);
  }
  return m;
}

// Is `d` (a decoder, possibly a Sequence) or one of its parts of type `type`? Sets *part to it.
bool has_decoder(const json& d, const std::string& type, const json** part = nullptr) {
  if (!d.is_object()) return false;
  const auto t = d.find("type");
  if (t != d.end() && t->is_string() && t->get<std::string>() == type) {
    if (part) *part = &d;
    return true;
  }
  const auto seq = d.find("decoders");
  if (seq == d.end() || !seq->is_array()) return false;
  for (const auto& x : *seq)
    if (has_decoder(x, type, part)) return true;
  return false;
}

int32_t checked_id(const json& v, const std::string& source, const std::string& field) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
    RLP_THROW_INPUT("{}: {}: expected a token id (a non-negative integer), got {}", source, field,
                    v.dump().substr(0, 80));
  return static_cast<int32_t>(v.get<int64_t>());
}

}  // namespace

std::optional<Tokenizer> Tokenizer::open(const std::string& dir) {
  const std::filesystem::path p = std::filesystem::path(dir) / "tokenizer.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) return std::nullopt;
  return open_file(p.string());
}

Tokenizer Tokenizer::open_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) RLP_THROW_INPUT("{}: cannot be read", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

Tokenizer Tokenizer::parse(const std::string& text, const std::string& source) {
  check_json_depth(text, source);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    RLP_THROW_INPUT("{}: invalid JSON: {}", source, e.what());
  }
  if (!j.is_object()) RLP_THROW_INPUT("{}: expected a JSON object at the top level", source);
  Tokenizer t;
  const auto model = j.find("model");
  if (model == j.end() || !model->is_object())
    RLP_THROW_INPUT("{}: key 'model' is missing or not an object", source);
  const auto vocab = model->find("vocab");
  if (vocab == model->end()) RLP_THROW_INPUT("{}: key 'model.vocab' is missing", source);
  if (vocab->is_object()) {
    for (const auto& [piece, id] : vocab->items())
      t.pieces_[checked_id(id, source, "model.vocab[\"" + piece + "\"]")] = piece;
  } else if (vocab->is_array()) {  // Unigram: [[piece, score], ...], the id is the index
    for (std::size_t i = 0; i < vocab->size(); ++i) {
      const json& e = (*vocab)[i];
      if (!e.is_array() || e.empty() || !e[0].is_string())
        RLP_THROW_INPUT("{}: model.vocab[{}]: expected [piece, score]", source, i);
      t.pieces_[static_cast<int32_t>(i)] = e[0].get<std::string>();
    }
  } else {
    RLP_THROW_INPUT("{}: key 'model.vocab' must be an object or a list", source);
  }
  if (const auto at = j.find("added_tokens"); at != j.end() && at->is_array())
    for (std::size_t i = 0; i < at->size(); ++i) {
      const json& e = (*at)[i];
      const std::string f = fmt::format("added_tokens[{}]", i);
      if (!e.is_object() || !e.contains("id") || !e.contains("content") || !e["content"].is_string())
        RLP_THROW_INPUT("{}: {}: expected an object with 'id' and 'content'", source, f);
      const int32_t id = checked_id(e["id"], source, f + ".id");
      t.pieces_[id] = e["content"].get<std::string>();
      t.added_.insert(id);
    }
  const json decoder = j.contains("decoder") ? j["decoder"] : json();
  t.byte_level_ = has_decoder(decoder, "ByteLevel");
  t.byte_fallback_ = has_decoder(decoder, "ByteFallback") ||
                     (model->contains("byte_fallback") && (*model)["byte_fallback"] == true);
  const json* part = nullptr;
  if (has_decoder(decoder, "Metaspace", &part)) {
    t.space_piece_ = part->contains("replacement") && (*part)["replacement"].is_string()
                         ? (*part)["replacement"].get<std::string>()
                         : "\xE2\x96\x81";
  } else if (has_decoder(decoder, "Replace", &part)) {
    // Replace { pattern: { String: "▁" }, content: " " }: SentencePiece's space marker.
    const json& pat = part->contains("pattern") ? (*part)["pattern"] : json();
    if (pat.is_object() && pat.contains("String") && pat["String"].is_string() && part->contains("content") &&
        (*part)["content"] == " ")
      t.space_piece_ = pat["String"].get<std::string>();
  }
  if (t.byte_level_) t.byte_of_char_ = byte_level_alphabet();
  return t;
}

void Tokenizer::append_bytes(int32_t id, std::string& out) const {
  const auto it = pieces_.find(id);
  if (it == pieces_.end()) {
    out += fmt::format("<id {}>", id);
    return;
  }
  const std::string& p = it->second;
  if (added_.count(id)) {
    out += p;
    return;
  }
  if (byte_level_) {
    for (std::size_t i = 0; i < p.size();) {
      const std::size_t len = next_utf8(p, i).second;
      const auto b = byte_of_char_.find(p.substr(i, len));
      if (b != byte_of_char_.end())
        out += static_cast<char>(b->second);
      else
        out += p.substr(i, len);
      i += len;
    }
    return;
  }
  if (byte_fallback_ && p.size() == 6 && p.compare(0, 3, "<0x") == 0 && p[5] == '>') {
    const std::string hex = p.substr(3, 2);
    if (hex.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos) {
      out += static_cast<char>(std::stoi(hex, nullptr, 16));
      return;
    }
  }
  if (space_piece_.empty()) {
    out += p;
    return;
  }
  for (std::size_t i = 0; i < p.size();) {
    if (p.compare(i, space_piece_.size(), space_piece_) == 0) {
      out += ' ';
      i += space_piece_.size();
    } else {
      out += p[i++];
    }
  }
}

std::string Tokenizer::decode(const int32_t* ids, std::size_t n) const {
  std::string bytes;
  for (std::size_t i = 0; i < n; ++i) append_bytes(ids[i], bytes);
  std::string out;
  for (std::size_t i = 0; i < bytes.size();) {
    const auto [cp, len] = next_utf8(bytes, i);
    put_utf8(cp, out);
    i += len;
  }
  return out;
}

std::string printable_text(const std::string& s, std::size_t max_chars, bool keep_end) {
  std::vector<std::string> chars;
  for (std::size_t i = 0; i < s.size();) {
    const auto [cp, len] = next_utf8(s, i);
    std::string c;
    if (cp == '\n')
      c = "\\n";
    else if (cp == '\t')
      c = "\\t";
    else if (cp == '\r')
      c = "\\r";
    else if (cp == '\\')
      c = "\\\\";
    else if (cp < 0x20 || cp == 0x7F)
      c = fmt::format("\\x{:02x}", cp);
    else
      put_utf8(cp, c);
    chars.push_back(std::move(c));
    i += len;
  }
  std::string out;
  if (chars.size() <= max_chars) {
    for (const auto& c : chars) out += c;
    return out;
  }
  const std::string ellipsis = "\xE2\x80\xA6";
  const std::size_t keep = max_chars > 0 ? max_chars - 1 : 0;
  if (keep_end) {
    out = ellipsis;
    for (std::size_t i = chars.size() - keep; i < chars.size(); ++i) out += chars[i];
  } else {
    for (std::size_t i = 0; i < keep; ++i) out += chars[i];
    out += ellipsis;
  }
  return out;
}

}  // namespace rlp
