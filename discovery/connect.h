// From a URL to a logged-in session: the one place that turns what the user typed (an
// iscsi:// or iser:// URL, options, environment) into SessionOptions, resolves secrets, and
// opens the session. The CLI and both frontends use it, so they behave the same.
//
// Secrets: a URL may carry user%password@ and target_user/target_password arguments, but a
// password on a command line leaks into ps and logs, so when the URL names a user without a
// password the password comes from the environment (libiscsi's names: LIBISCSI_CHAP_PASSWORD,
// LIBISCSI_CHAP_TARGET_PASSWORD) or from ConnectOptions (the CLI reads it from a file, nbdkit from
// nbdkit_read_password). LIBISCSI_CHAP_USERNAME / LIBISCSI_CHAP_TARGET_USERNAME supply users the
// URL leaves out.
//
// Recovery settings (docs/recovery.md, "Settings"): replacement_timeout and command_timeout come
// from ConnectOptions (a command-line option or nbdkit parameter), else from the URL's arguments,
// else SessionOptions' defaults. The portals recovery tries after the URL's are the URL's portal=
// arguments, then every other portal a SendTargets discovery at the URL's portal reports for the
// target.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "discovery/url.h"
#include "initiator/base/status.h"
#include "initiator/paths/path_set.h"
#include "initiator/session/session.h"

namespace iser {

struct ConnectOptions {
  std::string initiator_name;              // empty: DefaultInitiatorName()
  std::optional<TransportKind> transport;  // overrides the URL's scheme
  std::optional<std::string> password;     // overrides URL and environment
  std::optional<std::string> target_password;
  // The CHAP users where the URL names none (--username, --target-username), before the
  // environment's.
  std::string user;
  std::string target_user;
  // How this program takes each secret (e.g. "--password-file FILE"), for the error about a CHAP
  // user without one; the environment variable is always named too.
  std::string password_hint;
  std::string target_password_hint;
  // How this program takes each user (e.g. "--username USER"), for the error about a secret
  // without one.
  std::string user_hint;
  std::string target_user_hint;
  std::chrono::milliseconds login_timeout{15000};
  std::chrono::milliseconds nop_interval{5000};
  std::chrono::milliseconds nop_timeout{5000};
  // Unset: the URL's argument, else SessionOptions' default.
  std::optional<std::chrono::milliseconds> replacement_timeout;
  std::optional<std::chrono::milliseconds> command_timeout;
};

// $ISER_CONNECT_INITIATOR_NAME, else a stable name from the host:
// "iqn.2026-11.io.iser-connect:<hostname>-<8 hex digits of /etc/machine-id>".
std::string DefaultInitiatorName();

// Fills user/password fields the URL leaves empty from options and the environment.
Status ResolveCredentials(IscsiUrl* url, const ConnectOptions& options);

// The session options for a normal session to the URL's target (which must be set); the
// alternate portals are the URL's portal= arguments.
Result<SessionOptions> SessionOptionsFor(const IscsiUrl& url, const ConnectOptions& options);

// The session options for a Discovery session at the URL's portal. It runs over TCP, as
// iscsiadm's does, unless options.transport asks for iSER explicitly.
Result<SessionOptions> DiscoverySessionOptionsFor(const IscsiUrl& url,
                                                  const ConnectOptions& options);

// With the url's credentials resolved (ResolveCredentials): appends to so->alternate_portals every
// portal that SendTargets at so->portal reports for so->target_name (all portal groups), except
// so->portal and those already listed. A discovery that fails adds nothing (logged at debug level):
// the session may still open. Takes one Discovery session, bounded by so->login_timeout.
void AddDiscoveredPortals(const IscsiUrl& url, const ConnectOptions& options, SessionOptions* so);

// ResolveCredentials + SessionOptionsFor + AddDiscoveredPortals: what OpenSession opens.
Result<SessionOptions> PrepareSession(IscsiUrl url, const ConnectOptions& options);

// The same as PrepareSession + Session::Open, but the discovery runs after the login succeeded
// (its portals reach the session through Session::AddAlternatePortals).
Result<std::shared_ptr<Session>> OpenSession(IscsiUrl url, const ConnectOptions& options);

// A device's paths (docs/multipath.md): unless the URL says multipath=off, one session per
// portal of the target (the URL's and its portal= arguments when it has any, else the URL's and
// every portal SendTargets reports, all portal groups), nr_sessions of them per portal, each
// recovering only through portals of its own portal group (its reinstatement must reach the same
// group). One portal and one session: a set of one path, as OpenSession's.
Result<std::shared_ptr<PathSet>> OpenPaths(IscsiUrl url, const ConnectOptions& options);

}  // namespace iser
