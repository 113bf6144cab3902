// One exception type for every failure rlparity reports to a user: it carries where it was raised
// (file:line) and a message that names the input and the problem. The CLI turns it into an exit
// code; nothing below the CLI calls exit().
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace rlp {

class Error : public std::runtime_error {
 public:
  Error(const char* file, int line, const std::string& message)
      : std::runtime_error(message), where_(std::string(file) + ":" + std::to_string(line)) {}
  explicit Error(const std::string& message) : std::runtime_error(message) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

// Input errors (bad file, bad option) are user errors: exit code 2 in gate, 1 elsewhere.
class InputError : public Error {
 public:
  using Error::Error;
};

}  // namespace rlp

#define RLP_THROW(...) throw ::rlp::Error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
#define RLP_THROW_INPUT(...) throw ::rlp::InputError(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
#define RLP_CHECK(cond, ...)             \
  do {                                   \
    if (!(cond)) RLP_THROW(__VA_ARGS__); \
  } while (0)
