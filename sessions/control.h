// The control protocol between iser-connect commands and the processes holding sessions (the
// session daemon, whole-portal mounts): one request and one reply per connection on the tree's
// Unix stream socket (state_dir.h), each a JSON document preceded by its length (4 bytes, host
// order; at most 1 MiB). The socket is mode 0600 in a 0700 directory, and the server also checks
// the peer's uid (SO_PEERCRED): a login request carries the CHAP secrets, which therefore never
// appear in an argv or a file. Neither side logs a request.
//
// Requests ("op" and its arguments) and replies ("code": a StatusCode number, "message", and
// per op):
//   login   {"url": {...}, "options": {...}} (LoginRequest)   → "exists": true if already in
//   logins  {"logins": [LoginRequest, ...]}                    → "results": a reply per login,
//                                                  in order, each with its "code" and "exists"
//   logout  {"target": IQN} or {"all": true}                   → "targets": the ones logged out
//   status  {} or {"target": IQN}       → "root", "pid", "kind", "portal" (a whole-portal
//                                          mount's, HOST:PORT), "sessions" (SessionStatus, each
//                                          with its "sid"; only IQN's with a target)
//   rescan  {}                                                  → "added", "removed", "failed",
//                                                  "luns_added", "luns_removed" ("<iqn>/lun<N>")
// A server ending because of the request (its last session logged out) replies only once its
// tree is unmounted and its state removed, and the connection then ends at its exit.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>
#include <string>

#include "discovery/connect.h"
#include "discovery/url.h"
#include "initiator/base/status.h"
#include "sessions/state_dir.h"

namespace iser::sessions {

using Json = nlohmann::ordered_json;

// How a login's target is to be served, as far as the command said. read_only is the target's
// own. The others belong to the process serving the tree (set when it starts, from its first
// login): a login that gives one different from the holder's is refused (InvalidArgument, naming
// it), never dropped.
struct ServeOptions {
  bool read_only = false;
  std::optional<bool> page_cache;
  std::optional<bool> allow_other;
  std::optional<unsigned> threads;
};

// One login: what OpenPaths takes, and how to serve the target.
struct LoginSpec {
  IscsiUrl url;
  ConnectOptions options;
  ServeOptions serve;
};

// Connects to a tree's socket: ConnectionFailed "not running" when nobody listens there (no
// socket, or a stale one: ECONNREFUSED).
Result<int> ConnectControl(const std::string& socket);
Status SendMessage(int fd, const Json& message);
// Waits at most timeout for a whole message; Aborted if the peer closed first.
Result<Json> ReceiveMessage(int fd, std::chrono::milliseconds timeout);
// Connect, send, receive, close.
Result<Json> CallControl(const std::string& socket, const Json& request,
                         std::chrono::milliseconds timeout);

// A portal, the one shape every command's JSON gives it: {"address", "port", "tpgt"} (tpgt null
// where there is none, as for the portal a whole-portal mount discovers at).
Json PortalJson(const Portal& portal, std::optional<uint16_t> tpgt);

// A reply's "code" and "message".
Json ReplyFor(const Status& status);
Status StatusOfReply(const Json& reply);

// The login request, secrets included; the URL's credentials should be resolved already
// (ResolveCredentials), since the server's environment is not the caller's.
Json LoginRequest(const LoginSpec& spec);
Status ParseLoginRequest(const Json& request, LoginSpec* spec);

// Binds and listens on paths.socket (mode 0600), replacing a stale socket file.
Result<int> ListenControl(const HolderPaths& paths);
// The connected peer runs as this process's user.
bool PeerIsThisUser(int fd);

}  // namespace iser::sessions
