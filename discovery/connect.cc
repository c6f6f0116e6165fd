#include "discovery/connect.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "discovery/discovery.h"
#include "initiator/base/crc32c.h"
#include "initiator/base/log.h"

namespace iser {

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string HowToGive(const std::string& hint, const char* env) {
  return (hint.empty() ? std::string() : "give " + hint + ", or ") + "set " + env;
}

// A portal the session does not know yet goes to the end of its alternates; false if known.
bool AddAlternatePortal(SessionOptions* so, const Portal& portal) {
  std::vector<Portal>& list = so->alternate_portals;
  if (portal == so->portal || std::find(list.begin(), list.end(), portal) != list.end()) {
    return false;
  }
  list.push_back(portal);
  return true;
}

}  // namespace

std::string DefaultInitiatorName() {
  if (std::string name = Env("ISER_CONNECT_INITIATOR_NAME"); !name.empty()) return name;
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  std::string id;
  std::ifstream machine_id("/etc/machine-id");
  std::getline(machine_id, id);
  if (id.empty()) id = host;
  char suffix[16];
  snprintf(suffix, sizeof suffix, "%08x", Crc32c(id.data(), id.size()));
  std::string clean;
  for (char c : std::string(host)) {
    clean += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.')
                 ? static_cast<char>(std::tolower(static_cast<unsigned char>(c)))
                 : '-';
  }
  return "iqn.2026-11.io.iser-connect:" + clean + "-" + suffix;
}

Status ResolveCredentials(IscsiUrl* url, const ConnectOptions& options) {
  if (url->user.empty()) {
    url->user = !options.user.empty() ? options.user : Env("LIBISCSI_CHAP_USERNAME");
  }
  // A secret given explicitly with no user anywhere would log in without CHAP, the secret unused.
  if (options.password && url->user.empty()) {
    return Status::InvalidArgument(
        "a CHAP secret was given (" + options.password_hint +
        ") but no CHAP user: name it in the URL (iscsi://USER@HOST/TARGET), " +
        (options.user_hint.empty() ? "" : "with " + options.user_hint + ", ") +
        "in $LIBISCSI_CHAP_USERNAME, or in the node record's node.session.auth.username");
  }
  if (options.password) {
    url->password = *options.password;
  } else if (url->password.empty()) {
    url->password = Env("LIBISCSI_CHAP_PASSWORD");
  }
  if (url->target_user.empty()) {
    url->target_user =
        !options.target_user.empty() ? options.target_user : Env("LIBISCSI_CHAP_TARGET_USERNAME");
  }
  if (options.target_password && url->target_user.empty()) {
    return Status::InvalidArgument(
        "a mutual CHAP secret was given (" + options.target_password_hint +
        ") but no mutual CHAP user: name it in the URL (target_user=USER), " +
        (options.target_user_hint.empty() ? "" : "with " + options.target_user_hint + ", ") +
        "in $LIBISCSI_CHAP_TARGET_USERNAME, or in the node record's node.session.auth.username_in");
  }
  if (options.target_password) {
    url->target_password = *options.target_password;
  } else if (url->target_password.empty()) {
    url->target_password = Env("LIBISCSI_CHAP_TARGET_PASSWORD");
  }
  if (!url->user.empty() && url->password.empty()) {
    return Status::InvalidArgument("CHAP user '" + url->user + "' has no password: " +
                                   HowToGive(options.password_hint, "LIBISCSI_CHAP_PASSWORD"));
  }
  if (!url->target_user.empty() && url->target_password.empty()) {
    return Status::InvalidArgument(
        "mutual CHAP user '" + url->target_user + "' has no password: " +
        HowToGive(options.target_password_hint, "LIBISCSI_CHAP_TARGET_PASSWORD"));
  }
  if (!url->target_user.empty() && url->user.empty()) {
    return Status::InvalidArgument("mutual CHAP needs the initiator's CHAP user and password too");
  }
  return Status::OK();
}

Result<SessionOptions> SessionOptionsFor(const IscsiUrl& url, const ConnectOptions& options) {
  SessionOptions s;
  s.portal = url.portal;
  s.target_name = url.target;
  s.transport = options.transport.value_or(url.transport);
  s.initiator_name =
      options.initiator_name.empty() ? DefaultInitiatorName() : options.initiator_name;
  s.chap.user = url.user;
  s.chap.secret = url.password;
  s.chap.target_user = url.target_user;
  s.chap.target_secret = url.target_password;
  if (!url.auth.empty()) s.chap.algorithms = url.auth;
  if (url.header_digest) s.offer.header_digest = *url.header_digest;
  if (url.data_digest) s.offer.data_digest = *url.data_digest;
  s.login_timeout = options.login_timeout;
  s.nop_interval = options.nop_interval;
  s.nop_timeout = options.nop_timeout;
  s.replacement_timeout =
      options.replacement_timeout.value_or(url.replacement_timeout.value_or(s.replacement_timeout));
  s.command_timeout =
      options.command_timeout.value_or(url.command_timeout.value_or(s.command_timeout));
  for (const Portal& p : url.alternate_portals) AddAlternatePortal(&s, p);
  return s;
}

Result<SessionOptions> DiscoverySessionOptionsFor(const IscsiUrl& url,
                                                  const ConnectOptions& options) {
  Result<SessionOptions> so = SessionOptionsFor(url, options);
  if (so.ok() && !options.transport) so->transport = TransportKind::kTcp;
  return so;
}

void AddDiscoveredPortals(const IscsiUrl& url, const ConnectOptions& options, SessionOptions* so) {
  Result<SessionOptions> discovery = DiscoverySessionOptionsFor(url, options);
  if (!discovery.ok()) return;
  discovery->portal = so->portal;
  Result<std::vector<DiscoveredTarget>> targets = DiscoverTargets(*discovery, so->target_name);
  if (!targets.ok()) {
    Log(LogLevel::kDebug, "no portals for recovery from SendTargets at " + so->portal.ToString() +
                              ": " + targets.status().ToString());
    return;
  }
  for (const DiscoveredTarget& t : *targets) {
    if (t.name != so->target_name) continue;
    for (const TargetPortal& p : t.portals) {
      if (!AddAlternatePortal(so, p.portal)) continue;
      Log(LogLevel::kDebug, "portal for recovery from SendTargets: " + p.portal.ToString() +
                                " (portal group " + std::to_string(p.tpgt) + ")");
    }
  }
}

namespace {

Result<SessionOptions> OptionsWithoutDiscovery(IscsiUrl* url, const ConnectOptions& options) {
  if (url->target.empty()) {
    return Status::InvalidArgument("the URL " + url->Redacted() +
                                   " names no target: use iscsi://HOST[:PORT]/TARGET-IQN[/LUN]");
  }
  ISER_RETURN_IF_ERROR(ResolveCredentials(url, options));
  return SessionOptionsFor(*url, options);
}

}  // namespace

Result<SessionOptions> PrepareSession(IscsiUrl url, const ConnectOptions& options) {
  Result<SessionOptions> so = OptionsWithoutDiscovery(&url, options);
  if (!so.ok()) return so.status();
  AddDiscoveredPortals(url, options, &*so);
  return so;
}

Result<std::shared_ptr<Session>> OpenSession(IscsiUrl url, const ConnectOptions& options) {
  Result<SessionOptions> so = OptionsWithoutDiscovery(&url, options);
  if (!so.ok()) return so.status();
  Result<std::unique_ptr<Session>> s = Session::Open(*so);
  if (!s.ok()) return s.status();
  // Discovery after the login: a portal that does not answer costs one login timeout, not two,
  // and the session needs the extra portals only once it has to recover.
  AddDiscoveredPortals(url, options, &*so);
  (*s)->AddAlternatePortals(so->alternate_portals);
  return std::shared_ptr<Session>(std::move(*s));
}

namespace {

constexpr std::chrono::milliseconds kPathNopInterval{1000};
constexpr std::chrono::milliseconds kPathNopTimeout{1000};

}  // namespace

Result<std::shared_ptr<PathSet>> OpenPaths(IscsiUrl url, const ConnectOptions& options) {
  Result<SessionOptions> so = OptionsWithoutDiscovery(&url, options);
  if (!so.ok()) return so.status();
  const PathSelector selector =
      url.path_selector == "round-robin" ? PathSelector::kRoundRobin : PathSelector::kQueueLength;
  if (url.multipath == false) {
    Result<std::shared_ptr<Session>> s = OpenSession(url, options);
    if (!s.ok()) return s.status();
    return PathSet::Of(std::move(*s));
  }
  // Every portal with its group; one SendTargets does not report counts as the first portal's.
  struct Where {
    Portal portal;
    std::optional<uint16_t> tpgt;
  };
  std::vector<Where> portals{{so->portal, std::nullopt}};
  auto add = [&portals](const Portal& p, std::optional<uint16_t> tpgt) {
    for (Where& w : portals) {
      if (w.portal == p) {
        if (!w.tpgt) w.tpgt = tpgt;
        return;
      }
    }
    portals.push_back({p, tpgt});
  };
  for (const Portal& p : url.alternate_portals) add(p, std::nullopt);
  // Portals the URL names are the paths; SendTargets names them otherwise.
  Result<SessionOptions> discovery = DiscoverySessionOptionsFor(url, options);
  if (url.alternate_portals.empty() && discovery.ok()) {
    discovery->portal = so->portal;
    Result<std::vector<DiscoveredTarget>> targets = DiscoverTargets(*discovery, so->target_name);
    if (targets.ok()) {
      for (const DiscoveredTarget& t : *targets) {
        if (t.name != so->target_name) continue;
        for (const TargetPortal& p : t.portals) add(p.portal, p.tpgt);
      }
    } else {
      Log(LogLevel::kInfo, "no other paths from SendTargets at " + so->portal.ToString() + ": " +
                               targets.status().ToString());
    }
  }
  for (Where& w : portals) {
    if (!w.tpgt) w.tpgt = portals.front().tpgt;
  }
  const uint32_t per_portal = url.nr_sessions.value_or(1);
  const bool several = portals.size() * per_portal > 1;
  if (portals.size() * per_portal > 16) {
    return Status::InvalidArgument(
        std::to_string(portals.size()) + " portals with nr_sessions=" + std::to_string(per_portal) +
        " make " + std::to_string(portals.size() * per_portal) +
        " paths; a device has at most 16 (name fewer portals with portal=, or lower nr_sessions)");
  }
  std::vector<SessionOptions> by_portal;
  for (const Where& w : portals) {
    SessionOptions path = *so;
    if (several) {
      // A path's health check: a stalled path is lost within about 2.5 s, not 12, and its
      // reads and unsent commands move then (docs/multipath.md, "Losing a path").
      path.nop_interval = std::min(path.nop_interval, kPathNopInterval);
      path.nop_timeout = std::min(path.nop_timeout, kPathNopTimeout);
    }
    path.portal = w.portal;
    // The other portals of its group: where a path that alone serves a LUN may recover
    // (task_handoff.h, MayRecoverElsewhere); any other path recovers at its own portal.
    path.alternate_portals.clear();
    for (const Where& other : portals) {
      if (!(other.portal == w.portal) && other.tpgt == w.tpgt) {
        path.alternate_portals.push_back(other.portal);
      }
    }
    by_portal.push_back(std::move(path));
  }
  // One session to each portal first: the first paths to open reach every portal.
  std::vector<SessionOptions> paths;
  for (uint32_t i = 0; i < per_portal; ++i) {
    paths.insert(paths.end(), by_portal.begin(), by_portal.end());
  }
  if (paths.size() == 1) {
    Result<std::unique_ptr<Session>> s = Session::Open(paths.front());
    if (!s.ok()) return s.status();
    return PathSet::Of(std::shared_ptr<Session>(std::move(*s)));
  }
  return PathSet::Open(std::move(paths), selector);
}

}  // namespace iser
