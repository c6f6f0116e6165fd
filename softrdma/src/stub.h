// Definitions for entry points softrdma exports but does not implement: each logs once and fails
// with EOPNOTSUPP (-1, or a null pointer for calls that return objects).
#pragma once

#include <cerrno>

#include "log.h"

#define SOFTRDMA_STUB_INT(name)                                     \
  extern "C" long name() {                                          \
    softrdma::log_warn("%s is not implemented by softrdma", #name); \
    errno = EOPNOTSUPP;                                             \
    return -1;                                                      \
  }
#define SOFTRDMA_STUB_PTR(name)                                     \
  extern "C" void* name() {                                         \
    softrdma::log_warn("%s is not implemented by softrdma", #name); \
    errno = EOPNOTSUPP;                                             \
    return nullptr;                                                 \
  }
