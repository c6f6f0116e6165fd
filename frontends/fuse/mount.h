// RunMount: `iser-connect mount URL MOUNTPOINT`. Exposes the disk LUNs of an iSCSI target as
// regular files in a FUSE file system and serves them until unmounted.
//
// Files: a URL with a LUN exposes that LUN as one file, a URL without a LUN exposes every disk LUN
// the target reports (the controller LUN 0 of tgtd and other non-disk LUNs are skipped). Each file
// is named "lun<N>" after its LUN number and has the LUN's exact size; see block_file_system.h
// for the file semantics. The target is reached through its paths (OpenPaths: one session per
// portal unless the URL says multipath=off, docs/multipath.md).
//
// A URL without a target (iscsi://PORTAL) mounts every target a SendTargets discovery at the
// portal reports, as MOUNTPOINT/<target-iqn>/lun<N>, served by the tree of the session daemon
// (tree_server.h): SIGHUP or `iser-connect session --rescan` discovers again, logging in to the
// targets the portal added and out of those it dropped; `session` lists its sessions.
//
// Life cycle: the mount point must be an existing, empty directory. Unless foreground is set,
// RunMount detaches: it forks before anything else runs (the sessions' I/O threads must live in
// the process that serves the mount), the child connects, mounts, writes the pid file and only
// then releases the parent, whose RunMount returns OK. Any failure up to that point (bad mount
// point, unreachable portal, failed login, no LUN) is returned by the parent's RunMount with its
// Status code and message, so the caller reports it and exits non-zero as it would in the
// foreground. SIGINT, SIGTERM, SIGHUP or `fusermount3 -u` end the mount: in-flight requests
// finish, every LUN gets SYNCHRONIZE CACHE, every path logs out, the mount is removed. With
// auto_unmount a crash still leaves no dead mount behind (fusermount3 watches the process, and
// an UnmountGuard covers the case fusermount3 misses).
//
// RunMount returns in the serving process after the mount has ended (OK, or the first error of
// the shutdown: a failed flush or logout), and in a detaching parent once the child is ready.
#pragma once

#include <string>

#include "discovery/connect.h"
#include "discovery/url.h"
#include "initiator/base/status.h"

namespace iser::fuse {

struct MountOptions {
  IscsiUrl url;
  ConnectOptions connect;
  std::string mountpoint;
  bool foreground = false;
  std::string pidfile;       // written once the mount is ready, removed at exit
  bool page_cache = false;   // false: direct I/O (no second cache above the target's)
  bool read_only = false;    // also implied per file by a write-protected LUN
  bool allow_other = false;  // let other users open the files (needs user_allow_other if not root)
  bool auto_unmount = true;
  unsigned max_threads = 64;  // FUSE worker threads: bounds the requests served concurrently
  bool fuse_debug = false;    // libfuse's request trace on stderr (implies nothing else)
};

Status RunMount(const MountOptions& options);

}  // namespace iser::fuse
