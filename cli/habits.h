// What iscsiadm's habits on an iser-connect command line mean here. An iscsiadm user types
// `-m node -l` or `node ... --login`; the parser would only say that an argument was not
// expected. These name the iser-connect command that does it instead.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace iser::cli {

// The message for args (the command line after the program's name) when they hold an iscsiadm
// habit (-m MODE, node -l/-u), nullopt otherwise. The command then exits 7 with it.
std::optional<std::string> IscsiadmHabit(const std::vector<std::string>& args);

}  // namespace iser::cli
