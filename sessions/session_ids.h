// Session IDs (SIDs): the small numbers `session` lists and `logout -r` takes, as iscsiadm's.
//
// A SID is unique among the live sessions of this user, whichever process holds them, and stays
// the same for a session's life, reconnects included. Each is a claim on a file sid-<N> in the
// state directory (state_dir.h): the claimer holds an exclusive flock on it while the session
// lives, and the kernel drops the lock when the process ends, however it ends, so that a crashed
// holder leaves no SID taken (its file stays, free for the next claim). A claim takes the lowest
// number free; a session that ends removes its file.
#pragma once

#include <map>
#include <set>
#include <string>

#include "initiator/base/status.h"

namespace iser::sessions {

// The SIDs of one process's sessions, by target. Not thread-safe: one thread uses it.
class SessionIds {
 public:
  explicit SessionIds(std::string state_dir);
  ~SessionIds();
  SessionIds(const SessionIds&) = delete;
  SessionIds& operator=(const SessionIds&) = delete;

  // The SID of target's session, claimed now if it has none; 0 when no claim could be made (the
  // state directory is unusable), logged once.
  int For(const std::string& target);
  // Keeps the SIDs of these targets, claiming those missing, and gives back the others'.
  void Keep(const std::set<std::string>& targets);
  // Gives back target's SID, if it has one.
  void Release(const std::string& target);

 private:
  struct Claim {
    int sid;
    int fd;  // holds the flock
  };
  Result<Claim> ClaimLowest();
  std::string PathOf(int sid) const;
  void Give(const Claim& claim) const;

  const std::string state_dir_;
  std::map<std::string, Claim> claims_;
  bool warned_ = false;
};

// Removes the files of SIDs nobody holds (claimers that died): the cleanup of stale state.
void RemoveFreeSessionIds(const std::string& state_dir);

}  // namespace iser::sessions
