#include "sessions/control.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace iser::sessions {

namespace {

constexpr uint32_t kMaxMessage = 1u << 20;

Result<sockaddr_un> Address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("socket path too long: " + path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

// Reads len bytes before the deadline.
Status ReadFully(int fd, void* data, size_t len, std::chrono::steady_clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (len > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Status::Timeout("no reply on the control socket");
    pollfd pfd{fd, POLLIN, 0};
    const int rc = poll(&pfd, 1, static_cast<int>(left.count()));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return Status::IoError(std::string("control socket: ") + std::strerror(errno));
    if (rc == 0) continue;
    const ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::IoError(std::string("control socket: ") + std::strerror(errno));
    if (n == 0) return Status::Aborted("the control connection ended");
    p += n;
    len -= static_cast<size_t>(n);
  }
  return Status::OK();
}

Status WriteFully(int fd, const void* data, size_t len) {
  const auto* p = static_cast<const char*>(data);
  while (len > 0) {
    const ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::IoError(std::string("control socket: ") + std::strerror(errno));
    p += n;
    len -= static_cast<size_t>(n);
  }
  return Status::OK();
}

int64_t Millis(std::chrono::milliseconds d) {
  return d.count();
}

// The login request's portal; not PortalJson, so that a daemon and a newer command still agree.
Json WirePortal(const Portal& p) {
  return {{"host", p.host}, {"port", p.port}};
}

Portal PortalOf(const Json& j) {
  return Portal{j.at("host").get<std::string>(), j.at("port").get<uint16_t>()};
}

Json DigestsJson(const std::vector<DigestType>& digests) {
  Json out = Json::array();
  for (DigestType d : digests) out.push_back(d == DigestType::kCrc32c ? "crc32c" : "none");
  return out;
}

std::vector<DigestType> DigestsOf(const Json& j) {
  std::vector<DigestType> out;
  for (const Json& d : j)
    out.push_back(d.get<std::string>() == "crc32c" ? DigestType::kCrc32c : DigestType::kNone);
  return out;
}

const char* TransportName(TransportKind t) {
  return t == TransportKind::kIser ? "iser" : "tcp";
}

TransportKind TransportOf(const Json& j) {
  return j.get<std::string>() == "iser" ? TransportKind::kIser : TransportKind::kTcp;
}

}  // namespace

Result<int> ConnectControl(const std::string& socket_path) {
  Result<sockaddr_un> addr = Address(socket_path);
  if (!addr.ok()) return addr.status();
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::ResourceExhausted(std::string("socket: ") + std::strerror(errno));
  if (connect(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0) {
    const int err = errno;
    close(fd);
    if (err == ENOENT || err == ECONNREFUSED) {
      return Status::ConnectionFailed("no process serves " + socket_path + " (not running)");
    }
    return Status::ConnectionFailed("control socket " + socket_path + ": " + std::strerror(err));
  }
  return fd;
}

Status SendMessage(int fd, const Json& message) {
  const std::string text = message.dump();
  if (text.size() > kMaxMessage) return Status::InvalidArgument("control message too large");
  const auto len = static_cast<uint32_t>(text.size());
  ISER_RETURN_IF_ERROR(WriteFully(fd, &len, sizeof(len)));
  return WriteFully(fd, text.data(), text.size());
}

Result<Json> ReceiveMessage(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  uint32_t len = 0;
  ISER_RETURN_IF_ERROR(ReadFully(fd, &len, sizeof(len), deadline));
  if (len > kMaxMessage) return Status::ProtocolError("control message too large");
  std::string text(len, '\0');
  ISER_RETURN_IF_ERROR(ReadFully(fd, text.data(), len, deadline));
  Json message = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (message.is_discarded() || !message.is_object()) {
    return Status::ProtocolError("malformed control message");
  }
  return message;
}

Result<Json> CallControl(const std::string& socket_path, const Json& request,
                         std::chrono::milliseconds timeout) {
  Result<int> fd = ConnectControl(socket_path);
  if (!fd.ok()) return fd.status();
  Status st = SendMessage(*fd, request);
  Result<Json> reply = st.ok() ? ReceiveMessage(*fd, timeout) : Result<Json>(st);
  close(*fd);
  return reply;
}

Json ReplyFor(const Status& status) {
  return {{"code", static_cast<int>(status.code())}, {"message", status.message()}};
}

Status StatusOfReply(const Json& reply) {
  const int code = reply.value("code", static_cast<int>(StatusCode::kProtocolError));
  if (code == 0) return Status::OK();
  return Status(static_cast<StatusCode>(code), reply.value("message", std::string()));
}

Json PortalJson(const Portal& portal, std::optional<uint16_t> tpgt) {
  return {{"address", portal.host}, {"port", portal.port}, {"tpgt", tpgt ? Json(*tpgt) : Json()}};
}

Json LoginRequest(const LoginSpec& spec) {
  const IscsiUrl& url = spec.url;
  const ConnectOptions& options = spec.options;
  Json u = {{"transport", TransportName(url.transport)},
            {"portal", WirePortal(url.portal)},
            {"target", url.target},
            {"user", url.user},
            {"password", url.password},
            {"target_user", url.target_user},
            {"target_password", url.target_password}};
  if (url.lun) u["lun"] = *url.lun;
  if (url.header_digest) u["header_digest"] = DigestsJson(*url.header_digest);
  if (url.data_digest) u["data_digest"] = DigestsJson(*url.data_digest);
  Json auth = Json::array();
  for (ChapAlgorithm a : url.auth) auth.push_back(static_cast<int>(a));
  u["auth"] = auth;
  if (url.replacement_timeout) u["replacement_timeout_ms"] = Millis(*url.replacement_timeout);
  if (url.command_timeout) u["command_timeout_ms"] = Millis(*url.command_timeout);
  Json portals = Json::array();
  for (const Portal& p : url.alternate_portals) portals.push_back(WirePortal(p));
  u["alternate_portals"] = portals;
  if (url.multipath) u["multipath"] = *url.multipath;
  if (url.nr_sessions) u["nr_sessions"] = *url.nr_sessions;
  if (!url.path_selector.empty()) u["path_selector"] = url.path_selector;

  Json o = {{"initiator_name", options.initiator_name},
            {"password_hint", options.password_hint},
            {"target_password_hint", options.target_password_hint},
            {"login_timeout_ms", Millis(options.login_timeout)},
            {"nop_interval_ms", Millis(options.nop_interval)},
            {"nop_timeout_ms", Millis(options.nop_timeout)}};
  if (options.transport) o["transport"] = TransportName(*options.transport);
  if (options.password) o["password"] = *options.password;
  if (options.target_password) o["target_password"] = *options.target_password;
  if (options.replacement_timeout) {
    o["replacement_timeout_ms"] = Millis(*options.replacement_timeout);
  }
  if (options.command_timeout) o["command_timeout_ms"] = Millis(*options.command_timeout);

  Json s = {{"read_only", spec.serve.read_only}};
  if (spec.serve.page_cache) s["page_cache"] = *spec.serve.page_cache;
  if (spec.serve.allow_other) s["allow_other"] = *spec.serve.allow_other;
  if (spec.serve.threads) s["threads"] = *spec.serve.threads;
  return {{"op", "login"}, {"url", u}, {"options", o}, {"serve", s}};
}

Status ParseLoginRequest(const Json& request, LoginSpec* spec) {
  using std::chrono::milliseconds;
  try {
    const Json& u = request.at("url");
    IscsiUrl out;
    out.transport = TransportOf(u.at("transport"));
    out.portal = PortalOf(u.at("portal"));
    out.target = u.at("target").get<std::string>();
    if (u.contains("lun")) out.lun = u.at("lun").get<uint64_t>();
    out.user = u.at("user").get<std::string>();
    out.password = u.at("password").get<std::string>();
    out.target_user = u.at("target_user").get<std::string>();
    out.target_password = u.at("target_password").get<std::string>();
    if (u.contains("header_digest")) out.header_digest = DigestsOf(u.at("header_digest"));
    if (u.contains("data_digest")) out.data_digest = DigestsOf(u.at("data_digest"));
    for (const Json& a : u.at("auth")) out.auth.push_back(static_cast<ChapAlgorithm>(a.get<int>()));
    if (u.contains("replacement_timeout_ms")) {
      out.replacement_timeout = milliseconds(u.at("replacement_timeout_ms").get<int64_t>());
    }
    if (u.contains("command_timeout_ms")) {
      out.command_timeout = milliseconds(u.at("command_timeout_ms").get<int64_t>());
    }
    for (const Json& p : u.at("alternate_portals")) out.alternate_portals.push_back(PortalOf(p));
    if (u.contains("multipath")) out.multipath = u.at("multipath").get<bool>();
    if (u.contains("nr_sessions")) out.nr_sessions = u.at("nr_sessions").get<uint32_t>();
    if (u.contains("path_selector")) out.path_selector = u.at("path_selector").get<std::string>();

    const Json& o = request.at("options");
    ConnectOptions c;
    c.initiator_name = o.at("initiator_name").get<std::string>();
    c.password_hint = o.at("password_hint").get<std::string>();
    c.target_password_hint = o.at("target_password_hint").get<std::string>();
    c.login_timeout = milliseconds(o.at("login_timeout_ms").get<int64_t>());
    c.nop_interval = milliseconds(o.at("nop_interval_ms").get<int64_t>());
    c.nop_timeout = milliseconds(o.at("nop_timeout_ms").get<int64_t>());
    if (o.contains("transport")) c.transport = TransportOf(o.at("transport"));
    if (o.contains("password")) c.password = o.at("password").get<std::string>();
    if (o.contains("target_password")) {
      c.target_password = o.at("target_password").get<std::string>();
    }
    if (o.contains("replacement_timeout_ms")) {
      c.replacement_timeout = milliseconds(o.at("replacement_timeout_ms").get<int64_t>());
    }
    if (o.contains("command_timeout_ms")) {
      c.command_timeout = milliseconds(o.at("command_timeout_ms").get<int64_t>());
    }
    const Json& s = request.at("serve");
    ServeOptions serve;
    serve.read_only = s.at("read_only").get<bool>();
    if (s.contains("page_cache")) serve.page_cache = s.at("page_cache").get<bool>();
    if (s.contains("allow_other")) serve.allow_other = s.at("allow_other").get<bool>();
    if (s.contains("threads")) serve.threads = s.at("threads").get<unsigned>();
    spec->url = std::move(out);
    spec->options = std::move(c);
    spec->serve = serve;
  } catch (const Json::exception&) {
    // The exception's text could quote a secret: it is not passed on.
    return Status::InvalidArgument("malformed login request");
  }
  return Status::OK();
}

Result<int> ListenControl(const HolderPaths& paths) {
  Result<sockaddr_un> addr = Address(paths.socket);
  if (!addr.ok()) return addr.status();
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::ResourceExhausted(std::string("socket: ") + std::strerror(errno));
  unlink(paths.socket.c_str());
  // Created with no access for anyone else at all, then opened to the user alone.
  const mode_t old_mask = umask(0177);
  const int rc = bind(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr));
  const int err = errno;
  umask(old_mask);
  if (rc != 0 || listen(fd, 16) != 0) {
    close(fd);
    return Status::IoError("control socket " + paths.socket + ": " +
                           std::strerror(rc != 0 ? err : errno));
  }
  return fd;
}

bool PeerIsThisUser(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  return cred.uid == geteuid();
}

}  // namespace iser::sessions
