#include "wire/http/prometheus_text.h"

#include <charconv>
#include <cmath>

namespace kvtier::wire::http {

namespace {

// As Prometheus's own clients write numbers (Go's 'g', shortest): integers
// without a point, 0.0001 rather than 1e-04, so that a bucket's "le" reads
// the same from every exporter.
std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general).ptr;
  return std::string(buf, end);
}

}  // namespace

void PrometheusText::family(std::string_view name, std::string_view type, std::string_view help) {
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  for (char c : help)
    out_ += c == '\n' ? std::string("\\n") : c == '\\' ? "\\\\" : std::string(1, c);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
}

void PrometheusText::write_labels(const Labels& labels) {
  if (labels.empty()) return;
  out_ += '{';
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out_ += ',';
    out_ += labels[i].first;
    out_ += "=\"";
    for (char c : labels[i].second) {
      if (c == '\\')
        out_ += "\\\\";
      else if (c == '"')
        out_ += "\\\"";
      else if (c == '\n')
        out_ += "\\n";
      else
        out_ += c;
    }
    out_ += '"';
  }
  out_ += '}';
}

void PrometheusText::sample(std::string_view name, const Labels& labels, double value) {
  out_ += name;
  write_labels(labels);
  out_ += ' ';
  out_ += number(value);
  out_ += '\n';
}

void PrometheusText::histogram(std::string_view name, const Labels& labels,
                               const util::LatencyHistogram& h) {
  const std::string base(name);
  long cumulative = 0;
  for (std::size_t i = 0; i <= h.kBoundsSeconds.size(); ++i) {
    cumulative += h.buckets[i];
    Labels with = labels;
    with.emplace_back("le", i < h.kBoundsSeconds.size() ? number(h.kBoundsSeconds[i]) : "+Inf");
    sample(base + "_bucket", with, static_cast<double>(cumulative));
  }
  sample(base + "_sum", labels, h.sum_seconds);
  sample(base + "_count", labels, static_cast<double>(h.count));
}

}  // namespace kvtier::wire::http
