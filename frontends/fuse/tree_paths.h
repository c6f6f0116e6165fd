// Where the session daemon and the whole-portal mounts keep their tree and their state.
//
// The runtime directory is $ISER_CONNECT_RUNTIME_DIR if set (tests, containers), else /run as
// root, else $XDG_RUNTIME_DIR. The default tree ROOT is <runtime>/iser-connect; the state
// directory, which must not be inside any tree, is <runtime>/iser-connect.d (without a runtime
// directory: /tmp/iser-connect-<uid>.d, usable only with an explicit mount point). The state
// directory is mode 0700 and owned by the user; every process serving a tree keeps there, named
// after a hash of its mount point, its control socket (tree-<hash>.sock), a state file
// (tree-<hash>.state: "pid <pid>\nroot <mount point>\n", mode 0600). A lock on the directory
// itself (flock) serialises starting and ending tree processes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "initiator/base/status.h"

namespace iser::fuse {

struct TreePaths {
  std::string root;  // the tree's mount point, absolute
  std::string state_dir;
  std::string socket;
  std::string state_file;
};

// The runtime directory described above, if there is one.
std::optional<std::string> RuntimeDir();
// The default ROOT; an error asking for --mountpoint without a runtime directory.
Result<std::string> DefaultTreeRoot();
// The state directory (not created).
std::string StateDir();
// Creates the state directory if needed; refuses one that is not a directory owned by this user
// with mode 0700 (another user could otherwise reach the sockets or plant a symlink).
Status EnsureStateDir(const std::string& dir);
// Takes the state directory's lock (blocking); the descriptor to close to release it, or -1.
int LockStateDir(const std::string& dir);
// The paths of the tree mounted (or to be mounted) on root, an absolute path.
TreePaths PathsForRoot(const std::string& root);
// The control sockets in the state directory: one per tree process, live or stale.
std::vector<std::string> ListTreeSockets(const std::string& state_dir);

// The state file's contents.
struct TreeState {
  int pid = 0;
  std::string root;
};
Status WriteTreeState(const TreePaths& paths, const TreeState& state);
Result<TreeState> ReadTreeState(const std::string& state_file);

// The process of a state file still runs: it exists, is not a zombie, and is an iser-connect
// (a pid the system reused for another program is not).
bool TreeProcessAlive(int pid);

// root is a mount point now (in /proc/self/mountinfo).
bool IsMounted(const std::string& root);

}  // namespace iser::fuse
