// Task: one SCSI command on its way through a session, from submission to completion.
//
// The submitter owns the Task's memory (a stack object for synchronous calls, a preallocated
// slot for asynchronous frontends), so the hot path allocates nothing. The submitter fills the
// "request" fields, calls Session::Submit, and must not touch the Task until on_complete runs,
// exactly once: on the connection's I/O thread; or, when the session cannot take the task (closed,
// or its connection failed), at once on the submitting thread inside Submit; or on Close's thread
// for a task still unfinished when Close stops the I/O thread. So on_complete must not take a
// lock its submitter holds around Submit. The session fills the "result" fields.
//
// Lifetime and recovery: a submitted Task stays owned by the session until it completes; the
// session keeps every unfinished Task (waiting for the CmdSN window, or sent and unanswered) in
// its task table, so a session reinstatement can resend it under a new ITT and CmdSN without the
// submitter noticing. Nothing in the Task refers to a connection.
#pragma once

#include <algorithm>
#include <cstdint>

#include "initiator/base/status.h"
#include "initiator/pdu/bhs.h"

namespace iser {

enum class DataDirection : uint8_t { kNone, kRead, kWrite };

struct Task;
using TaskCallback = void (*)(Task* task);

inline constexpr uint32_t kMaxSenseLength = 252;

struct Task {
  // Request.
  uint64_t lun = 0;
  uint8_t cdb[16] = {};
  uint8_t cdb_length = 0;
  DataDirection direction = DataDirection::kNone;
  uint8_t* buffer = nullptr;     // read destination or write source
  uint32_t transfer_length = 0;  // Expected Data Transfer Length, bytes
  TaskCallback on_complete = nullptr;
  void* context = nullptr;  // for the submitter
  // A read into a buffer that holds nothing its caller may not see (only its own earlier reads
  // of this LUN): a transport that would zero it first, so that bytes a target answering GOOD
  // did not place read as zeroes and never as what the buffer held (iSER's directly registered
  // reads), may skip that pass. Off unless the submitter owns the buffer that way.
  bool keeps_unplaced_bytes = false;
  // A command about the connection it goes by (a path set's probe of one path: the LUN's
  // identity or port group state as seen through it): when that connection is lost it fails
  // with the loss, and a session without a connection refuses it, instead of holding it for the
  // next connection, which may be minutes away while other paths work.
  bool ends_with_connection = false;

  // Result, valid in on_complete.
  Status status;  // transport or session failure; OK when a SCSI status arrived
  uint8_t scsi_status = 0;
  uint8_t sense_length = 0;
  uint8_t sense[kMaxSenseLength] = {};
  uint32_t residual = 0;  // bytes not transferred (underflow) or not asked for (overflow)
  bool residual_overflow = false;
  bool residual_underflow = false;

  // Session state; the submitter does not touch these.
  Bhs bhs;  // the SCSI Command PDU as last sent
  uint32_t itt = kReservedTag;
  uint32_t cmdsn = 0;
  // Data-In bytes received so far, counted by the session from Data-In PDUs; stays 0 where the
  // target places read data itself (iSER, DataInAccounting::kTargetPlaced).
  uint32_t data_in_bytes = 0;
  uint32_t next_data_sn = 0;       // expected DataSN of the next Data-In
  uint32_t next_r2t_sn = 0;        // expected R2TSN of the next R2T
  uint32_t immediate_bytes = 0;    // write bytes sent as immediate data
  uint32_t unsolicited_bytes = 0;  // write bytes sent as unsolicited Data-Out (after immediate)
  uint8_t retries = 0;             // SCSI-level retries so far (BUSY, UNIT ATTENTION, ...)
  uint8_t aborts = 0;              // times aborted after command_timeout and sent again
  // Connections lost while it was in flight (posted to the target) since Submit, across replays,
  // SCSI retries and aborts alike: none of those says the target can keep a connection with it.
  // A loss while it waited (for a retry's back-off, or to be sent) neither adds nor resets.
  uint8_t losses_in_flight = 0;
  Task* next = nullptr;  // intrusive queue link

  // Path set state (initiator/paths): the path the task went by and the submitter's callback,
  // while the path set stands between them; nobody else touches these.
  void* path_set = nullptr;
  TaskCallback path_on_complete = nullptr;
  uint32_t path = 0;
  // Times it moved to another path since it was submitted to the set: bounded, so that a command
  // that ends every connection it reaches stays with one path, whose recovery limits apply.
  uint8_t path_moves = 0;

  // Datamover state; neither the session nor the submitter touches it. How many of the task's
  // PDUs the datamover holds unsent, so that ending a task it holds none of costs no search.
  uint32_t pdus_held = 0;
};

// The bytes the command moved by the target's account: the Expected Data Transfer Length less an
// underflow residual (the session fails a command whose underflow exceeds that length).
inline uint32_t TransferredBytes(const Task& t) {
  return t.residual_underflow ? t.transfer_length - std::min(t.residual, t.transfer_length)
                              : t.transfer_length;
}

}  // namespace iser
