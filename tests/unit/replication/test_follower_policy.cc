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

TEST_CASE(
    "follower policy: a step fetches on the state loaded before only from a remote leader, while "
    "catching up, for a second") {
  FollowerStepResult streaming;
  streaming.appended_bytes = 4096;
  streaming.appended_records = 4;
  CHECK(FollowerReusesState(true, streaming, 5000, 5000));
  CHECK(FollowerReusesState(true, streaming, 5000, 5000 + kFollowerStateReuseMs - 1));
  CHECK_FALSE(FollowerReusesState(true, streaming, 5000, 5000 + kFollowerStateReuseMs));
  CHECK_FALSE(FollowerReusesState(true, streaming, 5000, 4999));  // the clock went back
  // A leader on this host answers on the follower's state: loaded each step.
  CHECK_FALSE(FollowerReusesState(false, streaming, 5000, 5000));
  // Caught up (the next fetch may wait for appends), or nothing appended
  // (a truncation, a first step, a failed one): loaded again.
  FollowerStepResult caught_up = streaming;
  caught_up.caught_up = true;
  CHECK_FALSE(FollowerReusesState(true, caught_up, 5000, 5000));
  CHECK_FALSE(FollowerReusesState(true, FollowerStepResult{}, 5000, 5000));
  FollowerStepResult cut;
  cut.truncated_to = 10;
  CHECK_FALSE(FollowerReusesState(true, cut, 5000, 5000));
}
