#include <gtest/gtest.h>

#include <string>

#include "events/event_hub.hpp"
#include "metrics/collect.hpp"
#include "metrics/family.hpp"
#include "support/host_pools.hpp"

namespace gpumem::daemon {
namespace {

using metrics::metric_type;

books make_books() {
  daemon_config config = embedded_default_config();
  config.pools[0].size = 4 << 20;
  return books(config, host_pools);
}

proto::allocate_request request(std::uint64_t size) {
  proto::allocate_request r{};
  r.size = size;
  r.device = proto::kHostDevice;
  return r;
}

const metrics::family& family_named(const metrics::snapshot& taken, std::string_view name) {
  for (const auto& each : taken) {
    if (each.name == name) return each;
  }
  throw std::runtime_error("no family " + std::string(name));
}

std::vector<std::string> label_values(const metrics::family& of, std::string_view label) {
  std::vector<std::string> values;
  for (const auto& sample : of.samples) {
    for (const auto& [name, value] : sample.labels) {
      if (name == label) values.push_back(value);
    }
  }
  return values;
}

TEST(MetricsText, LabelValuesAndHelpAreEscapedAndTheTextEndsWithEof) {
  metrics::family odd{"gpumemd_odd", "a \\ and a\nnewline", metric_type::gauge, {}, {}};
  odd.samples.push_back({{{"label", "quote\" back\\ line\n"}}, 7});
  const std::string text = metrics::render_text({odd});
  EXPECT_EQ(text,
            "# HELP gpumemd_odd a \\\\ and a\\nnewline\n"
            "# TYPE gpumemd_odd gauge\n"
            "gpumemd_odd{label=\"quote\\\" back\\\\ line\\n\"} 7\n"
            "# EOF\n");
}

TEST(MetricsText, LatencyBucketsAreCumulativeAndEndWithInfAtTheCount) {
  books state = make_books();
  state.requests.record(static_cast<std::uint16_t>(proto::message_type::ping),
                        std::chrono::nanoseconds(900));
  state.requests.record(static_cast<std::uint16_t>(proto::message_type::ping),
                        std::chrono::microseconds(3));
  state.requests.record(static_cast<std::uint16_t>(proto::message_type::ping),
                        std::chrono::seconds(5));
  const std::string text = metrics::render_text(metrics::collect(state, {.every_uid = true}));
  for (const char* line : {
           "gpumemd_request_duration_seconds_bucket{type=\"ping\",le=\"1e-06\"} 1\n",
           "gpumemd_request_duration_seconds_bucket{type=\"ping\",le=\"2e-06\"} 1\n",
           "gpumemd_request_duration_seconds_bucket{type=\"ping\",le=\"4e-06\"} 2\n",
           "gpumemd_request_duration_seconds_bucket{type=\"ping\",le=\"1.048576\"} 2\n",
           "gpumemd_request_duration_seconds_bucket{type=\"ping\",le=\"+Inf\"} 3\n",
           "gpumemd_request_duration_seconds_count{type=\"ping\"} 3\n",
           "gpumemd_request_duration_seconds_sum{type=\"ping\"} 5.0000039\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " is not in\n" << text;
  }
  // Types nobody asked for have no series.
  EXPECT_EQ(text.find("type=\"allocate\""), std::string::npos);
}

TEST(MetricsCollect, LabelsBeyondTheCapAreFoldedIntoOther) {
  books state = make_books();
  for (std::size_t i = 0; i < metrics::kMaxLabelSeries + 6; ++i) {
    const client_id client = state.add_client({static_cast<pid_t>(100 + i), 1000, 1000, {}});
    state.rows.set_label(client, "job-" + std::to_string(i), 0);
    // The first six own the most and keep their series; six of those that own nothing fold.
    if (i < 6) state.memory.allocate(client, request(4096 * (i + 1)));
  }
  const auto taken = metrics::collect(state, {.every_uid = true});
  const auto labels = label_values(family_named(taken, "gpumemd_label_clients"), "label");
  ASSERT_EQ(labels.size(), metrics::kMaxLabelSeries + 1);
  EXPECT_EQ(labels.back(), "other");
  EXPECT_NE(std::find(labels.begin(), labels.end(), "job-0"), labels.end());
  for (const auto& sample : family_named(taken, "gpumemd_label_clients").samples) {
    if (sample.labels.at(0).second == "other") {
      EXPECT_EQ(sample.value, 6u);
    }
  }
}

TEST(MetricsCollect, APlainUserSeesTheNodeTotalsAndOnlyItsOwnUidAndLabels) {
  books state = make_books();
  const client_id mine = state.add_client({100, 1000, 1000, {}});
  state.rows.set_label(mine, "mine", 0);
  const client_id theirs = state.add_client({101, 2000, 2000, {}});
  state.rows.set_label(theirs, "theirs", 0);
  state.memory.allocate(theirs, request(8192));
  const auto taken = metrics::collect(state, {.every_uid = false, .uid = 1000});
  EXPECT_EQ(label_values(family_named(taken, "gpumemd_uid_connections"), "uid"),
            std::vector<std::string>{"1000"});
  EXPECT_EQ(label_values(family_named(taken, "gpumemd_label_clients"), "label"),
            std::vector<std::string>{"mine"});
  EXPECT_EQ(family_named(taken, "gpumemd_clients").samples.at(0).value, 2u);
  EXPECT_EQ(family_named(taken, "gpumemd_pool_used_bytes").samples.at(0).value, 8192u);
}

TEST(MetricsCollect, ADepartureCountsWhatTheClientOwnedAsReclaimed) {
  books state = make_books();
  const client_id leaving = state.add_client({100, 1000, 1000, {}});
  state.memory.allocate(leaving, request(4096));
  state.memory.allocate(leaving, request(8192));
  state.depart(leaving, true);
  EXPECT_EQ(state.activity.died, 1u);
  EXPECT_EQ(state.activity.reclaimed_bytes, 4096u + 8192u);
  EXPECT_EQ(state.activity.reclaimed_objects, 2u);
}

proto::event_record event_of(uid_t uid) {
  return event_hub::about(proto::event_kind::connected, 1, {1, uid, uid, {}}, "x");
}

TEST(EventHub, AFullQueueDropsAndSaysHowManyInOrderOnceThereIsRoom) {
  event_hub hub;
  hub.subscribe(7, 0, true);
  int woken = 0;
  hub.set_waker(7, [&] { ++woken; });
  const std::size_t published = event_hub::kQueueLength + 10;
  for (std::size_t i = 0; i < published; ++i) hub.publish(event_of(1000));
  EXPECT_EQ(woken, 1);  // once, when the first event came to an empty queue
  EXPECT_EQ(hub.lost(), 10u);
  std::vector<proto::event_record> taken;
  hub.take(7, event_hub::kQueueLength, taken);
  hub.publish(event_of(1000));  // room again: the marker goes before it
  hub.take(7, event_hub::kQueueLength, taken);
  ASSERT_EQ(taken.size(), event_hub::kQueueLength + 2);
  const proto::event_record& marker = taken[event_hub::kQueueLength];
  EXPECT_EQ(marker.kind, proto::event_kind::lost);
  EXPECT_EQ(marker.count, 10u);
  EXPECT_EQ(marker.sequence, published);  // the last one dropped
  EXPECT_EQ(taken.back().sequence, published + 1);
}

TEST(EventHub, OthersSeeOnlyEventsAboutTheirUidAndRefusalsAreRateLimited) {
  event_hub hub;
  hub.subscribe(1, 1000, false);
  hub.subscribe(2, 0, true);
  hub.publish(event_of(2000));
  hub.publish(event_of(1000));
  for (std::uint64_t i = 0; i < event_hub::kRefusalsPerSecond + 5; ++i) {
    hub.publish_refusal(event_of(1000));
  }
  std::vector<proto::event_record> plain;
  std::vector<proto::event_record> admin;
  hub.take(1, 1000, plain);
  hub.take(2, 1000, admin);
  ASSERT_EQ(plain.size(), 1 + event_hub::kRefusalsPerSecond);
  EXPECT_EQ(plain[0].uid, 1000u);
  EXPECT_EQ(admin.size(), 2 + event_hub::kRefusalsPerSecond);
  hub.unsubscribe(1);
  EXPECT_EQ(hub.subscribers(), 1u);
}

}  // namespace
}  // namespace gpumem::daemon
