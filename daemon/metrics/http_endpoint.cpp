#include "metrics/http_endpoint.hpp"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "metrics/collect.hpp"

namespace gpumem::daemon::metrics {

namespace {

using families = std::vector<prometheus::MetricFamily>;

prometheus::MetricType to_prometheus(metric_type type) {
  switch (type) {
    case metric_type::counter:
      return prometheus::MetricType::Counter;
    case metric_type::histogram:
      return prometheus::MetricType::Histogram;
    case metric_type::gauge:
      break;
  }
  return prometheus::MetricType::Gauge;
}

std::vector<prometheus::ClientMetric::Label> to_prometheus(const label_set& labels) {
  std::vector<prometheus::ClientMetric::Label> converted;
  for (const auto& [name, value] : labels) converted.push_back({name, value});
  return converted;
}

families to_prometheus(const snapshot& taken) {
  families converted;
  for (const family& each : taken) {
    prometheus::MetricFamily made{each.name, each.help, to_prometheus(each.type), {}};
    for (const sample& one : each.samples) {
      prometheus::ClientMetric metric;
      metric.label = to_prometheus(one.labels);
      const auto value = static_cast<double>(one.value);
      if (each.type == metric_type::counter) {
        metric.counter.value = value;
      } else {
        metric.gauge.value = value;
      }
      made.metric.push_back(std::move(metric));
    }
    for (const histogram_sample& one : each.histograms) {
      prometheus::ClientMetric metric;
      metric.label = to_prometheus(one.labels);
      metric.histogram.sample_count = one.count;
      metric.histogram.sample_sum = one.sum;
      for (const auto& [bound, count] : one.buckets)
        metric.histogram.bucket.push_back({count, bound});
      metric.histogram.bucket.push_back({one.count, std::numeric_limits<double>::infinity()});
      made.metric.push_back(std::move(metric));
    }
    converted.push_back(std::move(made));
  }
  return converted;
}

}  // namespace

/// What the HTTP threads and the loop share: the scrapes asked for and the last snapshot the
/// loop published.
struct http_endpoint::exchange {
  std::mutex mutex;
  std::condition_variable published_again;
  std::uint64_t asked = 0;     ///< scrapes that asked for a snapshot
  std::uint64_t answered = 0;  ///< the `asked` the last published snapshot answers
  std::shared_ptr<const families> latest = std::make_shared<families>();
  bool closing = false;
};

class http_endpoint::collector final : public prometheus::Collectable {
 public:
  /// @p wake_loop outlives every Collect(): the endpoint stops the Exposer's threads first.
  collector(std::shared_ptr<exchange> shared, loop_wakeup& wake_loop)
      : shared_(std::move(shared)), wake_loop_(wake_loop) {}

  families Collect() const override {
    std::shared_ptr<const families> taken;
    {
      std::unique_lock lock(shared_->mutex);
      const std::uint64_t ticket = ++shared_->asked;
      wake_loop_.wake();
      shared_->published_again.wait_for(
          lock, kFreshness, [&] { return shared_->closing || shared_->answered >= ticket; });
      taken = shared_->latest;
    }
    return *taken;  // copied outside the lock: the loop may publish meanwhile
  }

 private:
  std::shared_ptr<exchange> shared_;
  loop_wakeup& wake_loop_;
};

http_endpoint::http_endpoint(boost::asio::io_context& io, const std::string& address,
                             const books& state)
    : state_(state),
      exchange_(std::make_shared<exchange>()),
      requests_(io, [this] { publish(); }),
      collector_(std::make_shared<collector>(exchange_, requests_)) {
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address, 2);
  } catch (const std::exception& error) {
    throw std::runtime_error("metrics_listen " + address + ": cannot serve HTTP there (" +
                             error.what() + ")");
  }
  exposer_->RegisterCollectable(collector_);
  spdlog::info("serving metrics on http://{}/metrics (port {})", address, port());
}

http_endpoint::~http_endpoint() {
  {
    const std::lock_guard lock(exchange_->mutex);
    exchange_->closing = true;
  }
  exchange_->published_again.notify_all();
  exposer_.reset();
}

std::uint16_t http_endpoint::port() const {
  const std::vector<int> ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : static_cast<std::uint16_t>(ports.front());
}

void http_endpoint::publish() {
  std::uint64_t answering = 0;
  {
    const std::lock_guard lock(exchange_->mutex);
    answering = exchange_->asked;
  }
  std::shared_ptr<const families> fresh;
  try {
    fresh = std::make_shared<const families>(to_prometheus(collect(state_, {.every_uid = true})));
  } catch (const std::exception& error) {
    spdlog::error("metrics for HTTP: {}", error.what());
    return;
  }
  {
    const std::lock_guard lock(exchange_->mutex);
    exchange_->latest = std::move(fresh);
    exchange_->answered = answering;
  }
  exchange_->published_again.notify_all();
}

}  // namespace gpumem::daemon::metrics
