// ServeTree: the process serving a tree of targets, ROOT/<target-iqn>/lun<N> (tree_file_system.h):
// the session daemon that `iser-connect login` starts, and a whole-portal mount. It holds every
// session of the tree (each target's paths, OpenPaths) and answers the control protocol (control.h)
// on its socket (state_dir.h), one connection at a time: logins, logouts, status and rescans.
// Rescans and the LUN watch below send their SCSI commands from a thread of their own, which
// replies to a rescan request when it is done: a target in recovery, whose commands wait up to its
// replacement timeout, delays only them, never the answers to status requests nor to logins and
// logouts of other targets.
//
// Start: the initial logins (or, for a whole-portal mount, a SendTargets discovery and a login to
// every target reported) happen before anything is mounted; then the tree is mounted, the control
// socket bound and the state file written, and only then is the caller's ReadyReporter released
// (nullptr: foreground). Any failure until then is returned, and nothing is left behind. At a
// whole-portal mount a target whose login fails is skipped with a warning, unless all fail.
//
// While serving: a login to a target already in the tree changes nothing and says so ("exists");
// a failed login leaves the other sessions alone. A rescan (the request; SIGHUP at a whole-portal
// mount) logs in to the targets the portal now reports that the tree lacks, and logs out of
// those it no longer reports (whole-portal mounts only), then reads every target's LUNs and
// capacities again: files appear for new disk LUNs, go for LUNs the target dropped, and show
// new sizes. The same LUN rescan runs by itself, within about a second, for a target any of
// whose paths got UNIT ATTENTION 3F/0E (reported LUNs data has changed) or 2A/09 (capacity data has
// changed): tgtd raises 3F/0E when a LUN is added or deleted. The process ends when a logout
// removes its last session, on SIGINT/SIGTERM (SIGHUP too for the session daemon) and when
// unmounted: every remaining target is flushed and logged out, the tree unmounted, the socket and
// state file removed.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "discovery/connect.h"
#include "discovery/url.h"
#include "frontends/fuse/lun_file_ops.h"
#include "frontends/fuse/serving.h"
#include "initiator/base/status.h"
#include "sessions/control.h"
#include "sessions/detach.h"
#include "sessions/state_dir.h"

namespace iser::fuse {

using sessions::HolderPaths;
using sessions::LoginSpec;
using sessions::ReadyReporter;

struct TreeServerOptions {
  HolderPaths paths;  // paths.root: the mount point, checked (CheckMountPoint) and absolute
  FileSystemConfig fs;
  FuseArgsSpec fuse;
  unsigned max_threads = 64;
  std::string pidfile;  // absolute; written once ready, removed at exit
  // A whole-portal mount: the portal (a URL without a target) and the options of its sessions.
  std::optional<LoginSpec> portal;
};

Status ServeTree(const TreeServerOptions& options, const std::vector<LoginSpec>& initial,
                 ReadyReporter* ready);

}  // namespace iser::fuse
