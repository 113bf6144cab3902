#include "rlparity/util/json_depth.hpp"

#include "rlparity/util/error.hpp"

namespace rlp {

std::size_t json_nesting_depth(std::string_view text) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

void check_json_depth(std::string_view text, const std::string& where) {
  if (json_nesting_depth(text) > kMaxJsonDepth)
    RLP_THROW_INPUT("{}: JSON is nested deeper than {} levels (not a valid input of this kind)", where,
                    kMaxJsonDepth);
}

}  // namespace rlp
