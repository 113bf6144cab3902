// One exception type for every failure rlparity reports to a user: it carries where it was raised
// (file:line, printed with the global --verbose) and a message that names the input and the
// problem. The CLI's main turns it into an exit code (util/exit_codes.hpp): kExitError (2), or
// 128 + the signal when the failure follows SIGINT/SIGTERM; nothing below the CLI calls exit().
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

// Input errors (bad file, bad option, an output that cannot be written): the user's to fix. The CLI
// exits 2 for them as for every Error; the type tells library callers (and tests) which ones.
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
