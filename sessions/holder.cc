#include "sessions/holder.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <system_error>

#include "initiator/base/log.h"
#include "initiator/login/negotiation.h"

namespace iser::sessions {

namespace {

const char* YesNo(bool b) {
  return b ? "Yes" : "No";
}

Json ParametersJson(const NegotiatedParams& p) {
  Json j = {{"HeaderDigest", DigestName(p.header_digest)},
            {"DataDigest", DigestName(p.data_digest)},
            {"MaxRecvDataSegmentLength", p.initiator_max_recv_data_segment_length},
            {"MaxXmitDataSegmentLength", p.target_max_recv_data_segment_length},
            {"MaxBurstLength", p.max_burst_length},
            {"FirstBurstLength", p.first_burst_length},
            {"ImmediateData", YesNo(p.immediate_data)},
            {"InitialR2T", YesNo(p.initial_r2t)},
            {"MaxOutstandingR2T", p.max_outstanding_r2t},
            {"MaxConnections", p.max_connections},
            {"DataPDUInOrder", YesNo(p.data_pdu_in_order)},
            {"DataSequenceInOrder", YesNo(p.data_sequence_in_order)},
            {"DefaultTime2Wait", p.default_time2wait},
            {"DefaultTime2Retain", p.default_time2retain},
            {"ErrorRecoveryLevel", p.error_recovery_level},
            {"RDMAExtensions", YesNo(p.rdma_extensions)}};
  if (p.rdma_extensions) {
    j["InitiatorRecvDataSegmentLength"] = p.initiator_recv_data_segment_length;
    j["TargetRecvDataSegmentLength"] = p.target_recv_data_segment_length;
  }
  if (p.target_portal_group_tag) j["TargetPortalGroupTag"] = *p.target_portal_group_tag;
  if (!p.target_alias.empty()) j["TargetAlias"] = p.target_alias;
  return j;
}

}  // namespace

Status LogOut(PathSet& paths) {
  Status first = paths.Close();
  // Closing it again is a no-op for a set that owns its sessions.
  if (Status st = paths.primary().Close(); first.ok()) first = st;
  return first;
}

Json SessionStatus(PathSet& paths, const std::string& target, const std::vector<std::string>& files,
                   bool read_only) {
  Session& session = paths.primary();
  const SessionStats s = session.stats();
  const NegotiatedParams& p = session.params();
  Json reply = {{"target", target},
                {"portal", PortalJson(session.portal(), p.target_portal_group_tag)},
                {"connection", s.portal},
                {"current_portal", PortalJson(s.current_portal, s.current_tpgt)},
                {"transport", p.rdma_extensions ? "iser" : "tcp"},
                {"datamover", s.datamover},
                {"state", SessionStateName(s.state)},
                {"read_only", read_only},
                {"recoveries", s.recoveries},
                {"replayed_tasks", s.replayed_tasks},
                {"retried_commands", s.retried_commands},
                {"commands", s.commands},
                {"bytes_read", s.bytes_read},
                {"bytes_written", s.bytes_written},
                {"files", files},
                {"parameters", ParametersJson(p)}};
  // A lone session (multipath=off, or one portal) has no paths to show beyond itself.
  if (!paths.multipath()) return reply;
  reply["path_selector"] = PathSelectorName(paths.selector());
  reply["path_changes"] = paths.path_changes();
  Json all_paths = Json::array();
  for (size_t i = 0; i < paths.size(); ++i) {
    Session& path = paths.session(i);
    const SessionStats ps = path.stats();
    all_paths.push_back(
        {{"path", i + 1},
         {"portal", PortalJson(path.portal(), path.params().target_portal_group_tag)},
         {"current_portal", PortalJson(ps.current_portal, ps.current_tpgt)},
         {"connection", ps.portal},
         {"state", SessionStateName(ps.state)},
         {"healthy", path.healthy()},
         {"recoveries", ps.recoveries},
         {"commands", ps.commands},
         {"bytes_read", ps.bytes_read},
         {"bytes_written", ps.bytes_written}});
  }
  // Paths that have not logged in since the open: listed, so that `logout -p` finds them too.
  for (const Portal& portal : paths.LeftOutPortals()) {
    all_paths.push_back({{"path", nullptr},
                         {"portal", PortalJson(portal, std::nullopt)},
                         {"state", "not logged in"},
                         {"healthy", false}});
  }
  reply["paths"] = std::move(all_paths);
  Json luns = Json::array();
  for (const LunPathStatus& l : paths.PathStatuses()) {
    Json per_path = Json::array();
    for (size_t i = 0; i < l.paths.size(); ++i) {
      const PathStatus& ps = l.paths[i];
      per_path.push_back({{"path", i + 1},
                          {"serves", ps.serves},
                          {"why_not", ps.why_not},
                          {"alua_state", ps.alua_state},
                          {"target_port_group", ps.target_port_group},
                          {"outstanding", ps.outstanding}});
    }
    luns.push_back({{"lun", l.lun},
                    {"identity", l.identity},
                    {"alua", l.alua},
                    {"paths", std::move(per_path)}});
  }
  reply["luns"] = std::move(luns);
  return reply;
}

void ReplyNothingToRescan(int fd) {
  if (fd < 0) return;
  Json reply = ReplyFor(Status::OK());
  for (const char* key : {"added", "removed", "failed", "luns_added", "luns_removed"}) {
    reply[key] = Json::array();
  }
  SendMessage(fd, reply).IgnoreError();
  close(fd);
}

HolderServer::HolderServer(HolderPaths paths, std::string kind, std::string portal)
    : paths_(std::move(paths)),
      kind_(std::move(kind)),
      portal_(std::move(portal)),
      ids_(paths_.state_dir) {}

Json HolderServer::SessionsWithIds(const std::string& only_target) {
  Json sessions = holder_->Sessions(only_target);
  if (only_target.empty()) {
    std::set<std::string> targets;
    for (const Json& s : sessions) targets.insert(s.value("target", std::string()));
    ids_.Keep(targets);
  } else if (sessions.empty()) {
    ids_.Release(only_target);
  }
  for (Json& s : sessions) s["sid"] = ids_.For(s.value("target", std::string()));
  return sessions;
}

Json HolderServer::LoginAll(const Json& logins) {
  const size_t n = logins.is_array() ? logins.size() : 0;
  std::vector<LoginSpec> specs(n);
  std::vector<Status> results(n);
  std::vector<char> exists(n, 0);
  // A target asked twice (two records of it) is logged in to once: the later ones run after the
  // others and find it held.
  std::vector<size_t> first, later;
  std::set<std::string> seen;
  for (size_t i = 0; i < n; ++i) {
    results[i] = ParseLoginRequest(logins[i], &specs[i]);
    if (results[i].ok()) (seen.insert(specs[i].url.target).second ? first : later).push_back(i);
  }
  auto login = [&](size_t i) {
    bool e = false;
    results[i] = holder_->Login(specs[i], &e);
    exists[i] = e;
  };
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k; (k = next.fetch_add(1)) < first.size();) login(first[k]);
  };
  std::vector<std::thread> workers;
  for (size_t k = 1; k < std::min(first.size(), kParallelLogins); ++k) {
    try {
      workers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no more threads now: fewer logins at once
    }
  }
  work();
  for (std::thread& t : workers) t.join();
  for (size_t i : later) login(i);
  Json replies = Json::array();
  for (size_t i = 0; i < n; ++i) {
    if (results[i].ok()) ids_.For(specs[i].url.target);
    Json r = ReplyFor(results[i]);
    r["exists"] = exists[i] != 0;
    replies.push_back(std::move(r));
  }
  return replies;
}

HolderServer::~HolderServer() {
  Stop();
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
  if (reply_fd_ >= 0) close(reply_fd_);
}

Status HolderServer::Register() {
  ISER_RETURN_IF_ERROR(EnsureStateDir(paths_.state_dir));
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return Status::ResourceExhausted(std::string("pipe: ") + std::strerror(errno));
  }
  Result<int> listen_fd = ListenControl(paths_);
  if (!listen_fd.ok()) return listen_fd.status();
  listen_fd_ = *listen_fd;
  const Status st =
      WriteHolderState(paths_, HolderState{static_cast<int>(getpid()), paths_.root, kind_, ""});
  if (!st.ok()) {
    // Without its state file nobody would ever remove the socket.
    unlink(paths_.socket.c_str());
    close(listen_fd_);
    listen_fd_ = -1;
  }
  return st;
}

void HolderServer::Start(Holder* holder) {
  holder_ = holder;
  control_ = std::thread([this] { ControlMain(); });
}

// A full wake pipe drops the poke: a rescan is then not made, SIDs are given back at the next
// full listing.
void HolderServer::Poke(char what) const {
  if (wake_[1] >= 0) (void)!write(wake_[1], &what, 1);
}

void HolderServer::PokeRescan() const {
  Poke('r');
}

void HolderServer::SessionsEnded() const {
  Poke('e');
}

void HolderServer::Stop() {
  if (control_.joinable()) {
    // A pipe full of pokes takes no 'q', but wakes the thread all the same.
    stopping_ = true;
    const char quit = 'q';
    (void)!write(wake_[1], &quit, 1);
    control_.join();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
}

void HolderServer::Finish() {
  // A process started after this one began to end may own them already.
  Result<HolderState> state = ReadHolderState(paths_.state_file);
  if (state.ok() && state->pid == getpid()) {
    unlink(paths_.socket.c_str());
    unlink(paths_.state_file.c_str());
  }
  if (reply_fd_ >= 0) {
    reply_["exiting"] = true;
    SendMessage(reply_fd_, reply_).IgnoreError();
    close(reply_fd_);
    reply_fd_ = -1;
  }
}

bool HolderServer::Handle(int fd) {
  if (!PeerIsThisUser(fd)) {
    Log(LogLevel::kWarning, "control connection from another user refused");
    close(fd);
    return true;
  }
  Result<Json> request = ReceiveMessage(fd, std::chrono::seconds(10));
  if (!request.ok()) {
    close(fd);
    return true;
  }
  const std::string op = request->value("op", std::string());
  Json reply;
  if (op == "login") {
    reply = LoginAll(Json::array({*request})).at(0);
  } else if (op == "logins") {
    reply = ReplyFor(Status::OK());
    reply["results"] = LoginAll(request->value("logins", Json::array()));
  } else if (op == "logout") {
    bool last = false;
    reply = holder_->Logout(*request, &last);
    reply["root"] = paths_.root;
    for (const Json& t : reply.value("targets", Json::array())) ids_.Release(t.get<std::string>());
    if (last) {
      reply_fd_ = fd;
      reply_ = std::move(reply);
      return false;
    }
  } else if (op == "status") {
    reply = ReplyFor(Status::OK());
    reply["root"] = paths_.root;
    reply["pid"] = static_cast<int>(getpid());
    reply["kind"] = kind_;
    if (!portal_.empty()) reply["portal"] = portal_;
    reply["sessions"] = SessionsWithIds(request->value("target", std::string()));
  } else if (op == "rescan") {
    holder_->Rescan(fd);
    return true;
  } else {
    reply = ReplyFor(Status::InvalidArgument("unknown control request " + op));
  }
  SendMessage(fd, reply).IgnoreError();  // a client that went away needs no answer
  close(fd);
  return true;
}

void HolderServer::ControlMain() {
  SessionsWithIds();  // the sessions held from the start get their SIDs now
  for (;;) {
    pollfd fds[2] = {{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    const int ready = poll(fds, 2, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      Log(LogLevel::kError, std::string("control thread: ") + std::strerror(errno));
      return;
    }
    if (stopping_) return;
    if (fds[0].revents) {
      char c = 0;
      if (read(wake_[0], &c, 1) == 1) {
        if (c == 'q') return;
        if (c == 'r') holder_->Rescan(-1);
        if (c == 'e') SessionsWithIds();
      }
    }
    if (fds[1].revents) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      if (!Handle(fd)) {
        holder_->End();
        return;
      }
    }
  }
}

}  // namespace iser::sessions
