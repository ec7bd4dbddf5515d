// Deciding and storing an election (mq/election.h, format-spec/cluster.md
// §18.4): R55's hold on a replica that restarted since its claim, what each
// mode of `mq-isr elect` (and the simulator's controller) runs, and the
// compare-and-swap that stores it, decided again when the state moved.
#include <catch2/catch.hpp>

#include <set>
#include <vector>

#include "model.h"  // tests/sim: the cluster store in memory
#include "mq/election.h"

using namespace mq;

namespace {

PartitionState Part(std::vector<int32_t> replicas, std::vector<int32_t> isr, int32_t leader) {
  PartitionState p;
  p.topic = "t";
  p.partition = 0;
  p.replicas = std::move(replicas);
  p.isr = std::move(isr);
  p.leader = leader;
  p.leader_epoch = 4;
  return p;
}

auto In(std::set<int32_t> ids) {
  return [ids = std::move(ids)](int32_t id) { return ids.count(id) > 0; };
}

// A view from sets, counting what is asked.
class SetView : public ElectionView {
 public:
  // `reasons`, when given, counts the reasons asked.
  SetView(std::set<int32_t> available, std::set<int32_t> electable, int* reasons = nullptr)
      : available_(std::move(available)), electable_(std::move(electable)), reasons_(reasons) {}
  bool LeaderAvailable(int32_t id) override { return available_.count(id) > 0; }
  bool Electable(int32_t id) override { return electable_.count(id) > 0; }
  std::string Reason(const PartitionState&, const ElectionDecision& d) override {
    if (reasons_) ++*reasons_;
    return d.outcome == ElectionOutcome::kStuck ? "stuck" : "test election";
  }

 private:
  std::set<int32_t> available_, electable_;
  int* reasons_;
};

sim::MemClusterStore Store(const PartitionState& p) {
  ClusterState s;
  ReplicatedTopic t;
  t.name = "t";
  t.replication_factor = static_cast<int32_t>(p.replicas.size());
  s.topics.push_back(t);
  s.partitions.push_back(p);
  return sim::MemClusterStore(std::move(s));
}

// A cluster store whose first `moves` AlterPartition calls find the
// partition epoch moved by someone else (it is moved, then kFenced).
class MovingStore : public ClusterStore {
 public:
  MovingStore(sim::MemClusterStore& inner, int moves) : inner_(inner), moves_(moves) {}
  Result<ClusterState> Load() override { return inner_.Load(); }
  Result<PartitionState> AlterPartition(const PartitionState& proposed,
                                        std::string_view reason) override {
    ++calls;
    if (moves_ > 0) {
      --moves_;
      inner_.state().partitions.front().partition_epoch += 1;
    }
    return inner_.AlterPartition(proposed, reason);
  }
  int calls = 0;

 private:
  sim::MemClusterStore& inner_;
  int moves_;
};

}  // namespace

TEST_CASE("election R55: a replica that did not restart since its claim is not held back") {
  std::vector<int32_t> asked;
  auto restarted = [&](int32_t id) {
    asked.push_back(id);
    return id != 0;
  };
  CHECK(HeldBackByRestart(Part({0, 1, 2}, {0, 1, 2}, 0), 0, restarted) == -1);
  CHECK(asked == std::vector<int32_t>{0});  // nobody else is asked
}

TEST_CASE(
    "election R55: a restarted replica is held back by the first ISR member that did not restart") {
  const PartitionState p = Part({0, 1, 2}, {2, 0, 1}, 0);
  CHECK(HeldBackByRestart(p, 0, In({0})) == 2);
  CHECK(HeldBackByRestart(p, 0, In({0, 2})) == 1);
  // Outside the ISR as well.
  CHECK(HeldBackByRestart(Part({0, 1, 2}, {1}, 1), 2, In({2})) == 1);
}

TEST_CASE(
    "election R55: when every ISR member restarted, or it is the only one, it is not held back") {
  CHECK(HeldBackByRestart(Part({0, 1, 2}, {0, 1, 2}, 0), 1, In({0, 1, 2})) == -1);
  CHECK(HeldBackByRestart(Part({0, 1, 2}, {1}, 1), 1, In({1})) == -1);
}

TEST_CASE("election decide: an available leader is left alone, and nobody else is asked") {
  bool asked_electable = false;
  auto electable = [&](int32_t) {
    asked_electable = true;
    return true;
  };
  const auto d =
      DecideElection(Part({0, 1, 2}, {0, 1, 2}, 1), ElectMode::kUnclean, In({1}), electable);
  CHECK(d.outcome == ElectionOutcome::kNothing);
  CHECK(!d.next);
  CHECK(!asked_electable);
}

TEST_CASE("election decide: an unavailable leader is replaced by a clean election") {
  const auto d = DecideElection(Part({0, 1, 2}, {0, 1, 2}, 0), ElectMode::kUnavailableOnly, In({}),
                                In({1, 2}));
  REQUIRE(d.outcome == ElectionOutcome::kElected);
  CHECK(d.kind == ElectionKind::kClean);
  CHECK(d.next->leader == 1);
  CHECK(d.next->leader_epoch == 5);
  CHECK(d.next->isr == std::vector<int32_t>{1, 2});
}

TEST_CASE("election decide: without a leader, availability is not asked") {
  bool asked = false;
  const auto d = DecideElection(
      Part({0, 1}, {0, 1}, -1), ElectMode::kUnavailableOnly,
      [&](int32_t) {
        asked = true;
        return true;
      },
      In({0, 1}));
  CHECK(!asked);
  REQUIRE(d.outcome == ElectionOutcome::kElected);
  CHECK(d.next->leader == 0);
}

TEST_CASE("election decide: no live ISR member is stuck, unless unclean elects one outside it") {
  const PartitionState p = Part({0, 1, 2}, {0}, 0);
  const auto clean = DecideElection(p, ElectMode::kUnavailableOnly, In({}), In({2}));
  CHECK(clean.outcome == ElectionOutcome::kStuck);
  CHECK(clean.kind == ElectionKind::kClean);
  CHECK(!clean.next);
  const auto unclean = DecideElection(p, ElectMode::kUnclean, In({}), In({2}));
  REQUIRE(unclean.outcome == ElectionOutcome::kElected);
  CHECK(unclean.kind == ElectionKind::kUnclean);
  CHECK(unclean.next->leader == 2);
  CHECK(unclean.next->isr == std::vector<int32_t>{2});
  const auto nobody = DecideElection(p, ElectMode::kUnclean, In({}), In({}));
  CHECK(nobody.outcome == ElectionOutcome::kStuck);
  CHECK(nobody.kind == ElectionKind::kUnclean);
}

TEST_CASE("election decide: preferred moves leadership to the first replica, whoever leads") {
  bool asked = false;
  auto available = [&](int32_t) {
    asked = true;
    return true;
  };
  const auto d = DecideElection(Part({0, 1, 2}, {0, 1, 2}, 1), ElectMode::kPreferred, available,
                                In({0, 1, 2}));
  CHECK(!asked);
  REQUIRE(d.outcome == ElectionOutcome::kElected);
  CHECK(d.kind == ElectionKind::kPreferred);
  CHECK(d.next->leader == 0);
  // Already leading, or not electable: nothing to move.
  CHECK(
      DecideElection(Part({0, 1, 2}, {0, 1, 2}, 0), ElectMode::kPreferred, available, In({0, 1, 2}))
          .outcome == ElectionOutcome::kNothing);
  CHECK(DecideElection(Part({0, 1, 2}, {0, 1, 2}, 1), ElectMode::kPreferred, available, In({1, 2}))
            .outcome == ElectionOutcome::kNothing);
}

TEST_CASE("election store: an election is stored with its reason, the partition epoch moving") {
  auto store = Store(Part({0, 1, 2}, {0, 1, 2}, 0));
  auto r =
      ElectAndStore(store, store.state(), "t", 0, ElectMode::kUnavailableOnly,
                    [&](const ClusterState&, const PartitionState&) {
                      return std::make_unique<SetView>(std::set<int32_t>{}, std::set<int32_t>{2});
                    });
  REQUIRE(r);
  CHECK(r->outcome == ElectionOutcome::kElected);
  CHECK(r->before.leader == 0);
  CHECK(r->stored.leader == 2);
  CHECK(r->stored.partition_epoch == 1);
  CHECK(r->reason == "test election");
  CHECK(store.partition().leader == 2);
  CHECK(store.partition().isr == std::vector<int32_t>{2});
  REQUIRE(!store.recent().empty());
  CHECK_THAT(store.recent().back(), Catch::Contains("(test election)"));
}

TEST_CASE("election store: nothing to do or stuck stores nothing, and only stuck asks a reason") {
  auto store = Store(Part({0, 1, 2}, {0}, 0));
  int reasons = 0;
  auto view = [&](std::set<int32_t> available, std::set<int32_t> electable) {
    return [&reasons, available, electable](const ClusterState&, const PartitionState&) {
      return std::make_unique<SetView>(available, electable, &reasons);
    };
  };
  auto nothing =
      ElectAndStore(store, store.state(), "t", 0, ElectMode::kUnavailableOnly, view({0}, {0}));
  REQUIRE(nothing);
  CHECK(nothing->outcome == ElectionOutcome::kNothing);
  CHECK(nothing->reason.empty());
  auto stuck =
      ElectAndStore(store, store.state(), "t", 0, ElectMode::kUnavailableOnly, view({}, {1, 2}));
  REQUIRE(stuck);
  CHECK(stuck->outcome == ElectionOutcome::kStuck);
  CHECK(stuck->reason == "stuck");
  CHECK(store.changes() == 0);
  CHECK(reasons == 1);
}

TEST_CASE("election store: a partition epoch that moved meanwhile is loaded and decided again") {
  auto inner = Store(Part({0, 1, 2}, {0, 1, 2}, 0));
  MovingStore store(inner, 1);
  int views = 0;
  auto r = ElectAndStore(
      store, inner.state(), "t", 0, ElectMode::kUnavailableOnly,
      [&](const ClusterState& s, const PartitionState& p) {
        ++views;
        CHECK(&p == s.Partition("t", 0));
        return std::make_unique<SetView>(std::set<int32_t>{}, std::set<int32_t>{1, 2});
      });
  REQUIRE(r);
  CHECK(r->outcome == ElectionOutcome::kElected);
  CHECK(views == 2);
  CHECK(store.calls == 2);
  CHECK(r->stored.leader == 1);
  CHECK(r->stored.partition_epoch == 2);  // moved once by the other, once by this
}

TEST_CASE(
    "election store: a state that keeps moving fails kFenced after 4 attempts, and an unknown "
    "partition kNotFound") {
  auto inner = Store(Part({0, 1, 2}, {0, 1, 2}, 0));
  MovingStore store(inner, 100);
  auto view = [](const ClusterState&, const PartitionState&) {
    return std::make_unique<SetView>(std::set<int32_t>{}, std::set<int32_t>{1});
  };
  auto r = ElectAndStore(store, inner.state(), "t", 0, ElectMode::kUnavailableOnly, view);
  REQUIRE(!r);
  CHECK(r.error().code() == Code::kFenced);
  CHECK(store.calls == 4);
  auto missing = ElectAndStore(inner, inner.state(), "t", 7, ElectMode::kUnavailableOnly, view);
  REQUIRE(!missing);
  CHECK(missing.error().code() == Code::kNotFound);
  CHECK_THAT(missing.error().message(), Catch::Contains("no partition t-7"));
}
