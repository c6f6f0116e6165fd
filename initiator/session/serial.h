// Serial number arithmetic on 32-bit sequence numbers (RFC 1982, as RFC 7143 §4.2.2.1 uses it
// for CmdSN, StatSN and DataSN): a < b when b is ahead of a by less than 2^31.
#pragma once

#include <cstdint>

namespace iser {

inline bool SerialLess(uint32_t a, uint32_t b) {
  return a != b && static_cast<int32_t>(a - b) < 0;
}
inline bool SerialLessEqual(uint32_t a, uint32_t b) {
  return a == b || SerialLess(a, b);
}
inline bool SerialGreater(uint32_t a, uint32_t b) {
  return SerialLess(b, a);
}

// The command window: a non-immediate command with this CmdSN may be sent when
// CmdSN <= MaxCmdSN. RFC 7143 §4.2.2.1: a MaxCmdSN below ExpCmdSN - 1 is invalid and ignored.
class CmdWindow {
 public:
  void Reset(uint32_t next_cmdsn, uint32_t exp_cmdsn, uint32_t max_cmdsn) {
    next_ = next_cmdsn;
    exp_ = exp_cmdsn;
    max_ = max_cmdsn;
  }
  // Applies ExpCmdSN/MaxCmdSN from a response; values that do not move forward are ignored.
  void Update(uint32_t exp_cmdsn, uint32_t max_cmdsn) {
    if (SerialLess(max_cmdsn, exp_cmdsn - 1)) return;
    if (SerialGreater(exp_cmdsn, exp_)) exp_ = exp_cmdsn;
    if (SerialGreater(max_cmdsn, max_)) max_ = max_cmdsn;
  }
  bool Open() const { return SerialLessEqual(next_, max_); }
  uint32_t Take() { return next_++; }  // CmdSN for a non-immediate PDU
  uint32_t next() const { return next_; }
  uint32_t exp() const { return exp_; }
  uint32_t max() const { return max_; }

 private:
  uint32_t next_ = 0;
  uint32_t exp_ = 0;
  uint32_t max_ = 0;
};

}  // namespace iser
