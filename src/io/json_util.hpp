// JSON parsing for untrusted text: nesting depth bounded before the parser
// sees it, no exceptions escaping.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "nvfp4moe/status.hpp"

namespace nvfp4moe::io::detail {

// Parses text into out. Fails (kFormatError, message starting with name) on
// malformed JSON or nesting deeper than kJsonMaxDepth.
Status parse_json(std::string_view text, const std::string& name, nlohmann::json* out);

}  // namespace nvfp4moe::io::detail
