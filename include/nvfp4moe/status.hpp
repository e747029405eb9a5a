// Status: the error type of every public entry point.
//
// No public function throws or aborts on bad input. It returns a Status whose
// message names the argument and the offending value, e.g.
//   "ids[5][1] = 130 is out of range [0, 128)".
#pragma once

#include <sstream>
#include <string>
#include <utility>

namespace nvfp4moe {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // a shape, pointer, id or option is not acceptable
  kOutOfRange = 2,       // a size beyond what the library supports
  kUnsupported = 3,      // legal input that this build or device cannot run
  kFormatError = 4,      // a file or buffer does not follow its format
  kIoError = 5,          // the operating system refused a read or write
  kOutOfMemory = 6,      // host or device allocation failed
  kDeviceError = 7,      // a CUDA call failed
  kNoDevice = 8,         // CUDA requested but no usable device
  kInternal = 9,         // a bug in nvfp4moe
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: ids[5][1] = 130 is out of range [0, 128)".
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }

// make_status(StatusCode::kInvalidArgument, "K = ", K, " is not a multiple of 64")
template <typename... Args>
Status make_status(StatusCode code, const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return Status(code, os.str());
}

template <typename... Args>
Status invalid_argument(const Args&... args) {
  return make_status(StatusCode::kInvalidArgument, args...);
}

}  // namespace nvfp4moe

#define NVFP4MOE_RETURN_IF_ERROR(expr)             \
  do {                                             \
    ::nvfp4moe::Status nvfp4moe_status_ = (expr);  \
    if (!nvfp4moe_status_.ok()) return nvfp4moe_status_; \
  } while (0)
