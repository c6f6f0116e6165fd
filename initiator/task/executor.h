// Executor: somewhere a command of one's own can be run and waited for. A session is one; so is a
// set of paths (initiator/paths), which sends the command by whichever path is usable. What a
// device reads of its LUN (lun_info: REPORT LUNS, INQUIRY, READ CAPACITY) takes an Executor, so
// that it goes by a path that works rather than by a path that is down.
//
// Contract: Execute submits the task and returns once it completed (its result fields filled),
// successfully or not; never from a connection's I/O thread. max_transfer_bytes is the most one
// command carries there.
#pragma once

#include <cstdint>

#include "initiator/task/task.h"

namespace iser {

class Executor {
 public:
  virtual ~Executor() = default;
  virtual void Execute(Task* task) = 0;
  virtual uint32_t max_transfer_bytes() const = 0;
};

}  // namespace iser
