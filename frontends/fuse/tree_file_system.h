// TreeFileSystem: the FUSE low-level operations of a tree of targets, ROOT/<target-iqn>/lun<N>,
// whose targets are added (a login) and removed (a logout) while it is mounted. The LUN files
// behave exactly as a flat mount's (block_file_system.h): the operations on them are the same
// functions (lun_file_ops.h).
//
// Removing a target (Remove) is a logout: from then on opening its files fails with ENODEV; the
// requests already running on them finish; every writable LUN gets SYNCHRONIZE CACHE; every path
// logs out; the directory leaves the tree, and the kernel is told to forget the cached entries
// (fuse_lowlevel_notify_delete) so that no cached lookup keeps showing it. A file a process still
// holds open afterwards fails every operation with ENODEV: its device is gone. Inode numbers are
// never reused, so such a descriptor can never reach another target's LUN.
//
// A target's LUNs change while it is in the tree (the tree server's LUN rescan): AddLun puts a
// new file in its directory, RemoveLun takes one out as Remove does a directory (the kernel
// forgets the entry, later operations on an open descriptor fail with ENODEV, requests already
// running on it finish), and SizeChanged makes the kernel ask for a file's attributes again and
// drop the pages it cached (--page-cache): a LUN deleted and created again under its number with
// the same identity (tgtd's default) shows only in its capacity, and its blocks are not the old
// ones.
//
// Thread safety: every method may be called from any thread except the FUSE workers; Remove
// blocks until the target's running requests have finished.
#pragma once

#include <fuse_lowlevel.h>

#include <cstdint>
#include <ctime>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "frontends/fuse/lun_file_ops.h"
#include "frontends/fuse/lun_files.h"
#include "initiator/base/mutex.h"
#include "initiator/base/status.h"
#include "initiator/base/thread_annotations.h"
#include "initiator/paths/path_set.h"

namespace iser::fuse {

// What a login adds to the tree.
struct TreeTarget {
  std::string name;  // the target's IQN: its directory's name
  std::shared_ptr<PathSet> paths;
  std::vector<LunFile> files;
  // Every disk LUN of the target (the login's URL named none), so LUNs come and go with the
  // target's; false: only the URL's LUN, whose size alone is followed.
  bool all_luns = true;
  // Every file of the target, those a LUN rescan adds included, is read-only (LunFile).
  bool read_only = false;
};

// A target as `session` and the LUN rescan see it.
struct TreeTargetView {
  std::string name;
  std::shared_ptr<PathSet> paths;
  std::vector<std::string> files;                    // "<iqn>/lun<N>", relative to the root
  std::vector<std::shared_ptr<const LunFile>> luns;  // the same files, in LUN order
  bool all_luns = true;
  bool read_only = false;
};

class TreeFileSystem {
 public:
  explicit TreeFileSystem(const FileSystemConfig& config);
  TreeFileSystem(const TreeFileSystem&) = delete;
  TreeFileSystem& operator=(const TreeFileSystem&) = delete;

  // Operations whose userdata (fuse_session_new's last argument) is a TreeFileSystem*.
  static const fuse_lowlevel_ops& Ops();

  // The mounted session to send invalidations to; nullptr (before mounting, after unmounting):
  // none are sent.
  void SetNotifySession(fuse_session* se);

  // InvalidArgument if a target of that name is in the tree already.
  Status Add(TreeTarget target);
  bool Contains(const std::string& name) const;
  std::vector<std::string> Names() const;
  std::vector<TreeTargetView> Targets() const;
  // The logout described above; NotFound for an unknown target. Returns the first error of the
  // flush and the logout (the target is gone from the tree either way).
  Status Remove(const std::string& name);

  // A LUN the target now has: its file appears in the target's directory. InvalidArgument if
  // the file is there already, NotFound for an unknown target, and for a target whose paths are
  // not the file's device's: the rescan that opened the device looked at paths that a logout and
  // a login replaced meanwhile, and the file would fail every request.
  Status AddLun(const std::string& target, LunFile file);
  // A LUN the target no longer has: its file leaves the tree at once; requests already running
  // on it finish (they hold the file), nothing is flushed (the LUN is gone). NotFound when there
  // is no such file, and when the target's paths are not `paths` (what the caller found concerns
  // paths replaced since, not the LUNs of these).
  Status RemoveLun(const std::string& target, const PathSet& paths, const std::string& file);
  // The file's size changed: the kernel drops the attributes and the pages it cached.
  void SizeChanged(const std::string& target, const std::string& file);

 private:
  friend struct TreeOpsImpl;
  struct Node;
  // Where an inode leads: a target's directory (no file) or one of its files.
  struct InodeRef {
    std::shared_ptr<Node> node;
    std::shared_ptr<const LunFile> file;
  };
  // A file's inode, 0 if the target has no such file.
  uint64_t FileIno(const Node& node, const std::string& file) const ISER_REQUIRES(mu_);
  // A target's inode, or no node for the root and inodes not (or no longer) in the tree.
  InodeRef Resolve(uint64_t ino) const;
  void FillDirAttr(uint64_t ino, nlink_t links, struct stat* st) const;

  const FileSystemConfig config_;
  timespec mounted_at_{};
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<Node>> by_name_ ISER_GUARDED_BY(mu_);
  std::map<uint64_t, InodeRef> by_ino_ ISER_GUARDED_BY(mu_);
  uint64_t next_ino_ ISER_GUARDED_BY(mu_) = FUSE_ROOT_ID + 1;
  fuse_session* notify_ ISER_GUARDED_BY(mu_) = nullptr;
};

}  // namespace iser::fuse
