// ProducerStateManager: a partition writer's producer table, its replay and
// snapshot policy (producer.md §10, P7); AppendCheck: one call's sequence
// checks.
#include <catch2/catch.hpp>

#include "format/format.h"
#include "storage/producer_state_manager.h"
#include "storage/segment.h"
#include "storage/state_file.h"
#include "writer_units_support.h"

namespace mq {
namespace {

using test::FillDir;
using test::TempDir;

BatchOptions Producer(int64_t id, int32_t sequence = 0) {
  BatchOptions o;
  o.producer_id = id;
  o.producer_epoch = 0;
  o.base_sequence = sequence;
  return o;
}

// The committed state and segments of the log in `d` as published.
StateFields Committed(const PartitionDir& d) {
  auto state = StateFile::OpenForRead(d.fd(), d.fs);
  REQUIRE(state);
  auto fields = state->Read();
  REQUIRE(fields);
  return *fields;
}

std::vector<int64_t> Segments(const PartitionDir& d) {
  auto list = ListSegments(d.fd(), d.fs);
  REQUIRE(list);
  return *list;
}

BatchHeader ProducerHeader(int64_t id, int16_t epoch, int32_t sequence, int32_t count) {
  BatchHeader h;
  h.producer_id = id;
  h.producer_epoch = epoch;
  h.base_sequence = sequence;
  h.last_offset_delta = count - 1;
  h.records_count = count;
  return h;
}

}  // namespace

TEST_CASE("P7 producer-state manager: Rebuild replays the log after the newest snapshot") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  LogConfig small;
  small.segment_bytes = 700;  // rolls: a snapshot at each roll
  test::WriteLog(dir, 20, 2, Producer(9), small);
  PartitionDir d;
  FillDir(&d, dir, small);
  REQUIRE(Segments(d).size() > 2);
  ProducerStateManager m;
  REQUIRE(m.Rebuild(d, Segments(d), Committed(d)).ok());
  CHECK(m.loaded());
  REQUIRE(m.table().LastSequence(9));
  CHECK(*m.table().LastSequence(9) == 39);  // 20 batches of 2 records
}

TEST_CASE("P7 producer-state manager: CatchUp replays what another writer appended since") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  test::WriteLog(dir, 2, 2, Producer(4));
  PartitionDir d;
  FillDir(&d, dir);
  ProducerStateManager m;
  StateFields before = Committed(d);
  REQUIRE(m.Rebuild(d, Segments(d), before).ok());
  CHECK(*m.table().LastSequence(4) == 3);
  {
    auto w = PartitionWriter::Open(dir, {}, false, nullptr);
    REQUIRE(w);
    auto b = test::MakeBatch(3, 2000, 8, Producer(4, 4));
    REQUIRE((*w)->Append(b));
    REQUIRE((*w)->Close().ok());
  }
  REQUIRE(m.CatchUp(d, Segments(d), before, Committed(d)).ok());
  CHECK(*m.table().LastSequence(4) == 6);
}

TEST_CASE("P7 producer-state manager: a deferred table is built only when first needed") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  test::WriteLog(dir, 2, 2, Producer(4));
  PartitionDir d;
  FillDir(&d, dir);
  ProducerStateManager m;
  m.Defer(-1);
  CHECK_FALSE(m.loaded());
  // Deferred: catching up reads nothing, close wants nothing of a short log.
  REQUIRE(m.CatchUp(d, Segments(d), StateFields{}, Committed(d)).ok());
  CHECK_FALSE(m.table().LastSequence(4));
  CHECK_FALSE(m.TableWanted(Committed(d), 1));
  CHECK_FALSE(m.SnapshotWanted(Committed(d)));
  REQUIRE(m.Ensure(d, Segments(d), Committed(d), nullptr).ok());
  CHECK(m.loaded());
  CHECK(*m.table().LastSequence(4) == 3);
}

TEST_CASE(
    "P7 producer-state manager: close writes a snapshot only when the replay after the "
    "newest one would be long") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  PartitionDir d;
  FillDir(&d, dir);
  StateFields f;
  f.end_segment_base = 0;
  ProducerStateManager m;
  // An empty log: the table is the (absent) snapshot's, nothing to write.
  REQUIRE(m.Rebuild(d, {}, f).ok());
  CHECK_FALSE(m.SnapshotWanted(f));
  f.log_end_offset = 10;
  f.end_position = 1000;
  m.table().Update(ProducerHeader(1, 0, 0, 10));
  CHECK(m.SnapshotWanted(f));  // no snapshot in the active segment
  REQUIRE(m.SnapshotAtClose(d, f, false).ok());
  CHECK(test::Exists(dir + "/00000000000000000010.snapshot"));
  CHECK_FALSE(m.SnapshotWanted(f));  // nothing appended since
  f.log_end_offset = 12;
  f.end_position = 2000;  // the replay after the snapshot is short
  CHECK_FALSE(m.SnapshotWanted(f));
  f.end_position = 1000 + format::kSnapshotReplayBytes;
  CHECK(m.SnapshotWanted(f));
  // A deferred table of a big active segment with no snapshot in it.
  m.Defer(-1);
  CHECK(m.TableWanted(f, 1));
  CHECK(m.SnapshotMayBeDue(f, 1, nullptr));
}

TEST_CASE("P3 append check: later batches of one producer in a call follow the earlier ones") {
  ProducerStateTable table;
  AppendCheck check(table);
  auto first = check.Check(ProducerHeader(5, 0, 0, 2), 0);
  REQUIRE(first);
  CHECK_FALSE(first->has_value());
  auto next = check.Check(ProducerHeader(5, 0, 2, 1), 100);
  REQUIRE(next);
  auto gap = check.Check(ProducerHeader(5, 0, 5, 1), 200);
  REQUIRE_FALSE(gap);
  CHECK(gap.error().code() == Code::kOutOfOrder);
  CHECK_THAT(gap.error().message(), Catch::Contains("batch at 200"));
  BatchHeader none;  // no producer id: never checked
  auto unchecked = check.Check(none, 300);
  REQUIRE(unchecked);
  CHECK_FALSE(unchecked->has_value());
}

TEST_CASE("P2 append check: a batch the table holds is a duplicate with the original's offsets") {
  ProducerStateTable table;
  BatchHeader h = ProducerHeader(5, 0, 0, 2);
  h.base_offset = 40;
  table.Update(h);
  AppendCheck check(table);
  auto dup = check.Check(ProducerHeader(5, 0, 0, 2), 0);
  REQUIRE(dup);
  REQUIRE(dup->has_value());
  CHECK((*dup)->base_offset == 40);
  CHECK((*dup)->duplicate);
}

}  // namespace mq
