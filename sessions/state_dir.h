// Where the session daemon and the whole-portal mounts keep their tree and their state.
//
// The runtime directory is $ISER_CONNECT_RUNTIME_DIR if set (tests, containers), else /run when
// the effective uid is 0 and /run belongs to it, else $XDG_RUNTIME_DIR. So uid 0 of a user
// namespace that does not map the system's root (`unshare -r`, a rootless container sharing the
// host's /run), to which /run belongs to nobody, uses the user's places as any user does. The
// default tree ROOT is <runtime>/iser-connect; the state directory, which must not be inside any
// tree, is <runtime>/iser-connect.d (without a runtime directory: /tmp/iser-connect-<uid>.d, uid
// as the system sees it, usable only with an explicit mount point). Every process serving a tree
// keeps in the state directory, named after a hash of its mount point, its control socket
// (tree-<hash>.sock) and a state file (tree-<hash>.state: "pid <pid>\nroot <mount point>\nkind
// <kind>\ncomm <process name>\n", mode 0600). A lock on the directory itself (flock) serialises
// starting and ending tree processes.
//
// Whoever can write the state directory can answer the commands in place of a tree process, or
// make them connect elsewhere: every command checks it (CheckStateDir) before it uses it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "initiator/base/status.h"

namespace iser::sessions {

struct HolderPaths {
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
// The state directory is ours alone: a directory, not a symbolic link, owned by the effective
// uid, mode 0700. NotFound when it does not exist; InvalidArgument saying what is wrong when it
// is anything else (another user may have created it first, /tmp being everyone's).
Status CheckStateDir(const std::string& dir);
// Creates the state directory (mode 0700) if needed, then CheckStateDir.
Status EnsureStateDir(const std::string& dir);
// Takes the state directory's lock (blocking); the descriptor to close to release it, or -1.
int LockStateDir(const std::string& dir);
// The same without waiting: -1 also when another process holds it.
int TryLockStateDir(const std::string& dir);
// The paths of the tree mounted (or to be mounted) on root, an absolute path.
HolderPaths PathsForRoot(const std::string& root);
// The control sockets in the state directory: one per tree process, live or stale.
std::vector<std::string> ListHolderSockets(const std::string& state_dir);
// The state file beside a control socket of ListHolderSockets.
std::string StateFileOfSocket(const std::string& socket);

// The state file's contents.
struct HolderState {
  int pid = 0;
  std::string root;
  // "daemon", "portal", "mount" or "nbdkit" (holder.h); empty in a state file written before
  // kinds were.
  std::string kind;
  // The process's name (/proc/PID/comm) when it wrote the file; WriteHolderState fills it in.
  std::string comm;
};
Status WriteHolderState(const HolderPaths& paths, const HolderState& state);
Result<HolderState> ReadHolderState(const std::string& state_file);

// The process of a state file still runs: it exists, is not a zombie, and has the name the state
// file gives (a pid the system reused for another program does not; a file without a name:
// this process's).
bool HolderProcessAlive(const HolderState& state);

// root is a mount point now (in /proc/self/mountinfo).
bool IsMounted(const std::string& root);

}  // namespace iser::sessions
