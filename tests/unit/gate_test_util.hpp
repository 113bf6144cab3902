// Helpers shared by gate_test.cpp and compare_test.cpp: temporary directories, running the CLI,
// the message of an expected InputError, and a small XML well-formedness parser for the JUnit output.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "rlparity/util/error.hpp"

namespace rlp_test {

inline std::string cli_path() {
  if (const char* p = std::getenv("RLPARITY_CLI"); p && *p) return p;
  return RLPARITY_CLI_PATH;
}

// A fresh directory removed at scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    std::string tmpl = (std::filesystem::temp_directory_path() / ("rlp-" + tag + "-XXXXXX")).string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::string shell_quote(const std::string& s) {
  std::string o(1, '\'');
  for (char c : s) {
    if (c == '\'')
      o.append("'\\''");
    else
      o.push_back(c);
  }
  o.push_back('\'');
  return o;
}

struct CliResult {
  int code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs the CLI with the given arguments (each shell-quoted).
inline CliResult run_cli(const std::vector<std::string>& args, const std::string& workdir) {
  std::string err_file = workdir;
  err_file.append("/.stderr");
  std::string cmd = shell_quote(cli_path());
  for (const auto& a : args) {
    cmd.push_back(' ');
    cmd.append(shell_quote(a));
  }
  cmd.append(" 2>");
  cmd.append(shell_quote(err_file));
  CliResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream e(err_file);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  return r;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// ---- Minimal XML 1.0 parser (elements, attributes, text, entities, comments, declaration). ----
struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::vector<XmlElement> children;
  std::string text;
};

class XmlParser {
 public:
  explicit XmlParser(const std::string& s) : s_(s) {}
  XmlElement parse_document() {
    skip_ws();
    if (s_.compare(i_, 5, "<?xml") == 0) {
      const auto e = s_.find("?>", i_);
      if (e == std::string::npos) fail("unterminated XML declaration");
      i_ = e + 2;
    }
    skip_misc();
    XmlElement root = parse_element();
    skip_misc();
    if (i_ != s_.size()) fail("content after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("XML error at offset " + std::to_string(i_) + ": " + what);
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  void skip_misc() {
    for (;;) {
      skip_ws();
      if (s_.compare(i_, 4, "<!--") == 0) {
        const auto e = s_.find("-->", i_);
        if (e == std::string::npos) fail("unterminated comment");
        i_ = e + 3;
      } else {
        return;
      }
    }
  }
  static bool name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == ':';
  }
  std::string parse_name() {
    const std::size_t b = i_;
    while (i_ < s_.size() && name_char(s_[i_])) ++i_;
    if (b == i_) fail("expected a name");
    return s_.substr(b, i_ - b);
  }
  std::string decode(const std::string& raw) const {
    std::string o;
    for (std::size_t k = 0; k < raw.size(); ++k) {
      const char c = raw[k];
      if (c == '<') throw std::runtime_error("raw '<' in text or attribute");
      if (c != '&') {
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' && c != '\r')
          throw std::runtime_error("control character in XML");
        o += c;
        continue;
      }
      const auto semi = raw.find(';', k);
      if (semi == std::string::npos) throw std::runtime_error("unterminated entity");
      const std::string ent = raw.substr(k + 1, semi - k - 1);
      if (ent == "amp")
        o += '&';
      else if (ent == "lt")
        o += '<';
      else if (ent == "gt")
        o += '>';
      else if (ent == "quot")
        o += '"';
      else if (ent == "apos")
        o += '\'';
      else if (ent.size() > 1 && ent[0] == '#')
        o += static_cast<char>(std::stoi(ent.substr(1)));
      else
        throw std::runtime_error("unknown entity &" + ent + ";");
      k = semi;
    }
    return o;
  }
  XmlElement parse_element() {
    if (i_ >= s_.size() || s_[i_] != '<') fail("expected '<'");
    ++i_;
    XmlElement el;
    el.name = parse_name();
    for (;;) {
      skip_ws();
      if (i_ >= s_.size()) fail("unterminated start tag");
      if (s_.compare(i_, 2, "/>") == 0) {
        i_ += 2;
        return el;
      }
      if (s_[i_] == '>') {
        ++i_;
        break;
      }
      const std::string an = parse_name();
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != '=') fail("expected '=' after attribute " + an);
      ++i_;
      skip_ws();
      if (i_ >= s_.size() || (s_[i_] != '"' && s_[i_] != '\'')) fail("unquoted attribute " + an);
      const char q = s_[i_++];
      const auto e = s_.find(q, i_);
      if (e == std::string::npos) fail("unterminated attribute " + an);
      if (el.attrs.count(an)) fail("duplicate attribute " + an);
      el.attrs[an] = decode(s_.substr(i_, e - i_));
      i_ = e + 1;
    }
    for (;;) {
      const auto lt = s_.find('<', i_);
      if (lt == std::string::npos) fail("unterminated element " + el.name);
      el.text += decode(s_.substr(i_, lt - i_));
      i_ = lt;
      if (s_.compare(i_, 4, "<!--") == 0) {
        skip_misc();
        continue;
      }
      if (s_.compare(i_, 2, "</") == 0) {
        i_ += 2;
        const std::string n = parse_name();
        if (n != el.name) fail("mismatched end tag </" + n + "> for <" + el.name + ">");
        skip_ws();
        if (i_ >= s_.size() || s_[i_] != '>') fail("expected '>'");
        ++i_;
        return el;
      }
      el.children.push_back(parse_element());
    }
  }
  const std::string& s_;
  std::size_t i_ = 0;
};

inline XmlElement parse_xml(const std::string& s) { return XmlParser(s).parse_document(); }

// The message of the rlp::InputError `f` throws; a test failure (and "") when it throws none.
template <class F>
std::string input_error_message(F&& f) {
  try {
    f();
  } catch (const rlp::InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return {};
}

}  // namespace rlp_test
