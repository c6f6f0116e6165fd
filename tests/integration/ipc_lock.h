// Dropping CAP_IPC_LOCK, so that RLIMIT_MEMLOCK bites a test running as root, for the
// initiator's locked-memory budget and for softrdma's strict mode alike (iser_memory.h).
#pragma once

#include <string>

namespace iser::test {

// Takes CAP_IPC_LOCK out of the calling thread's effective and permitted sets (capabilities are
// per thread: threads started from here on inherit its sets). Empty, or what went wrong.
std::string DropIpcLock();

}  // namespace iser::test
