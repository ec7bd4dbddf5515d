// A wire client whose server process ends before answering (a failed ssh,
// MQ_RSH naming a program that exits) says how it ended, so that
// "connection closed" or "write: Broken pipe" is not all the user sees.
#include <catch2/catch.hpp>

#include <string>

#include <fmt/format.h>

#include "mq/wire.h"

namespace mq::wire {

TEST_CASE("wire client: a server command that exits is named with its exit status") {
  Client::Options o;
  o.timeout_ms = 5000;
  for (const char* program : {"false", "true"}) {
    Client client([program] { return Connection::Start({program}); }, "ctl:/c", o);
    auto r = client.Call(Type::kPing, {});
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Code::kUnavailable);
    INFO(r.error().message());
    CHECK(r.error().message().rfind("ctl:/c: ", 0) == 0);
    const std::string status = std::string(program) == "false" ? "1" : "0";
    CHECK(r.error().message().find(fmt::format("(`{}` exited with status {})", program, status)) !=
          std::string::npos);
  }
}

TEST_CASE("wire client: a server killed by a signal is named with the signal") {
  Client::Options o;
  o.timeout_ms = 5000;
  Client client([] { return Connection::Start({"sh", "-c", "kill -9 $$"}); }, "h0:/r", o);
  auto r = client.Call(Type::kPing, {});
  REQUIRE_FALSE(r);
  INFO(r.error().message());
  CHECK(r.error().message().find("(`sh` was killed by signal 9)") != std::string::npos);
}

}  // namespace mq::wire
