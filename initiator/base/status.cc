#include "initiator/base/status.h"

#include <cstdio>
#include <cstdlib>

namespace iser {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kLoginFailed:
      return "login failed";
    case StatusCode::kFatalLogin:
      return "login refused";
    case StatusCode::kAuthFailed:
      return "authentication failed";
    case StatusCode::kTimeout:
      return "timeout";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kConnectionFailed:
      return "connection failed";
    case StatusCode::kProtocolError:
      return "protocol error";
    case StatusCode::kScsiError:
      return "SCSI error";
    case StatusCode::kIoError:
      return "I/O error";
    case StatusCode::kNoSpace:
      return "no space";
    case StatusCode::kReadOnly:
      return "read-only";
    case StatusCode::kNotSupported:
      return "not supported";
    case StatusCode::kAborted:
      return "aborted";
    case StatusCode::kResourceExhausted:
      return "resource exhausted";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, std::string(context) + ": " + message_);
}

void DieReadingValueOfError(const Status& status) {
  std::fprintf(stderr, "iser-connect: the value of a failed Result was read: %s\n",
               status.ToString().c_str());
  std::abort();
}

}  // namespace iser
