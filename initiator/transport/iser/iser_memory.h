// IserMemory: what the iSER datamover lets the target reach in our memory, and for how long
// (RFC 7145 §5.1: the STags of a command). The datamover asks it to expose a command's bytes
// when the command is sent, and to revoke that access when the command ends, however it ends
// (a SCSI Response, Datamover::Retire, the connection's failure or shutdown).
//
// Contract: each command's STag exposes exactly that command's bytes, for the one direction it
// needs (REMOTE_WRITE for reads, REMOTE_READ for writes), until Revoke; a target that uses a
// stale or out-of-range STag fails with a remote access error instead of touching our memory.
// A read starts zeroed, through a slot or in a caller's buffer registered for it, so what the
// target does not write reads as zeroes, never an earlier command's bytes (a target may answer
// GOOD without writing), unless the caller waived it for a buffer that holds only its own bytes
// (Task::keeps_unplaced_bytes); in a caller's buffer registered for a read, the bytes the target
// says it did not write (the residual, or all of them when the command failed) are zeroed again at
// Revoke. An ITT slot still exposed is never overwritten: Expose refuses it.
// Where the bytes are:
//  - commands of at least kDirectBytes: in the caller's buffer, registered for this command and
//    deregistered after it (zero copy), where a registration measured cheaper than copying;
//  - smaller ones, or when a registration fails (RLIMIT_MEMLOCK): copied through slots (reads at
//    Revoke, writes at Expose), exposed in one of three ways (StagStrategy), chosen at SetUp by
//    probing the device, not by its capability flags alone:
//      windows      type 2 memory windows: each slot one MR with no remote access, a window
//                   bound over the command's bytes (a BIND_MW chained before the command's SEND,
//                   a LOCAL_INV at Revoke: no system call); when ibv_alloc_mw fails, or a bind
//                   failed on this device before (MarkWindowsUnusable), one of the others;
//      per-command  the slot's bytes registered for the command alone, where a registration
//                   measured cheap (softrdma without a cost model);
//      pool         each slot registered once with remote access and its key reused, where
//                   registration is expensive (every NIC): this exposes every slot of the
//                   connection to the target for the connection's life, so a target that uses a
//                   stale STag reaches our copies of this connection's other commands, never a
//                   caller's buffer (libiscsi's iSER exposes its buffers the same way).
// docs/initiator.md has the measured cost of each. Everything here runs on the datamover's
// thread; Release frees it all and must come after the QP is destroyed and before the PD is.
//
// Memory registered at setup counts against RLIMIT_MEMLOCK for the whole process: a budget
// (ReserveLocked) shared by every connection, each taking fewer slots when little is left.
//
// Also here, shared with the RDMA resources: page-aligned allocation, registration with a
// memlock hint, and the work request ids.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "initiator/base/status.h"

namespace iser {

struct Task;

// Work request ids: the kind in the upper 32 bits, a buffer index in the lower ones.
inline constexpr uint64_t kRecvTag = 1ull << 32;
inline constexpr uint64_t kSendTag = 2ull << 32;
inline constexpr uint64_t kInvalidateTag = 3ull << 32;  // window binds and local invalidates

// Whether this process runs in the initial user namespace, whose uid_map is the identity over
// every uid; one made by `unshare -r` or a rootless container maps fewer. Only there does
// CAP_IPC_LOCK lift RLIMIT_MEMLOCK (the kernel asks about the initial namespace).
bool InInitialUserNamespace();

// The process's RLIMIT_MEMLOCK as a budget shared by its iSER connections (unlimited with
// CAP_IPC_LOCK). ReserveLocked takes `bytes` if they fit in what is left and says how much is
// left otherwise; ReleaseLocked gives them back. Thread-safe.
bool ReserveLocked(size_t bytes, size_t* left);
// What is left of the budget now (SIZE_MAX: unlimited).
size_t LockedLeft();
void ReleaseLocked(size_t bytes);
// The error when a connection's minimum does not fit: names the amounts and `ulimit -l`.
Status MemlockError(size_t needed, size_t left);
// How often, in this process, a command's registration found no locked memory left and the
// command waited for the commands in flight to give theirs back (Expose), counted once per wait
// however often it is retried: what tests read to see the limit bite (a log line tells users).
uint64_t RegistrationWaitsForLockedMemory();
// A bind failed on this device: its windows are not used again in this process.
void MarkWindowsUnusable(const std::string& device);
// Zeroed, page-aligned; nullptr when out of memory. Freed with free().
uint8_t* AllocateRegion(size_t bytes);
// ibv_reg_mr with an error that names the likely cause.
Status RegisterMemory(ibv_pd* pd, uint8_t* addr, size_t length, int access, ibv_mr** mr);
// A verb that releases an object fails with EBUSY when something still uses the object: the
// object leaks, which a warning makes visible (softrdma enforces the order as hardware does).
void WarnIfReleaseFailed(const char* verb, int rc);

class IserMemory {
 public:
  // tgt refuses more than 512 KiB per command and direction (docs/iser-wire.md,
  // "tgt 1.0.85's iSER target").
  static constexpr uint32_t kDataSlotBytes = 512 * 1024;
  // From this size on the caller's buffer is registered instead of copied.
  static constexpr uint32_t kDirectBytes = 128 * 1024;
  static constexpr uint32_t kSmallSlotBytes = 64 * 1024;
  static constexpr uint32_t kSmallSlots = 64;
  static constexpr uint32_t kLargeSlots = 16;
  // The fewest SetUp takes when RLIMIT_MEMLOCK leaves little.
  static constexpr uint32_t kMinSmallSlots = 4;
  static constexpr uint32_t kMinLargeSlots = 1;
  static constexpr size_t kMinSlotBytes =
      size_t{kMinSmallSlots} * kSmallSlotBytes + size_t{kMinLargeSlots} * kDataSlotBytes;

  enum class StagStrategy { kWindows, kPerCommand, kPool };

  IserMemory() = default;
  ~IserMemory();
  IserMemory(const IserMemory&) = delete;
  IserMemory& operator=(const IserMemory&) = delete;

  // Allocates the slots in `pd` (as many as the memlock budget allows, down to the minimum) and
  // chooses how to expose them (see above). ISER_CONNECT_STAGS forces choices to measure them
  // (bench/iser-stags): "no-windows", "pool", "per-command" (the slots' strategy), "no-direct"
  // (every command copied through a slot), "direct" (large buffers registered, unmeasured).
  Status SetUp(ibv_pd* pd, const ibv_device_attr& attr);
  StagStrategy strategy() const { return strategy_; }
  // How STags are made, for logs and `session -P`.
  std::string StagMethod() const;

  // Gives the target access to the task's data from byte `sent` on: the STag and address for
  // the iSER header, and in *bind a window bind to post before the command (opcode
  // IBV_WR_BIND_MW) if any. Returns false when no slot is free (try again after a completion);
  // true with *error set when the command cannot be exposed at all, or when its ITT slot still
  // exposes an earlier command (a revocation was missed: overwriting would leak that STag).
  bool Expose(Task* task, uint32_t sent, uint32_t* stag, uint64_t* va, ibv_send_wr* bind,
              Status* error);
  // The task whose bytes are exposed under this ITT, or nullptr.
  Task* Exposed(uint32_t itt) const;
  // Ends the access Expose gave to the command with this ITT; for reads through a slot, copies
  // `data_in` bytes to the caller first. With `qp`, a window is invalidated by a LOCAL_INV
  // posted there (an error if that fails); without (the QP has failed), only the bookkeeping.
  Status Revoke(uint32_t itt, uint32_t data_in, ibv_qp* qp);
  // Revokes every exposure (the connection failed: nothing reaches the buffers any more).
  void RevokeAll();
  // Deregisters and frees everything.
  void Release();

 private:
  struct DataSlot {
    uint8_t* addr = nullptr;
    ibv_mr* mr = nullptr;  // windows: bindable, no remote access; pool: remote access
    ibv_mw* mw = nullptr;
    uint32_t stag = 0;  // the window's current key, or the pool registration's
  };
  struct Exposure {  // what one command in flight lets the target access
    Task* task = nullptr;
    DataSlot* slot = nullptr;  // bytes copied through this slot (its window or io_mr), and/or
    ibv_mr* io_mr = nullptr;   // a registration for this command alone
  };
  static constexpr uint32_t kIttSlots = 1024;  // the session's ITT table size

  Status Revoke(Exposure* e, uint32_t data_in, ibv_qp* qp);

  // SetUp's steps: windows if they can be had; else a registration's measured cost decides.
  bool TrySetUpWindows();
  Status SetUpRegistered(const std::string& stags);
  // The size of data slot i: the small ones come first.
  size_t SlotBytes(size_t i) const { return i < small_slots_ ? kSmallSlotBytes : kDataSlotBytes; }

  ibv_pd* pd_ = nullptr;
  StagStrategy strategy_ = StagStrategy::kPerCommand;
  bool direct_ = true;
  size_t locked_ = 0;                // reserved in the process's memlock budget
  uint32_t small_slots_ = 0;         // data_slots_ holds these small ones first, then the large
  uint32_t exposed_ = 0;             // commands exposed now
  bool waiting_for_locked_ = false;  // a registration found no locked memory; not yet retried
  bool told_locked_wait_ = false;    // that was logged on this connection
  std::vector<uint8_t*> regions_;    // page-aligned allocations, freed at Release
  std::vector<DataSlot> data_slots_;
  std::vector<DataSlot*> free_small_slots_;  // stacks: the most recently used first
  std::vector<DataSlot*> free_large_slots_;
  std::vector<Exposure> by_itt_;  // ITT slot bits → what that command exposes
};

}  // namespace iser
