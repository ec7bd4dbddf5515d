// The walk of a data directory's verification (mq/verify_data_dir.h,
// mq-inspect --verify DIR): what is handed over, in which order, and what
// is only noted.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "mq/partition.h"
#include "mq/topic.h"
#include "mq/verify_data_dir.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

// Writes down each call, as "<what> <path relative to the root>".
class Recorder final : public DataDirVisitor {
 public:
  explicit Recorder(std::string root) : root_(std::move(root)) {}
  std::vector<std::string> calls;
  Status fail_lease;  // returned by MemberLease

  void Corrupt(const Status& s, const std::string& file) override {
    calls.push_back("corrupt " + Rel(file) + " " + s.rule());
  }
  void MetaProperties() override { calls.push_back("meta"); }
  void Topic(const std::string& topic, const TopicConfig* config) override {
    calls.push_back("topic " + topic + (config ? "" : " unread"));
  }
  Status Partition(const std::string& dir, const TopicConfig&) override {
    calls.push_back("partition " + Rel(dir));
    return Status::Ok();
  }
  void AbsentPartition(const std::string& dir) override { calls.push_back("absent " + Rel(dir)); }
  Status MemberLease(const std::string& path) override {
    calls.push_back("lease " + Rel(path));
    return fail_lease;
  }
  Status MemberHeartbeat(const std::string& path) override {
    calls.push_back("heartbeat " + Rel(path));
    return Status::Ok();
  }
  Status GroupOffsets(const std::string& path) override {
    calls.push_back("offsets " + Rel(path));
    return Status::Ok();
  }
  void GroupWithoutOffsets(const std::string& dir) override {
    calls.push_back("no-offsets " + Rel(dir));
  }
  void Note(const Problem& note) override {
    CHECK(note.kind == Problem::Kind::kNote);
    calls.push_back("note " + Rel(note.file) + " " + note.rule);
  }

 private:
  std::string Rel(const std::string& p) const { return p.substr(root_.size() + 1); }
  std::string root_;
};

void Touch(const std::string& path) { std::ofstream(path) << "x"; }

}  // namespace

TEST_CASE("verify walk: every part of a data directory in order, strays noted") {
  TempDir tmp;
  auto dir = DataDir::Open(tmp.path(), true);
  REQUIRE(dir);
  TopicConfig two;
  two.partitions = 2;
  REQUIRE(dir->CreateTopic("b", two).ok());
  REQUIRE(dir->CreateTopic("a", TopicConfig{}).ok());
  {
    RecoveryReport report;
    auto w = PartitionWriter::Open(dir->PartitionDir("b", 1), LogConfig{}, true, &report);
    REQUIRE(w);
    auto batch = MakeBatch(2);
    REQUIRE((*w)->Append(batch).has_value());
    REQUIRE((*w)->Close().ok());
  }
  // Created with its topic, b-0 was never written: gone, it is absent.
  REQUIRE(::rmdir(dir->PartitionDir("b", 0).c_str()) == 0);
  REQUIRE(::mkdir((tmp / "stray-7").c_str(), 0750) == 0);
  REQUIRE(::mkdir((tmp / "groups").c_str(), 0750) == 0);
  for (const char* g : {"groups/g2", "groups/g1", "groups/g1/members", "groups/~deleted-g0"})
    REQUIRE(::mkdir((tmp / g).c_str(), 0750) == 0);
  Touch(tmp / "groups/g1/members/m2.lease");
  Touch(tmp / "groups/g1/members/m1.lease");
  Touch(tmp / "groups/g1/members/m1.alive");
  Touch(tmp / "groups/g1/members/other");
  Touch(tmp / "groups/g2/offsets");
  Touch(tmp / "groups/not-a-group");

  Recorder r(tmp.path());
  REQUIRE(VerifyDataDir(tmp.path(), &r).ok());
  CHECK(r.calls == std::vector<std::string>{
                       "meta",
                       "topic a",
                       "partition a-0",
                       "topic b",
                       "absent b-0",
                       "partition b-1",
                       "lease groups/g1/members/m1.lease",
                       "lease groups/g1/members/m2.lease",
                       "heartbeat groups/g1/members/m1.alive",
                       "no-offsets groups/g1",
                       "offsets groups/g2/offsets",
                       "note groups/not-a-group R12",
                       "note stray-7 R12",
                   });
  CHECK(HasSegments(dir->PartitionDir("b", 1)));
  CHECK_FALSE(HasSegments(tmp / "a-0"));
  CHECK_FALSE(HasSegments(tmp / "none"));

  // A failure handed back stops the walk.
  Recorder failing(tmp.path());
  failing.fail_lease = Status(Code::kIoError, "lease unreadable");
  CHECK(VerifyDataDir(tmp.path(), &failing).code() == Code::kIoError);
  CHECK(failing.calls.back() == "lease groups/g1/members/m1.lease");

  // A damaged meta.properties is corruption handed over, and the end.
  std::ofstream(tmp / "meta.properties", std::ios::trunc) << "version=x\n";
  Recorder damaged(tmp.path());
  REQUIRE(VerifyDataDir(tmp.path(), &damaged).ok());
  REQUIRE(damaged.calls.size() == 1);
  CHECK(damaged.calls[0].starts_with("corrupt meta.properties"));
}
