// Status: the result of an operation, success or an error code with a message that names what
// went wrong (portal, phase, what the target said). Cheap to return on success (no allocation);
// the message is only built on failure. Codes are chosen so that the CLI can map them one-to-one
// to iscsiadm's exit codes where the meaning matches.
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace iser {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,    // bad URL, bad option, request outside the LUN (iscsiadm 7)
  kLoginFailed,        // login refused by the target, retryable (iscsiadm 5)
  kFatalLogin,         // login refused, retrying will not help (iscsiadm 19)
  kAuthFailed,         // CHAP failed in either direction (iscsiadm 24)
  kTimeout,            // connect, login, NOP or command timeout (iscsiadm 8)
  kNotFound,           // no target, no LUN (iscsiadm 21)
  kConnectionFailed,   // cannot reach the portal, or the connection dropped
  kProtocolError,      // the peer broke the protocol (malformed PDU, bad digest, ...)
  kScsiError,          // the command completed with a SCSI status other than GOOD
  kIoError,            // medium or transport error while moving data
  kNoSpace,            // thin pool exhausted (SPACE ALLOCATION FAILED)
  kReadOnly,           // write-protected LUN
  kNotSupported,       // the LUN or target does not offer the operation
  kAborted,            // the session is closing; the request was not executed
  kResourceExhausted,  // a local limit (memlock, queue depth, memory)
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status LoginFailed(std::string m) { return {StatusCode::kLoginFailed, std::move(m)}; }
  static Status FatalLogin(std::string m) { return {StatusCode::kFatalLogin, std::move(m)}; }
  static Status AuthFailed(std::string m) { return {StatusCode::kAuthFailed, std::move(m)}; }
  static Status Timeout(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status ConnectionFailed(std::string m) {
    return {StatusCode::kConnectionFailed, std::move(m)};
  }
  static Status ProtocolError(std::string m) { return {StatusCode::kProtocolError, std::move(m)}; }
  static Status ScsiError(std::string m) { return {StatusCode::kScsiError, std::move(m)}; }
  static Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status NoSpace(std::string m) { return {StatusCode::kNoSpace, std::move(m)}; }
  static Status ReadOnly(std::string m) { return {StatusCode::kReadOnly, std::move(m)}; }
  static Status NotSupported(std::string m) { return {StatusCode::kNotSupported, std::move(m)}; }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "code-name: message", for logs and the CLI.
  std::string ToString() const;
  // Returns a copy whose message is "context: message" (adds where the error happened).
  Status WithContext(std::string_view context) const;
  // Says that dropping this Status is deliberate: a cleanup step on a path that already returns
  // a more telling error, or whose failure has been logged where it happened.
  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

const char* StatusCodeName(StatusCode code);

#if !defined(ISER_CHECKED_RESULTS) && !defined(NDEBUG)
#define ISER_CHECKED_RESULTS 1
#endif

// Prints the error whose value was read and aborts.
[[noreturn]] void DieReadingValueOfError(const Status& status);

// A value or the Status explaining why there is none. Reading the value of an error is a bug:
// builds with ISER_CHECKED_RESULTS (debug and sanitizer builds) abort there, naming the error.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & {
    CheckOk();
    return value_;
  }
  const T& value() const& {
    CheckOk();
    return value_;
  }
  T&& value() && {
    CheckOk();
    return std::move(value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }

 private:
  void CheckOk() const {
#if ISER_CHECKED_RESULTS
    if (!status_.ok()) DieReadingValueOfError(status_);
#endif
  }

  Status status_;
  T value_{};
};

}  // namespace iser

#define ISER_RETURN_IF_ERROR(expr) \
  do {                             \
    ::iser::Status _st = (expr);   \
    if (!_st.ok()) return _st;     \
  } while (0)
