// iser-connect login: a target's LUNs as files in the tree of the session daemon
// (sessions/client.h), ROOT/<target-iqn>/lun<N>; the target is a URL, or node records
// (discovery/node_store.h) chosen by -T/-p or --all, as iscsiadm -m node -l logs in to them.
#include <cstdio>

#include "cli/commands.h"
#include "discovery/node_store.h"

namespace iser::cli {

namespace {

std::string Bracketed(const std::string& target, const Portal& portal) {
  return "[target: " + target + ", portal: " + portal.ToString() + "]";
}

// One login to make, and where it came from for its error message (" (record PATH)").
struct PlannedLogin {
  IscsiUrl url;
  ConnectOptions options;
  std::string origin;
};

// What iscsiadm prints for one login's end; the exit code it stands for.
int ReportLogin(const PlannedLogin& p, const TreeLoginOptions& tree,
                const Result<sessions::DaemonLogin>& login) {
  const std::string what = Bracketed(p.url.target, p.url.portal);
  if (!login.ok()) {
    std::fprintf(stderr, "iser-connect: could not log in to %s%s: %s\n", what.c_str(),
                 p.origin.c_str(), login.status().ToString().c_str());
    return ExitCodeFor(login.status());
  }
  if (login->exists) {
    // What this login asked for and the session has differ: say so, and how to get it.
    std::string differs;
    if (login->held_read_only && *login->held_read_only != tree.serve.read_only) {
      differs = *login->held_read_only
                    ? ", read-only; log out of it first to log in read-write"
                    : ", read-write; log out of it first to log in read-only (-r)";
    } else if (tree.new_session) {
      differs = ": a tree holds one session per target; give the new session another --mountpoint";
    } else {
      differs = " (--new-session opens another in another tree)";
    }
    std::fprintf(stderr, "iser-connect: session exists: already logged in to %s in %s%s\n",
                 p.url.target.c_str(), login->root.c_str(), differs.c_str());
    return exit_code::kSessionExists;
  }
  std::printf("Login to %s successful: %s/%s\n", what.c_str(), login->root.c_str(),
              p.url.target.c_str());
  std::fflush(stdout);
  return exit_code::kOk;
}

// Logs in to each, as iscsiadm does: every "Logging in to" line first, then each outcome as it
// comes. Returns 0, 15 when every session existed already, else the exit code of the last failure.
int LoginAll(const std::vector<PlannedLogin>& planned, const TreeLoginOptions& tree) {
  std::vector<sessions::LoginSpec> specs;
  for (const PlannedLogin& p : planned) {
    std::printf("Logging in to %s\n", Bracketed(p.url.target, p.url.portal).c_str());
    specs.push_back({p.url, p.options, tree.serve});
  }
  std::fflush(stdout);
  int rc = exit_code::kOk;
  size_t existing = 0;
  sessions::LoginAllToDaemon(
      std::move(specs), tree.mountpoint,
      [](const sessions::HolderPaths& paths, const sessions::LoginSpec& spec,
         sessions::ReadyReporter* ready) { return fuse::ServeSessionDaemon(paths, spec, ready); },
      tree.new_session,
      [&](size_t i, const Result<sessions::DaemonLogin>& login) {
        const int one = ReportLogin(planned[i], tree, login);
        if (one == exit_code::kSessionExists) {
          ++existing;
        } else if (one != exit_code::kOk) {
          rc = one;
        }
      });
  // As iscsiadm: 15 only when every requested session was there already.
  if (rc == exit_code::kOk && existing > 0 && existing == planned.size()) {
    return exit_code::kSessionExists;
  }
  return rc;
}

// What the command line gave overrides the record, as it overrides a URL.
ConnectOptions RecordOptions(const NodeRecord& record, const ConnectOptions& base) {
  ConnectOptions o = NodeRecordConnectOptions(record, base);
  // A record that says authmethod None logs in without CHAP: a secret on the command line is for
  // the records that use one (login --all over a mix of both).
  if (record.auth == AuthMethod::kNone) {
    o.password.reset();
    o.target_password.reset();
  }
  if (base.transport) o.transport = base.transport;
  if (base.replacement_timeout) o.replacement_timeout = base.replacement_timeout;
  if (base.command_timeout) o.command_timeout = base.command_timeout;
  return o;
}

}  // namespace

void AddTreeOptions(CLI::App& cmd, TreeLoginOptions& tree) {
  cmd.add_option("--mountpoint", tree.mountpoint,
                 "the tree's ROOT (default: $XDG_RUNTIME_DIR/iser-connect, /run/iser-connect as "
                 "root); an existing, empty directory when the daemon starts");
  // The tree's own options: given, they must be what a running daemon has (else exit 7).
  cmd.add_flag_callback(
      "--page-cache", [&tree] { tree.serve.page_cache = true; },
      "use the kernel page cache (default: direct I/O); the tree's, set when the daemon starts");
  cmd.add_flag("-r,--read-only", tree.serve.read_only, "serve this target's files read-only");
  cmd.add_flag("--new-session", tree.new_session,
               "log in though a session with the target exists in another tree or mount (a "
               "second session, with an ISID of its own)");
  cmd.add_flag_callback(
      "--allow-other", [&tree] { tree.serve.allow_other = true; },
      "let other users open the files; the tree's, set when the daemon starts");
  cmd.add_option_function<unsigned>(
         "--threads", [&tree](const unsigned& n) { tree.serve.threads = n; },
         "FUSE worker threads (default 64); the tree's, set when the daemon starts")
      ->check(CLI::Range(1, 1024));
}

// A URL without a target: every target the portal reports, each at the first portal it lists
// (iscsiadm -m node -p PORTAL -l, without records). 15 only when every one was held already.
int LoginToPortal(const IscsiUrl& portal_url, const ConnectOptions& options,
                  const TreeLoginOptions& tree) {
  Result<std::vector<DiscoveredTarget>> targets = Discover(portal_url, options);
  if (!targets.ok()) return Fail(targets.status());
  if (targets->empty()) {
    return Fail(Status::NotFound("no targets found at " + portal_url.portal.ToString()));
  }
  std::vector<PlannedLogin> planned;
  for (const DiscoveredTarget& t : *targets) {
    IscsiUrl url = portal_url;
    url.target = t.name;
    // The portal asked, where the target lists it (another address may not be reachable from
    // here); recovery learns the others.
    url.portal = t.portals.front().portal;
    for (const TargetPortal& p : t.portals) {
      if (p.portal == portal_url.portal) url.portal = p.portal;
    }
    planned.push_back({url, options, ""});
  }
  return LoginAll(planned, tree);
}

int LoginToRecords(const NodeStore& store, const std::vector<NodeRecord>& records,
                   const ConnectOptions& base, const TreeLoginOptions& tree) {
  std::vector<PlannedLogin> planned;
  for (const NodeRecord& record : records) {
    planned.push_back({NodeRecordUrl(record), RecordOptions(record, base),
                       " (record " + store.PathOf(record) + ")"});
  }
  return LoginAll(planned, tree);
}

void AddLoginCommand(CLI::App& app, GlobalOptions& g) {
  struct Args {
    std::string url;
    std::string target;
    std::string portal;
    bool all = false;
    TreeLoginOptions tree;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "login",
      "log in to a target (a URL, or node records: -T/-p, --all) and expose its LUNs as "
      "ROOT/<target-iqn>/lun<N>, in the one tree the session daemon serves (started if none runs)");
  AddGlobalOptions(*cmd, g);
  AddSessionOptions(*cmd, g);
  cmd->add_option("url", args->url,
                  "iscsi:// or iser:// URL of the target (and LUN); without a target, every "
                  "target the portal reports");
  cmd->add_option("-T,--targetname", args->target, "log in to the records of this target IQN");
  cmd->add_option("-p,--portal", args->portal, "log in to the records at this portal HOST[:PORT]");
  cmd->add_flag("--all", args->all, "log in to every node record");
  AddTreeOptions(*cmd, args->tree);
  cmd->callback([args, &g] {
    SetupLogging(g);
    const bool by_record = !args->target.empty() || !args->portal.empty() || args->all;
    if (args->url.empty() == !by_record) {
      throw CLI::RuntimeError(Fail(Status::InvalidArgument(
          args->url.empty() ? "login needs a URL, or node records: -T IQN, -p PORTAL or --all"
                            : "login takes a URL or node records (-T, -p, --all), not both")));
    }
    Result<ConnectOptions> c = MakeConnectOptions(g);
    if (!c.ok()) throw CLI::RuntimeError(Fail(c.status()));
    if (!by_record) {
      Result<IscsiUrl> url = ParseIscsiUrl(args->url);
      if (!url.ok()) throw CLI::RuntimeError(Fail(url.status()));
      const int rc = url->target.empty() ? LoginToPortal(*url, *c, args->tree)
                                         : LoginAll({{*url, *c, ""}}, args->tree);
      if (rc != exit_code::kOk) throw CLI::RuntimeError(rc);
      return;
    }
    std::optional<Portal> portal;
    if (!args->portal.empty()) {
      Result<IscsiUrl> p = ParseUrlOrPortal(args->portal);
      if (!p.ok()) throw CLI::RuntimeError(Fail(p.status()));
      portal = p->portal;
    }
    Result<NodeStore> store = OpenNodeStore(g.config_dir, /*create=*/false);
    if (!store.ok()) throw CLI::RuntimeError(FailStore(store.status()));
    Result<std::vector<NodeRecord>> records = store->Find(args->target, portal);
    if (!records.ok()) throw CLI::RuntimeError(FailStore(records.status()));
    if (records->empty()) {
      std::string which = args->target.empty() ? "" : " for " + args->target;
      if (portal) which += " at " + portal->ToString();
      throw CLI::RuntimeError(
          Fail(Status::NotFound("no records found" + which + " in " + store->dir())));
    }
    const int rc = LoginToRecords(*store, *records, *c, args->tree);
    if (rc != exit_code::kOk) throw CLI::RuntimeError(rc);
  });
}

}  // namespace iser::cli
