#include "io/json_util.hpp"

#include <new>

#include "io/io_util.hpp"
#include "nvfp4moe/io.hpp"

namespace nvfp4moe::io::detail {

namespace {

// Deepest bracket nesting outside string literals. Malformed text is left to
// the parser; this only bounds how deep a structure it will be asked to build.
int max_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (ch == '\\') {
        escaped = true;
      } else if (ch == '"') {
        in_string = false;
      }
      continue;
    }
    if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > deepest) deepest = depth;
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

Status parse_json(std::string_view text, const std::string& name, nlohmann::json* out) {
  const int depth = max_depth(text);
  if (depth > kJsonMaxDepth) {
    return format_error(name, "JSON nests ", depth, " levels deep; the limit is ", kJsonMaxDepth);
  }
  try {
    *out = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, name, ": out of memory parsing JSON");
  } catch (const std::exception& e) {
    return format_error(name, "invalid JSON: ", e.what());
  }
  if (out->is_discarded()) return format_error(name, "invalid JSON");
  return ok_status();
}

}  // namespace nvfp4moe::io::detail
