// The node record store: a directory CONFIG holding CONFIG/nodes/<iqn>/<host>,<port>,<tpgt>, one
// file per record (discovery/node_record.h), laid out as open-iscsi lays out its nodes, and a lock
// file CONFIG/lock (docs/nodes.md, "The store").
//
// Guarantees:
// - Every write is atomic: the record goes to a temporary file in its directory, is fsynced and
//   renamed over the old one, and the directory is fsynced; a reader sees the old record or the
//   new one, never a mix, and a crash leaves no partial record (temporary files start with '.'
//   and are ignored, and removed by the next writer to that directory).
// - Read-modify-write cycles hold an exclusive flock on CONFIG/lock: writers take a Lock and every
//   mutating call requires it, so two processes updating one store never lose each other's
//   records. Lock-free reads (List without a Lock) take the lock shared, so they never see the
//   moment a record is renamed for a new tpgt.
// - Modes: directories 0700, record files and the lock 0600 (records may hold CHAP secrets). A
//   directory or record that others can access, found when opening or reading, is repaired to
//   0700/0600 with a warning in the log (a secret in it may have been read already); one that
//   cannot be repaired is an error.
// - Errors about the directory or its files (cannot create, read, write, lock, a malformed
//   record) are StatusCode::kIoError naming the path (and line); the CLI reports them with
//   iscsiadm's exit code for its database (6).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "discovery/node_record.h"
#include "initiator/base/status.h"

namespace iser {

// Where the store lives when no --config-dir is given: as root /etc/iser-connect, else
// $XDG_CONFIG_HOME/iser-connect (only if absolute, as the XDG spec asks), else
// $HOME/.config/iser-connect. xdg_config_home and home may be null (unset).
Result<std::string> DefaultNodeConfigDir(uid_t euid, const char* xdg_config_home, const char* home);
// The same for this process (geteuid and the environment).
Result<std::string> DefaultNodeConfigDir();

class NodeStore;
// NodeStore::Open of config_dir, or of DefaultNodeConfigDir() when it is empty.
Result<NodeStore> OpenNodeStore(const std::string& config_dir, bool create);

class NodeStore {
 public:
  // An exclusive hold on the store's lock; released when destroyed.
  class Lock {
   public:
    Lock(Lock&& other) noexcept;
    Lock& operator=(Lock&&) = delete;
    ~Lock();

   private:
    friend class NodeStore;
    // Result holds an empty Lock while it holds an error; nobody else can make one.
    template <typename>
    friend class Result;
    Lock() = default;
    explicit Lock(int fd) : fd_(fd) {}
    int fd_ = -1;
  };

  // create: make CONFIG and CONFIG/nodes (mode 0700, parents too) when missing; otherwise a
  // missing CONFIG is an empty store (List finds nothing; Lock fails naming it).
  static Result<NodeStore> Open(std::string config_dir, bool create);

  const std::string& dir() const { return dir_; }

  // Blocks until no other Lock is held. Not reentrant: flock locks belong to an open file, so a
  // second Acquire while this process holds a Lock (RecordDiscovery acquires one) waits forever.
  Result<Lock> Acquire();

  // Every record, sorted by name, then portal host and port.
  Result<std::vector<NodeRecord>> List() const;
  Result<std::vector<NodeRecord>> List(const Lock& lock) const;
  // The records for target `name` (empty: any) at `portal` (unset: any), sorted as List's. With a
  // name, only that target's records are read: a malformed record of another does not matter.
  Result<std::vector<NodeRecord>> Find(std::string_view name, const std::optional<Portal>& portal,
                                       const Lock* lock = nullptr) const;

  // Writes the record (identity checked: CheckNodeIdentity). A record for the same target and
  // portal under another tpgt is replaced (its file removed).
  Status Write(const Lock& lock, const NodeRecord& record);
  // Removes the record's file (and its target's directory once empty); NotFound if absent.
  Status Remove(const Lock& lock, const NodeRecord& record);

  // The record's file path.
  std::string PathOf(const NodeRecord& record) const;

 private:
  template <typename>
  friend class Result;  // for its empty value while it holds an error
  NodeStore() = default;
  explicit NodeStore(std::string dir) : dir_(std::move(dir)) {}
  // Only target `name`'s records when it is not empty.
  Result<std::vector<NodeRecord>> ListUnlocked(std::string_view name = {}) const;
  // Takes the lock shared on a new descriptor *fd, which the caller closes (-1: no lock file yet,
  // and on error).
  Status LockShared(int* fd) const;
  std::string dir_;
};

}  // namespace iser
