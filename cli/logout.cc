// iser-connect logout: flush, log out and remove a target's files from the tree holding it
// (sessions/client.h); the last logout of a tree ends its process. It takes what login takes (a
// URL, -T, -p) and what iscsiadm's logout takes (-r SID, --all); the criteria given must all hold.
#include <cstdio>

#include "cli/commands.h"
#include "sessions/client.h"

namespace iser::cli {

void AddLogoutCommand(CLI::App& app, GlobalOptions& g) {
  struct Args {
    std::string url;
    std::string target;
    std::string portal;
    int sid = 0;
    bool all = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "logout",
      "drain, flush (SYNCHRONIZE CACHE) and log out of sessions, removing their files; a tree "
      "goes with its last session");
  AddGlobalOptions(*cmd, g);
  CLI::Option* url = cmd->add_option(
      "url", args->url,
      "iscsi://HOST[:PORT]/TARGET or iser://...: that target's session at that portal; without "
      "TARGET, every session logged in at the portal");
  CLI::Option* target = cmd->add_option("-T,--targetname", args->target, "the target's IQN");
  CLI::Option* portal =
      cmd->add_option("-p,--portal", args->portal, "sessions logged in at this portal HOST[:PORT]");
  CLI::Option* sid = cmd->add_option("-r,--sid", args->sid, "the session with this SID (session)")
                         ->check(CLI::PositiveNumber);
  CLI::Option* all = cmd->add_flag("--all", args->all, "every session of every tree");
  for (CLI::Option* o : {url, target, portal, sid}) o->excludes(all);
  url->excludes(target);
  url->excludes(portal);
  cmd->callback([args, &g, url, target, portal, sid] {
    SetupLogging(g);
    sessions::LogoutSelection which;
    which.all = args->all;
    if (*url) {
      Result<IscsiUrl> u = ParseIscsiUrl(args->url);
      if (!u.ok()) throw CLI::RuntimeError(Fail(u.status()));
      which.portal = u->portal;
      if (!u->target.empty()) which.target = u->target;
    }
    if (*target) which.target = args->target;
    if (*portal) {
      Result<IscsiUrl> p = ParseUrlOrPortal(args->portal);
      if (!p.ok()) throw CLI::RuntimeError(Fail(p.status()));
      which.portal = p->portal;
    }
    if (*sid) which.sid = args->sid;
    if (!which.all && !which.target && !which.portal && !which.sid) {
      throw CLI::RuntimeError(
          Fail(Status::InvalidArgument("give a URL, -T IQN, -p PORTAL, -r SID or --all")));
    }
    const sessions::LogoutResult result = sessions::LogoutOfHolders(which);
    for (const sessions::LoggedOut& l : result.done) {
      std::printf("Logout of [target: %s] successful: %s\n", l.target.c_str(), l.root.c_str());
    }
    std::fflush(stdout);
    if (!result.status.ok()) throw CLI::RuntimeError(Fail(result.status));
  });
}

}  // namespace iser::cli
