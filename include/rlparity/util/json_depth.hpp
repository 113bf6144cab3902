// Nesting bound for JSON from outside (checkpoint headers and configs, JSONL inputs and dumps, JSON
// attributes of run files). nlohmann::json parses iteratively, but dump(), copies and comparisons
// recurse once per level, so a hostile "[[[[...]]]]" of a few thousand levels overflowed the stack
// in an error message (found by tests/fuzz). Real inputs nest a handful of levels.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace rlp {

inline constexpr std::size_t kMaxJsonDepth = 128;

// Deepest nesting of arrays and objects in JSON text; brackets inside strings (escapes honoured) do
// not count. Linear, no allocation; malformed text gives some value and is left to the parser.
std::size_t json_nesting_depth(std::string_view text);

// InputError "<where>: JSON is nested deeper than 128 levels" when the text nests deeper than
// kMaxJsonDepth. Call before nlohmann::json::parse on outside input.
void check_json_depth(std::string_view text, const std::string& where);

}  // namespace rlp
