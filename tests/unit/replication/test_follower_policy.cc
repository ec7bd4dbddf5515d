// The follower's error policy (mq/replication.h, `mq-replicate`): which
// errors it waits out, how often a catch-up fetches again when fenced,
// when it records that it stopped, and the delay before a partition that
// failed is started again.
#include <catch2/catch.hpp>

#include <climits>

#include "mq/replication.h"

using namespace mq;

TEST_CASE(
    "follower policy: a moved leadership, an unreachable leader, a missing root and a fetch "
    "position outside the log are waited out") {
  for (Code c : {Code::kFenced, Code::kUnavailable, Code::kNotFound, Code::kOutOfOrder})
    CHECK(FollowerRetries(Status(c, "x")));
  for (Code c : {Code::kCorruption, Code::kIoError, Code::kBusy, Code::kInvalidArgument,
                 Code::kPermission, Code::kInternal, Code::kTimedOut})
    CHECK_FALSE(FollowerRetries(Status(c, "x")));
  CHECK_FALSE(FollowerRetries(Status::Ok()));
}

TEST_CASE("follower policy: a catch-up fetches again when fenced, 100 fetches in a row at most") {
  const Status fenced(Code::kFenced, "moved");
  CHECK(FollowerFetchesAgain(fenced, 1));
  CHECK(FollowerFetchesAgain(fenced, 99));
  CHECK_FALSE(FollowerFetchesAgain(fenced, 100));
  // Any other error ends the catch-up, even one a --follow round waits out.
  CHECK_FALSE(FollowerFetchesAgain(Status(Code::kUnavailable, "away"), 1));
  CHECK_FALSE(FollowerFetchesAgain(Status(Code::kCorruption, "bad"), 1));
}

TEST_CASE("follower policy: a stop is recorded for an error not waited out, by the lock's holder") {
  CHECK(FollowerRecordsStop(Status(Code::kCorruption, "bad"), false));
  CHECK(FollowerRecordsStop(Status(Code::kIoError, "disk"), false));
  CHECK_FALSE(FollowerRecordsStop(Status(Code::kCorruption, "bad"), true));  // another follows
  CHECK_FALSE(FollowerRecordsStop(Status(Code::kFenced, "moved"), false));
  CHECK_FALSE(FollowerRecordsStop(Status(Code::kUnavailable, "away"), false));
  CHECK_FALSE(FollowerRecordsStop(Status::Ok(), false));
}

TEST_CASE("follower policy: restarts back off from 200 ms, and a long run starts the count again") {
  FollowerRestarts r;
  CHECK(r.Failed() == 200);
  CHECK(r.Failed(10) == 400);
  CHECK(r.Failed(29999) == 800);
  CHECK(r.failures() == 3);
  // A start that ran at least the longest delay (30 s) failed as a first.
  CHECK(r.Failed(30000) == 200);
  CHECK(r.failures() == 1);
  for (int i = 0; i < 20; ++i) r.Failed();
  CHECK(r.Failed() == 30000);
  r.Succeeded();
  CHECK(r.failures() == 0);
  CHECK(r.Failed(INT_MAX) == 200);
}
