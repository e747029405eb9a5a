#include "nvfp4moe/status.hpp"

namespace nvfp4moe {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "Ok";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kOutOfRange: return "OutOfRange";
    case StatusCode::kUnsupported: return "Unsupported";
    case StatusCode::kFormatError: return "FormatError";
    case StatusCode::kIoError: return "IoError";
    case StatusCode::kOutOfMemory: return "OutOfMemory";
    case StatusCode::kDeviceError: return "DeviceError";
    case StatusCode::kNoDevice: return "NoDevice";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  if (ok()) return "Ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

}  // namespace nvfp4moe
