// AsyncEvents (initiator/transport/iser/iser_async_events.h) against a real async event: two
// connected QPs of one process share softrdma's device context, as every iSER connection of a
// session daemon shares its NIC's; one overruns its CQ (strict mode raises IBV_EVENT_CQ_ERR, as a
// NIC does). Whoever drains the context's async fd, the event reaches the owner of that CQ and no
// other connection.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "initiator/transport/iser/iser_async_events.h"
#include "tests/softrdma/verbs_pair.h"

namespace iser {
namespace {

TEST(IserAsyncEvents, ACqOverrunEndsTheConnectionThatOwnsTheCqAndNoOther) {
  VerbsPair p;
  p.cqe = 4;
  ASSERT_TRUE(p.connect());
  std::vector<std::string> a_failures, b_failures;
  AsyncEvents::Register(p.a.id->verbs, p.a.id->qp, p.a.cq,
                        [&](const Status& st) { a_failures.push_back(st.message()); });
  AsyncEvents::Register(p.b.id->verbs, p.b.id->qp, p.b.cq,
                        [&](const Status& st) { b_failures.push_back(st.message()); });
  for (int i = 0; i < 5; i++) ASSERT_EQ(post_recv(p.b, i, 0, 64), 0);
  // b never polls: its fifth receive completion overruns its CQ of 4.
  for (int i = 0; i < 5; i++) {
    ASSERT_EQ(post_send(p.a, IBV_WR_SEND, i, 0, 8), 0);
    ASSERT_EQ(p.wait_wc(p.a, 1).size(), 1u) << i;
  }
  // a's connection happens to read the shared fd.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (b_failures.empty() && std::chrono::steady_clock::now() < deadline) {
    AsyncEvents::Drain(p.a.id->verbs);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  AsyncEvents::Unregister(p.a.id->qp);
  AsyncEvents::Unregister(p.b.id->qp);
  ASSERT_EQ(b_failures.size(), 1u);
  EXPECT_NE(b_failures[0].find("CQ error"), std::string::npos) << b_failures[0];
  EXPECT_NE(b_failures[0].find("overran"), std::string::npos) << b_failures[0];
  EXPECT_TRUE(a_failures.empty()) << a_failures[0];
}

}  // namespace
}  // namespace iser
