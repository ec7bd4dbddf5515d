// R12: names that become paths.

#include <string>

#include <catch2/catch.hpp>

#include "mq/topic.h"

namespace {

bool Valid(const std::string& name) { return mq::ValidateName(name, "topic").ok(); }

}  // namespace

TEST_CASE("R12 names: letters, digits, dot, underscore and dash are accepted") {
  CHECK(Valid("orders"));
  CHECK(Valid("a"));
  CHECK(Valid("Orders.EU_west-1"));
  CHECK(Valid("..."));
  CHECK(Valid(".hidden"));
  CHECK(Valid("0"));
}

TEST_CASE("R12 names: length is 1 to 249 characters") {
  CHECK_FALSE(Valid(""));
  CHECK(Valid(std::string(249, 'x')));
  CHECK_FALSE(Valid(std::string(250, 'x')));
  auto s = mq::ValidateName(std::string(250, 'x'), "topic");
  CHECK(s.code() == mq::Code::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("250 characters"));
}

TEST_CASE("R12 names: . and .. are refused") {
  CHECK_FALSE(Valid("."));
  CHECK_FALSE(Valid(".."));
  CHECK_THAT(mq::ValidateName("..", "group").message(), Catch::Contains("invalid group name"));
}

TEST_CASE("R12 names: path separators and traversal are refused") {
  CHECK_FALSE(Valid("a/b"));
  CHECK_FALSE(Valid("../x"));
  CHECK_FALSE(Valid("/etc"));
  auto s = mq::ValidateName("a/b", "topic");
  CHECK_THAT(s.message(), Catch::Contains("'/' at position 1"));
  CHECK_THAT(s.message(), Catch::Contains("R12"));
}

TEST_CASE("R12 names: control bytes are refused and shown escaped") {
  const std::string with_nul("ab\0c", 4);
  CHECK_FALSE(Valid(with_nul));
  auto s = mq::ValidateName(with_nul, "topic");
  CHECK_THAT(s.message(), Catch::Contains("\\x00' at position 2"));
  CHECK_FALSE(Valid("line\nbreak"));
  CHECK_THAT(mq::ValidateName("line\nbreak", "topic").message(), Catch::Contains("\\x0a"));
  CHECK_FALSE(Valid("tab\there"));
  CHECK_FALSE(Valid("caf\xc3\xa9"));
}

TEST_CASE("R12 names: shell metacharacters are refused") {
  for (const char* bad : {"a;b", "$x", "a(b", "a)b", "a b", "a*", "a:b", "a\\b", "a\"b"}) {
    INFO(bad);
    CHECK_FALSE(Valid(bad));
  }
}

TEST_CASE("R12 names: the first bad character is the one reported") {
  auto s = mq::ValidateName("ok;$()", "topic");
  CHECK_THAT(s.message(), Catch::Contains("';' at position 2"));
}
