// nbdkit-iser-plugin: serves the LUNs of iSCSI (or iSER) targets as NBD exports.
//
//   nbdkit iser iscsi://HOST[:PORT]/TARGET-IQN[/LUN] [initiator=IQN] [user=U password=-] ...
//   nbdkit iser iscsi://HOST[:PORT]     every target the portal reports (SendTargets)
//
// Exports: with a target in the URL, every disk LUN of it, named by its number; with a portal
// only, every disk LUN of every target, named "<target-iqn>/<lun>". The targets are those the
// portal reported when nbdkit started.
//
// One callback per NBD operation, each a thin mapping onto BlockDevice (the SCSI mapping table is
// in docs/interop.md, "NBD operations and SCSI commands"). Life cycle:
//   config / config_complete  parse and check the parameters; nothing touches the network.
//   get_ready                 (portal: discover the targets,) log in, find the first disk LUN
//                             for the default export, log out again: a bad URL, an unreachable
//                             portal or a wrong password stops nbdkit here, before it forks into
//                             the background. Over iSER this runs in a child process: an RDMA
//                             device opened before nbdkit's fork is not usable after it (a verbs
//                             context and its registrations do not survive fork).
//   after_fork                with a target in the URL, log in for good to every path
//                             (discovery/connect.h, OpenPaths): the sessions' I/O threads must be
//                             started in the process that serves (threads do not survive
//                             nbdkit's fork). A portal's targets are logged in to at the first
//                             list or open that needs them, so that a portal with many targets
//                             costs only the sessions clients use.
//                             Then nbdkit registers in the session table of its user
//                             (sessions/holder.h), so that `iser-connect session` lists its
//                             sessions and `logout` reaches them (ending nbdkit).
//   cleanup                   log out of every target once every connection has closed.
// Every NBD connection to a target's exports shares its paths (one session per portal with
// multipath, docs/multipath.md) and one BlockDevice per LUN, so requests from all connections are
// in flight together and SYNCHRONIZE CACHE from any of them covers all writes, whichever path
// carried them: the cache is the LUN's (hence can_multi_conn).

#define NBDKIT_API_VERSION 2
// Requests run in parallel on nbdkit's threads; BlockDevice is safe to call from all of them.
#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL
#include <nbdkit-plugin.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "discovery/connect.h"
#include "discovery/discovery.h"
#include "discovery/seconds.h"
#include "discovery/url.h"
#include "initiator/base/log.h"
#include "initiator/base/mutex.h"
#include "initiator/base/notification.h"
#include "initiator/base/status.h"
#include "initiator/block/block_device.h"
#include "initiator/block/lun_info.h"
#include "sessions/client.h"
#include "sessions/holder.h"

// -D iser.verbose=1 logs the library's protocol events (login keys, async events) as nbdkit
// debug messages. nbdkit finds the flag by this name, so it keeps C linkage and stays exported.
extern "C" {
NBDKIT_DLL_PUBLIC int iser_debug_verbose = 0;
}

namespace {

using iser::BlockDevice;
using iser::Result;
using iser::Status;

// Configuration, fixed once config_complete has run.
std::optional<iser::IscsiUrl> g_url;
std::string g_url_text;
iser::ConnectOptions g_connect;
std::optional<std::string> g_user;
std::optional<std::string> g_target_user;
std::optional<std::vector<iser::DigestType>> g_digest;

// One target served: where it is, and once logged in, its paths and the LUNs opened so far.
struct Target {
  iser::IscsiUrl url;         // EffectiveUrl() naming this target
  std::string export_prefix;  // "" when the URL names the target, else "<target-iqn>/"
  iser::Mutex mu;
  std::shared_ptr<iser::PathSet> paths ISER_GUARDED_BY(mu);
  std::map<uint64_t, std::unique_ptr<BlockDevice>> devices ISER_GUARDED_BY(mu);
  // The disk LUNs the last list showed, to log what changed since (the target adds and deletes
  // LUNs while we serve it; its UNIT ATTENTION 3F/0E is logged by the session).
  std::optional<std::set<uint64_t>> listed ISER_GUARDED_BY(mu);
  // The paths as the session table sees them: mu is held across logins and SCSI commands, which
  // the table's requests must not wait for (sessions/holder.h). Taken after mu, never before.
  iser::Mutex table_mu;
  std::shared_ptr<iser::PathSet> table_paths ISER_GUARDED_BY(table_mu);
};

// Serving state, set up in get_ready and fixed from then on (each Target guards its own state).
bool g_whole_portal = false;  // the URL names no target
std::vector<std::unique_ptr<Target>> g_targets;
std::string g_default_export;

// Reports a failure the nbdkit way: the message once, and the errno the client will see.
int Fail(const Status& st) {
  nbdkit_error("%s", st.message().c_str());
  nbdkit_set_error(iser::ErrnoFor(st));
  return -1;
}

void LogToNbdkit(iser::LogLevel level, const std::string& message) {
  switch (level) {
    case iser::LogLevel::kDebug:
    case iser::LogLevel::kInfo:
      nbdkit_debug("%s", message.c_str());
      break;
    case iser::LogLevel::kWarning:
      nbdkit_error("warning: %s", message.c_str());
      break;
    case iser::LogLevel::kError:
      nbdkit_error("%s", message.c_str());
      break;
  }
}

// "crc32c", "none", or a preference order as in iSCSI URLs ("crc32c-none", "none-crc32c").
std::optional<std::vector<iser::DigestType>> ParseDigest(std::string_view text) {
  using iser::DigestType;
  if (text == "crc32c") return std::vector{DigestType::kCrc32c};
  if (text == "none") return std::vector{DigestType::kNone};
  if (text == "crc32c-none") return std::vector{DigestType::kCrc32c, DigestType::kNone};
  if (text == "none-crc32c") return std::vector{DigestType::kNone, DigestType::kCrc32c};
  return std::nullopt;
}

// nbdkit_read_password understands "-" (prompt), "+FILE" and "-FD" as well as the secret itself.
std::optional<std::string> ReadPassword(const char* value) {
  char* secret = nullptr;
  if (nbdkit_read_password(value, &secret) == -1) return std::nullopt;
  std::string s(secret);
  free(secret);
  return s;
}

// The effective URL: the magic key plus the parameters that override or complete it.
iser::IscsiUrl EffectiveUrl() {
  iser::IscsiUrl url = *g_url;
  if (g_user) url.user = *g_user;
  if (g_target_user) url.target_user = *g_target_user;
  if (g_digest) {
    url.header_digest = g_digest;
    url.data_digest = g_digest;
  }
  return url;
}

// The LUN's size now: a LUN the target resized shows its new size.
std::string Describe(BlockDevice& dev) {
  const iser::LunInfo& info = dev.info();
  std::string d = info.vendor;
  if (!info.product.empty()) d += (d.empty() ? "" : " ") + info.product;
  if (!info.revision.empty()) d += " " + info.revision;
  return d + ", LUN " + std::to_string(info.lun) + ", " + std::to_string(dev.size_bytes()) +
         " bytes";
}

// The target's paths, logged in to on first use; a failed login is tried again next time.
Result<std::shared_ptr<iser::PathSet>> PathsOf(Target& t) {
  iser::MutexLock lock(&t.mu);
  if (t.paths) return t.paths;
  Result<std::shared_ptr<iser::PathSet>> p = iser::OpenPaths(t.url, g_connect);
  if (!p.ok()) {
    return Status(p.status().code(), t.url.Redacted() + ": " + p.status().message());
  }
  t.paths = std::move(*p);
  iser::MutexLock table_lock(&t.table_mu);
  t.table_paths = t.paths;
  return t.paths;
}

// The BlockDevice of a disk LUN, opened (probed) on first use and shared by every connection.
Result<BlockDevice*> DeviceFor(Target& t, uint64_t lun) {
  Result<std::shared_ptr<iser::PathSet>> paths = PathsOf(t);
  if (!paths.ok()) return paths.status();
  iser::MutexLock lock(&t.mu);
  auto it = t.devices.find(lun);
  if (it != t.devices.end()) return it->second.get();
  Result<std::unique_ptr<BlockDevice>> dev = BlockDevice::Open(*paths, lun);
  if (!dev.ok()) return dev.status();
  BlockDevice* p = dev->get();
  const iser::LunInfo& i = p->info();
  const std::string target = g_whole_portal ? t.url.target + " " : "";
  nbdkit_debug("%sLUN %" PRIu64
               ": %s; blocks %u/%u, max transfer %u, read_only=%d wce=%d "
               "dpofua=%d lbpme=%d lbpu=%d lbpws=%d lbprz=%d rotational=%d",
               target.c_str(), lun, Describe(*p).c_str(), i.logical_block_size,
               i.physical_block_size, i.max_transfer_bytes, i.read_only, i.write_cache, i.fua,
               i.thin, i.unmap, i.write_same_unmap, i.unmapped_reads_zero, i.rotational);
  t.devices.emplace(lun, std::move(*dev));
  return p;
}

// Reads the LUN's capacity again: a target may resize a LUN without a unit attention (tgtd
// deletes and creates it again), so each list and each new connection asks. A LUN that has
// other blocks now cannot be served by this BlockDevice; a failing READ CAPACITY keeps the size.
Status RefreshSize(BlockDevice& dev) {
  Result<uint64_t> size = dev.RefreshSize();
  if (size.status().code() == iser::StatusCode::kNotSupported) return size.status();
  if (!size.ok()) nbdkit_debug("%s", size.status().message().c_str());
  return Status::OK();
}

std::optional<uint64_t> ParseLun(std::string_view name) {
  uint64_t lun = 0;
  auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), lun);
  if (name.empty() || ec != std::errc() || end != name.data() + name.size()) return std::nullopt;
  return lun;
}

// ---- Configuration ----------------------------------------------------------------------------

int IserConfig(const char* key, const char* value) {
  const std::string k = key;
  if (k == "url") {
    Result<iser::IscsiUrl> url = iser::ParseIscsiUrl(value);
    if (!url.ok()) {
      nbdkit_error("url: %s", url.status().message().c_str());
      return -1;
    }
    g_url = std::move(*url);
    g_url_text = g_url->Redacted();
  } else if (k == "initiator") {
    g_connect.initiator_name = value;
  } else if (k == "user") {
    g_user = value;
  } else if (k == "password") {
    g_connect.password = ReadPassword(value);
    if (!g_connect.password) return -1;
  } else if (k == "target-user") {
    g_target_user = value;
  } else if (k == "target-password") {
    g_connect.target_password = ReadPassword(value);
    if (!g_connect.target_password) return -1;
  } else if (k == "digest") {
    g_digest = ParseDigest(value);
    if (!g_digest) {
      nbdkit_error("digest: expected crc32c, none, crc32c-none or none-crc32c, not '%s'", value);
      return -1;
    }
  } else if (k == "transport") {
    const std::string v = value;
    if (v == "tcp") {
      g_connect.transport = iser::TransportKind::kTcp;
    } else if (v == "iser") {
      g_connect.transport = iser::TransportKind::kIser;
    } else {
      nbdkit_error("transport: expected tcp or iser, not '%s'", value);
      return -1;
    }
  } else if (k == "timeout") {
    uint32_t seconds = 0;
    if (nbdkit_parse_uint32_t("timeout", value, &seconds) == -1) return -1;
    if (seconds == 0) {
      nbdkit_error("timeout: must be at least 1 second");
      return -1;
    }
    g_connect.login_timeout = std::chrono::seconds(seconds);
  } else if (k == "replacement_timeout" || k == "command_timeout") {
    Result<std::chrono::milliseconds> t = iser::ParseSeconds(k, value);
    if (!t.ok()) {
      nbdkit_error("%s", t.status().message().c_str());
      return -1;
    }
    (k == "replacement_timeout" ? g_connect.replacement_timeout : g_connect.command_timeout) = *t;
  } else {
    nbdkit_error("unknown parameter '%s' (see nbdkit iser --help)", key);
    return -1;
  }
  return 0;
}

int IserConfigComplete() {
  if (!g_url) {
    nbdkit_error("an iSCSI URL is required: nbdkit iser iscsi://HOST[:PORT][/TARGET-IQN[/LUN]]");
    return -1;
  }
  g_whole_portal = g_url->target.empty();
  // Catches a missing password now rather than at login, naming the ways nbdkit takes one.
  g_connect.password_hint = "password=- (prompt), password=+FILE or password=-FD";
  g_connect.target_password_hint =
      "target-password=- (prompt), target-password=+FILE or target-password=-FD";
  g_connect.user_hint = "user=USER";
  g_connect.target_user_hint = "target-user=USER";
  iser::IscsiUrl url = EffectiveUrl();
  if (Status st = iser::ResolveCredentials(&url, g_connect); !st.ok()) {
    nbdkit_error("%s", st.message().c_str());
    return -1;
  }
  iser::SetLogSink(&LogToNbdkit,
                   iser_debug_verbose ? iser::LogLevel::kDebug : iser::LogLevel::kInfo);
  return 0;
}

// ---- Server life cycle ------------------------------------------------------------------------

// The LUN to serve by default: the given one if it is a disk, else the first disk LUN reported,
// else none.
Result<std::optional<uint64_t>> DefaultLun(iser::Session& session, std::optional<uint64_t> lun) {
  if (lun) {
    Result<iser::LunInfo> info = iser::ProbeLun(session, *lun);
    if (!info.ok()) return info.status();
    if (!info->is_disk) {
      return Status::NotSupported("LUN " + std::to_string(*lun) + " is a " +
                                  info->device_type_name + " device, not a disk");
    }
    return lun;
  }
  Result<std::vector<uint64_t>> luns = iser::ReportLuns(session);
  if (!luns.ok()) return luns.status();
  for (uint64_t l : *luns) {
    Result<iser::LunInfo> info = iser::ProbeLun(session, l);
    if (!info.ok()) return info.status();
    if (info->is_disk) return std::optional<uint64_t>(l);
  }
  return std::optional<uint64_t>();
}

// Logs in to the target, finds its default LUN and logs out again (get_ready runs before
// nbdkit forks, and the session's thread would not survive the fork). One session, whatever the
// URL's paths: the LUNs are the same through each.
Result<std::optional<uint64_t>> ProbeTarget(const Target& t) {
  Result<std::shared_ptr<iser::Session>> s = iser::OpenSession(t.url, g_connect);
  if (!s.ok()) return s.status();
  Result<std::optional<uint64_t>> lun = DefaultLun(**s, t.url.lun);
  Status closed = (*s)->Close();
  if (lun.ok() && !closed.ok()) return closed;
  return lun;
}

void AddTarget(const std::string& name, std::string export_prefix) {
  auto t = std::make_unique<Target>();
  t->url = EffectiveUrl();
  t->url.target = name;
  t->export_prefix = std::move(export_prefix);
  g_targets.push_back(std::move(t));
}

// The portal's targets, in the order SendTargets reports them. Their paths go through the portal
// the URL names, which answered the discovery, and unless multipath=off through every other
// portal each target reports (OpenPaths).
Status DiscoverPortal() {
  iser::IscsiUrl url = EffectiveUrl();
  ISER_RETURN_IF_ERROR(iser::ResolveCredentials(&url, g_connect));
  Result<iser::SessionOptions> so = iser::DiscoverySessionOptionsFor(url, g_connect);
  if (!so.ok()) return so.status();
  Result<std::vector<iser::DiscoveredTarget>> found = iser::DiscoverTargets(*so);
  if (!found.ok()) return found.status();
  if (found->empty()) {
    return Status::NotFound("the portal reports no target (is this initiator allowed to see any?)");
  }
  for (const iser::DiscoveredTarget& d : *found) AddTarget(d.name, d.name + "/");
  return Status::OK();
}

// get_ready's work: fills g_targets and g_default_export.
Status FindTargets() {
  Status st = g_whole_portal ? DiscoverPortal() : Status::OK();
  if (!g_whole_portal) AddTarget(g_url->target, "");
  // The default export is the first disk LUN of the first target that has one.
  for (size_t i = 0; st.ok() && g_default_export.empty() && i < g_targets.size(); ++i) {
    const Target& t = *g_targets[i];
    Result<std::optional<uint64_t>> lun = ProbeTarget(t);
    st = lun.status();
    if (st.ok() && *lun) g_default_export = t.export_prefix + std::to_string(**lun);
  }
  if (st.ok() && g_default_export.empty()) {
    st = Status::NotFound(g_whole_portal ? "no target of the portal has a disk LUN"
                                         : "the target has no disk LUN");
  }
  return st;
}

bool UsesRdma() {
  return g_connect.transport.value_or(g_url->transport) == iser::TransportKind::kIser;
}

// FindTargets in a child process, so that this one (nbdkit's, about to fork) never opens an
// RDMA device. The child reports on a pipe, one item per line: the status code, its message,
// the default export, then "<target>\t<export prefix>" per target.
Status FindTargetsInChild() {
  int fds[2];
  if (pipe(fds) != 0) return Status::ResourceExhausted(std::string("pipe: ") + strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return Status::ResourceExhausted(std::string("fork: ") + strerror(errno));
  }
  if (pid == 0) {
    close(fds[0]);
    const Status st = FindTargets();
    std::string message = st.message();
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::string out = std::to_string(static_cast<int>(st.code())) + "\n" + message + "\n" +
                      g_default_export + "\n";
    for (const std::unique_ptr<Target>& t : g_targets) {
      out += t->url.target + "\t" + t->export_prefix + "\n";
    }
    for (size_t done = 0; done < out.size();) {
      const ssize_t n = write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) _exit(1);
      done += static_cast<size_t>(n);
    }
    _exit(0);  // nbdkit's atexit handlers and our statics belong to the parent
  }
  close(fds[1]);
  std::string in;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  std::vector<std::string> lines;
  for (size_t start = 0, end; (end = in.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(in.substr(start, end - start));
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0 || lines.size() < 3) {
    return Status::ConnectionFailed(
        "the process probing the target over iSER ended without an answer (" +
        (WIFSIGNALED(wstatus) ? "signal " + std::to_string(WTERMSIG(wstatus))
                              : "exit status " + std::to_string(WEXITSTATUS(wstatus))) +
        ")");
  }
  for (size_t i = 3; i < lines.size(); ++i) {
    const size_t tab = lines[i].find('\t');
    AddTarget(lines[i].substr(0, tab), tab == std::string::npos ? "" : lines[i].substr(tab + 1));
  }
  g_default_export = lines[2];
  return Status(static_cast<iser::StatusCode>(std::stoi(lines[0])), lines[1]);
}

int IserGetReady() {
  const Status st = UsesRdma() ? FindTargetsInChild() : FindTargets();
  if (!st.ok()) {
    nbdkit_error("%s: %s", g_url_text.c_str(), st.message().c_str());
    return -1;
  }
  nbdkit_debug("%s: %zu target(s), default export %s", g_url_text.c_str(), g_targets.size(),
               g_default_export.c_str());
  return 0;
}

// This nbdkit in the session table: `iser-connect session` lists the sessions it has open, and a
// logout of them ends nbdkit, since its exports go with its sessions. A whole portal's sessions
// end together, so a logout of one target of several is refused (logout --all ends them).
class NbdkitHolder : public iser::sessions::Holder {
 public:
  Status Login(const iser::sessions::LoginSpec&, bool* exists) override {
    *exists = false;
    return Status::NotSupported("nbdkit serves the targets of its URL only");
  }
  iser::sessions::Json Logout(const iser::sessions::Json& request, bool* last) override {
    const std::vector<std::string> held = TargetsWithSessions();
    const std::string target = request.value("target", std::string());
    const bool all = request.value("all", false);
    if (!all && std::find(held.begin(), held.end(), target) == held.end()) {
      return iser::sessions::ReplyFor(Status::NotFound("no session with " + target));
    }
    if (!all && held.size() > 1) {
      return iser::sessions::ReplyFor(Status::NotSupported(
          "nbdkit (pid " + std::to_string(getpid()) + ") serves " + g_url->Redacted() + " with " +
          std::to_string(held.size()) +
          " sessions, which end together with it: logout --all, or stop that nbdkit"));
    }
    // A whole portal none of whose targets a client used yet has nothing to log out of, and
    // keeps serving.
    *last = !held.empty();
    iser::sessions::Json reply = iser::sessions::ReplyFor(Status::OK());
    reply["targets"] = held;
    return reply;
  }
  iser::sessions::Json Sessions(const std::string& only_target) override {
    iser::sessions::Json out = iser::sessions::Json::array();
    for (const std::unique_ptr<Target>& t : g_targets) {
      if (!only_target.empty() && t->url.target != only_target) continue;
      iser::MutexLock lock(&t->table_mu);
      if (!t->table_paths) continue;
      // One entry per target (SessionStatus lists its paths).
      iser::sessions::Json status =
          iser::sessions::SessionStatus(*t->table_paths, t->url.target, {}, false);
      // Whether its exports are read-only is nbdkit's -r, which a plugin is not told.
      status.erase("read_only");
      out.push_back(std::move(status));
    }
    return out;
  }
  void Rescan(int fd) override { iser::sessions::ReplyNothingToRescan(fd); }
  // The reply to the logout waits in the server until cleanup has logged out (Finish).
  void End() override { nbdkit_shutdown(); }

 private:
  static std::vector<std::string> TargetsWithSessions() {
    std::vector<std::string> held;
    for (const std::unique_ptr<Target>& t : g_targets) {
      iser::MutexLock lock(&t->table_mu);
      if (t->table_paths) held.push_back(t->url.target);
    }
    return held;
  }
};

NbdkitHolder g_holder;
std::unique_ptr<iser::sessions::HolderServer> g_holder_server;

// Without a usable state directory nbdkit serves all the same, unlisted.
void RegisterInSessionTable() {
  iser::sessions::RemoveGoneHolders("nbdkit");
  // Named after the process: two nbdkits may serve one URL.
  iser::sessions::HolderPaths paths =
      iser::sessions::PathsForRoot("nbdkit:" + std::to_string(getpid()));
  paths.root = g_url->Redacted();
  auto server = std::make_unique<iser::sessions::HolderServer>(paths, "nbdkit");
  if (Status st = server->Register(); !st.ok()) {
    nbdkit_debug("not listed in the session table: %s", st.message().c_str());
    server->Finish();
    return;
  }
  server->Start(&g_holder);
  g_holder_server = std::move(server);
}

int IserAfterFork() {
  if (!g_whole_portal) {
    Result<std::shared_ptr<iser::PathSet>> p = PathsOf(*g_targets.front());
    if (!p.ok()) {
      nbdkit_error("%s", p.status().message().c_str());
      return -1;
    }
  }
  RegisterInSessionTable();
  return 0;
}

void IserCleanup() {
  // No request is answered from now on; a logout's reply waits for the logouts below.
  if (g_holder_server) g_holder_server->Stop();
  for (const std::unique_ptr<Target>& t : g_targets) {
    iser::MutexLock lock(&t->mu);
    {
      iser::MutexLock table_lock(&t->table_mu);
      t->table_paths.reset();
    }
    t->devices.clear();
    if (!t->paths) continue;
    if (Status st = iser::sessions::LogOut(*t->paths); !st.ok()) {
      nbdkit_debug("logout from %s: %s", t->url.Redacted().c_str(), st.message().c_str());
    }
    t->paths.reset();
  }
  if (g_holder_server) {
    g_holder_server->Finish();
    g_holder_server.reset();
  }
}

// ---- Exports: one per disk LUN ----------------------------------------------------------------

// Logs the disk LUNs that appeared and went since the target's last list.
void LogListChanges(Target& t, const std::set<uint64_t>& disks) {
  iser::MutexLock lock(&t.mu);
  if (t.listed) {
    for (uint64_t lun : disks) {
      if (!t.listed->count(lun)) {
        nbdkit_debug("%s: LUN %" PRIu64 " appeared: export %s%" PRIu64, t.url.target.c_str(), lun,
                     t.export_prefix.c_str(), lun);
      }
    }
    for (uint64_t lun : *t.listed) {
      if (!disks.count(lun)) {
        nbdkit_debug("%s: LUN %" PRIu64 " is gone: export %s%" PRIu64 " no longer listed",
                     t.url.target.c_str(), lun, t.export_prefix.c_str(), lun);
      }
    }
  }
  t.listed = disks;
}

// Adds the disk LUNs of one target.
Status ListTarget(Target& t, struct nbdkit_exports* exports) {
  Result<std::shared_ptr<iser::PathSet>> paths = PathsOf(t);
  if (!paths.ok()) return paths.status();
  Result<std::vector<uint64_t>> luns = iser::ReportLuns(**paths);
  if (!luns.ok()) return luns.status();
  std::set<uint64_t> disks;
  for (uint64_t lun : *luns) {
    Result<BlockDevice*> dev = DeviceFor(t, lun);
    if (!dev.ok() && dev.status().code() == iser::StatusCode::kNotSupported)
      continue;  // not a disk
    if (!dev.ok()) return dev.status();
    if (Status st = RefreshSize(**dev); !st.ok()) {
      nbdkit_error("%s", st.message().c_str());
      continue;
    }
    disks.insert(lun);
    const std::string name = t.export_prefix + std::to_string(lun);
    if (nbdkit_add_export(exports, name.c_str(), Describe(**dev).c_str()) == -1) {
      return Status::ResourceExhausted("nbdkit took no more exports at " + name);
    }
  }
  LogListChanges(t, disks);
  return Status::OK();
}

// A portal's target that cannot be listed now (its login fails) is left out of the list with an
// error in the log, so the others stay usable; listing fails only when no target could be listed.
int IserListExports(int /*readonly*/, int /*is_tls*/, struct nbdkit_exports* exports) {
  Status first_error;
  size_t listed = 0;
  for (const std::unique_ptr<Target>& t : g_targets) {
    Status st = ListTarget(*t, exports);
    if (st.ok()) {
      ++listed;
    } else {
      if (g_whole_portal)
        nbdkit_error("listing %s: %s", t->url.target.c_str(), st.message().c_str());
      if (first_error.ok()) first_error = st;
    }
  }
  return listed > 0 ? 0 : Fail(first_error);
}

const char* IserDefaultExport(int /*readonly*/, int /*is_tls*/) {
  return g_default_export.c_str();
}

// An export name's target and LUN: a LUN number, or with a whole portal "<target-iqn>/<lun>"
// (IQNs contain no '/', so the last one separates the LUN).
Result<std::pair<Target*, uint64_t>> ParseExportName(const std::string& name) {
  const size_t slash = name.rfind('/');
  const std::string prefix = slash == std::string::npos ? "" : name.substr(0, slash + 1);
  std::optional<uint64_t> lun = ParseLun(std::string_view(name).substr(prefix.size()));
  Target* target = nullptr;
  for (const std::unique_ptr<Target>& t : g_targets) {
    if (t->export_prefix == prefix) target = t.get();
  }
  if (target && lun) return std::pair(target, *lun);
  const char* form =
      g_whole_portal ? "export names are TARGET-IQN/LUN" : "export names are LUN numbers";
  if (g_whole_portal && !prefix.empty() && !target) {
    return Status::NotFound("export '" + name + "': the portal reported no target " +
                            prefix.substr(0, prefix.size() - 1) +
                            " (nbdinfo --list shows the exports)");
  }
  return Status::NotFound("export '" + name + "': " + form + " (nbdinfo --list shows them)");
}

void* IserOpen(int /*readonly*/) {
  std::string name = nbdkit_export_name();
  if (name.empty()) name = g_default_export;
  Result<std::pair<Target*, uint64_t>> exp = ParseExportName(name);
  if (!exp.ok()) {
    nbdkit_error("%s", exp.status().message().c_str());
    nbdkit_set_error(ENOENT);
    return nullptr;
  }
  Result<BlockDevice*> dev = DeviceFor(*exp->first, exp->second);
  Status st = dev.ok() ? RefreshSize(**dev) : dev.status();
  if (!st.ok()) {
    Fail(st);
    return nullptr;
  }
  return *dev;
}

// The BlockDevice belongs to every connection of the export; nothing is per connection.
void IserClose(void* /*handle*/) {}

BlockDevice& Dev(void* handle) {
  return *static_cast<BlockDevice*>(handle);
}

const char* IserExportDescription(void* handle) {
  return nbdkit_strdup_intern(Describe(Dev(handle)).c_str());
}

// ---- What the LUN can do ----------------------------------------------------------------------

int64_t IserGetSize(void* handle) {
  return static_cast<int64_t>(Dev(handle).size_bytes());
}

// Powers of two, as NBD wants. Minimum: the logical block (smaller requests are served by
// read-modify-write, but cost two round trips). Preferred: the physical block. Maximum: what one
// SCSI command may carry, so a request never splits into several commands.
int IserBlockSize(void* handle, uint32_t* minimum, uint32_t* preferred, uint32_t* maximum) {
  const iser::LunInfo& info = Dev(handle).info();
  *minimum = info.logical_block_size;
  *preferred = std::max<uint32_t>({info.physical_block_size, info.logical_block_size, 512});
  *maximum = std::max(info.max_transfer_bytes, *preferred);
  return 0;
}

int IserCanWrite(void* handle) {
  return !Dev(handle).info().read_only;
}
int IserCanFlush(void* /*handle*/) {
  return 1;
}
int IserIsRotational(void* handle) {
  return Dev(handle).info().rotational;
}
int IserCanTrim(void* handle) {
  return Dev(handle).info().unmap;
}
int IserCanZero(void* /*handle*/) {
  return 1;
}  // WRITE SAME works on any disk

// Fast zeroing means deallocating, which only yields zeroes where unmapped blocks read as zero.
bool CanZeroByUnmap(const iser::LunInfo& info) {
  return info.write_same_unmap && info.unmapped_reads_zero;
}
int IserCanFastZero(void* handle) {
  return CanZeroByUnmap(Dev(handle).info());
}

int IserCanFua(void* handle) {
  return Dev(handle).info().fua ? NBDKIT_FUA_NATIVE : NBDKIT_FUA_EMULATE;
}

int IserCanMultiConn(void* /*handle*/) {
  return 1;
}
int IserCanExtents(void* handle) {
  return Dev(handle).info().thin;
}
int IserCanCache(void* /*handle*/) {
  return NBDKIT_CACHE_NATIVE;
}

// ---- Data path --------------------------------------------------------------------------------

// One SCSI READ submitted asynchronously, waited for on the calling nbdkit thread: what fits one
// command needs none of BlockDevice::Read's splitting and partial-block handling.
Status ReadOneCommand(BlockDevice& dev, void* buf, uint32_t count, uint64_t offset) {
  struct Waiter {
    iser::IoRequest req;
    iser::Notification done;
    Status status;
  } w;
  w.req.op = iser::IoOp::kRead;
  w.req.offset = offset;
  w.req.length = count;
  w.req.buffer = static_cast<uint8_t*>(buf);
  w.req.context = &w;
  w.req.on_complete = [](iser::IoRequest* req, const Status& st) {
    auto* waiter = static_cast<Waiter*>(req->context);
    waiter->status = st;
    waiter->done.Notify();
  };
  dev.Submit(&w.req);
  w.done.Wait();
  return w.status;
}

// Whole blocks that fit one command (what well-behaved clients send, given block_size) go
// straight to one READ; anything else takes BlockDevice::Read, which splits and handles
// partial blocks.
int IserPread(void* handle, void* buf, uint32_t count, uint64_t offset, uint32_t /*flags*/) {
  BlockDevice& dev = Dev(handle);
  const iser::LunInfo& info = dev.info();
  const bool one_command = count > 0 && count <= info.max_transfer_bytes &&
                           offset % info.logical_block_size == 0 &&
                           count % info.logical_block_size == 0;
  Status st = one_command ? ReadOneCommand(dev, buf, count, offset) : dev.Read(offset, buf, count);
  return st.ok() ? 0 : Fail(st);
}

// Writes always take BlockDevice::Write: it orders them against concurrent read-modify-writes of
// the same blocks, which a direct WRITE would bypass.
int IserPwrite(void* handle, const void* buf, uint32_t count, uint64_t offset, uint32_t flags) {
  Status st = Dev(handle).Write(offset, buf, count, flags & NBDKIT_FLAG_FUA);
  return st.ok() ? 0 : Fail(st);
}

int IserFlush(void* handle, uint32_t /*flags*/) {
  Status st = Dev(handle).Flush();
  return st.ok() ? 0 : Fail(st);
}

int IserTrim(void* handle, uint32_t count, uint64_t offset, uint32_t flags) {
  Status st = Dev(handle).Trim(offset, count, flags & NBDKIT_FLAG_FUA);
  return st.ok() ? 0 : Fail(st);
}

int IserZero(void* handle, uint32_t count, uint64_t offset, uint32_t flags) {
  BlockDevice& dev = Dev(handle);
  const bool may_trim = flags & NBDKIT_FLAG_MAY_TRIM;
  // Without deallocation WRITE SAME costs as much as writing: not fast, say so at once.
  if ((flags & NBDKIT_FLAG_FAST_ZERO) && !(may_trim && CanZeroByUnmap(dev.info()))) {
    nbdkit_set_error(ENOTSUP);
    return -1;
  }
  Status st = dev.WriteZeroes(offset, count, may_trim, flags & NBDKIT_FLAG_FUA);
  return st.ok() ? 0 : Fail(st);
}

int IserExtents(void* handle, uint32_t count, uint64_t offset, uint32_t flags,
                struct nbdkit_extents* extents) {
  std::vector<iser::Extent> list;
  Status st = Dev(handle).Extents(offset, count, &list);
  if (!st.ok()) return Fail(st);
  for (const iser::Extent& e : list) {
    const uint32_t type = e.allocated ? 0 : NBDKIT_EXTENT_HOLE | (e.zero ? NBDKIT_EXTENT_ZERO : 0);
    if (nbdkit_add_extent(extents, e.offset, e.length, type) == -1) return -1;
    if (flags & NBDKIT_FLAG_REQ_ONE) break;
  }
  return 0;
}

int IserCache(void* handle, uint32_t count, uint64_t offset, uint32_t /*flags*/) {
  Status st = Dev(handle).Prefetch(offset, count);
  return st.ok() ? 0 : Fail(st);
}

// ---- Registration -----------------------------------------------------------------------------

constexpr char kConfigHelp[] =
    "url=iscsi://[USER[%PASSWORD]@]HOST[:PORT][/TARGET-IQN[/LUN]][?ARGS]\n"
    "                     (also iser://; the key \"url=\" may be omitted) Target to serve;\n"
    "                     every disk LUN is an export named by its number, the default\n"
    "                     export is LUN or the first disk LUN. Without TARGET-IQN, every\n"
    "                     target the portal reports: exports named TARGET-IQN/LUN.\n"
    "initiator=IQN        Initiator name (default: $ISER_CONNECT_INITIATOR_NAME or one\n"
    "                     derived from the host name and machine id).\n"
    "user=USER            CHAP user (else the URL's, else $LIBISCSI_CHAP_USERNAME).\n"
    "password=SECRET      CHAP secret: - to prompt, +FILE, -FD, or the secret itself\n"
    "                     (else the URL's, else $LIBISCSI_CHAP_PASSWORD).\n"
    "target-user=USER     Mutual CHAP: the user the target answers as.\n"
    "target-password=SECRET  Mutual CHAP secret, read like password=.\n"
    "digest=crc32c|none|crc32c-none|none-crc32c  Header and data digests (default none).\n"
    "transport=tcp|iser   Override the transport the URL scheme selects.\n"
    "timeout=SECONDS      Time allowed to connect and log in (default 15).\n"
    "replacement_timeout=SECONDS  How long I/O waits for a lost connection to be\n"
    "                     recovered before it fails; recovery goes on (default: the\n"
    "                     URL's, else 120; 0: fail at once).\n"
    "command_timeout=SECONDS  An unanswered command is aborted and retried after this\n"
    "                     long (default: the URL's, else 30; 0: never).";

struct nbdkit_plugin MakePlugin() {
  struct nbdkit_plugin p = {};
  p.name = "iser";
  p.longname = "iSCSI and iSER initiator (iser-connect)";
  p.version = ISER_PLUGIN_VERSION;
  p.description = "Serves the LUNs of an iSCSI or iSER target as NBD exports.";
  p.magic_config_key = "url";
  p.config = IserConfig;
  p.config_complete = IserConfigComplete;
  p.config_help = kConfigHelp;
  p.get_ready = IserGetReady;
  p.after_fork = IserAfterFork;
  p.cleanup = IserCleanup;
  p.list_exports = IserListExports;
  p.default_export = IserDefaultExport;
  p.open = IserOpen;
  p.close = IserClose;
  p.export_description = IserExportDescription;
  p.get_size = IserGetSize;
  p.block_size = IserBlockSize;
  p.can_write = IserCanWrite;
  p.can_flush = IserCanFlush;
  p.is_rotational = IserIsRotational;
  p.can_trim = IserCanTrim;
  p.can_zero = IserCanZero;
  p.can_fast_zero = IserCanFastZero;
  p.can_fua = IserCanFua;
  p.can_multi_conn = IserCanMultiConn;
  p.can_extents = IserCanExtents;
  p.can_cache = IserCanCache;
  p.pread = IserPread;
  p.pwrite = IserPwrite;
  p.flush = IserFlush;
  p.trim = IserTrim;
  p.zero = IserZero;
  p.extents = IserExtents;
  p.cache = IserCache;
  return p;
}

struct nbdkit_plugin plugin = MakePlugin();

}  // namespace

NBDKIT_REGISTER_PLUGIN(plugin)
