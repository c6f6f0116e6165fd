// iser-connect iname: the initiator name this host logs in with unless told otherwise, which a
// target's ACL must admit (open-iscsi keeps it in /etc/iscsi/initiatorname.iscsi, libiscsi's
// iscsi-iname makes one).
#include <cstdio>

#include "cli/commands.h"

namespace iser::cli {

void AddInameCommand(CLI::App& app, GlobalOptions& g) {
  CLI::App* cmd = app.add_subcommand(
      "iname",
      "print the initiator name logins use by default (-i/--initiator-name or "
      "$ISER_CONNECT_INITIATOR_NAME override it): the name a target's ACL must admit");
  AddGlobalOptions(*cmd, g);
  cmd->callback([&g] {
    std::printf("%s\n", g.initiator_name.empty() ? DefaultInitiatorName().c_str()
                                                 : g.initiator_name.c_str());
  });
}

}  // namespace iser::cli
