#include "server/engine/audit/model_cache.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_format.h"
#include "common/stopwatch.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

ModelCache::Trust ModelCache::trust() const {
  absl::MutexLock lock(&mu_);
  return trust_;
}

SiteTensors ModelCache::Read(const WindowSet& w, int64_t b, int64_t e) {
  if (cache_ == nullptr || trust() == Trust::kIgnored) return {};
  const Clock::time_point t0 = Clock::now();
  SiteTensors out = ReadWindows(w, b, e);
  const double seconds = SecondsSince(t0);
  absl::MutexLock lock(&mu_);
  read_seconds_ += seconds;
  return out;
}

void ModelCache::Write(const WindowSet& w, const SiteTensors& rec, int64_t b) {
  if (cache_ == nullptr) return;
  const Clock::time_point t0 = Clock::now();
  WriteWindows(w, rec, b);
  const double seconds = SecondsSince(t0);
  absl::MutexLock lock(&mu_);
  write_seconds_ += seconds;
}

std::string ModelCache::Judge(const SiteTensors& cached, const SiteTensors& rec, const char* set,
                              int64_t b, int64_t e) {
  const ComputeDType dtype = model_.info().compute.dtype;
  const double rtol = dtype == ComputeDType::kBFloat16  ? 1.0 / 128
                      : dtype == ComputeDType::kFloat16 ? 1.0 / 1024
                                                        : 0.0;
  double max_diff = 0, worst_excess = 0;
  for (size_t s = 0; s < cached.size(); ++s) {
    const at::Tensor fresh = rec[s].to(at::kFloat);
    const at::Tensor diff = (cached[s].to(at::kFloat) - fresh).abs();
    if (diff.numel() == 0) continue;
    max_diff = std::max(max_diff, diff.max().item<double>());
    const at::Tensor excess = diff - (opt_.fidelity_tolerance + rtol * fresh.abs());
    worst_excess = std::max(worst_excess, excess.max().item<double>());
  }
  absl::MutexLock lock(&mu_);
  max_abs_diff_ = std::max(max_abs_diff_, max_diff);
  if (worst_excess <= 0) {
    if (trust_ == Trust::kUnchecked) trust_ = Trust::kTrusted;
    return "";
  }
  if (trust_ == Trust::kIgnored) return "";
  trust_ = Trust::kIgnored;
  return absl::StrFormat(
      "model '%s': cached coefficients of %s windows %d..%d differ from a fresh LIVE recording "
      "(max |diff| %.3g); the cache is not used for this model and its entries are rewritten",
      model_.info().name, set, b, e - 1, max_diff);
}

double ModelCache::max_abs_diff() const {
  absl::MutexLock lock(&mu_);
  return max_abs_diff_;
}

double ModelCache::read_seconds() const {
  absl::MutexLock lock(&mu_);
  return read_seconds_;
}

double ModelCache::write_seconds() const {
  absl::MutexLock lock(&mu_);
  return write_seconds_;
}

SiteTensors ModelCache::ReadWindows(const WindowSet& w, int64_t b, int64_t e) const {
  std::vector<std::string> blobs;
  {
    absl::MutexLock lock(&cache_mu_);
    for (int64_t i = b; i < e; ++i) {
      auto blob = cache_->Get(Key(w.hashes[i]));
      if (!blob || blob->size() != WindowBytes()) return {};
      blobs.push_back(std::move(*blob));
    }
  }
  return DecodeWindows(blobs);
}

void ModelCache::WriteWindows(const WindowSet& w, const SiteTensors& rec, int64_t b) const {
  std::vector<at::Tensor> host;
  for (const at::Tensor& t : rec) host.push_back(t.contiguous());
  for (int64_t i = 0; i < host[0].size(0); ++i) {
    std::string bytes;
    bytes.reserve(WindowBytes());
    for (const at::Tensor& t : host) {
      at::Tensor row = t[i];
      bytes.append(static_cast<const char*>(row.data_ptr()), row.nbytes());
    }
    absl::MutexLock lock(&cache_mu_);
    cache_->Put(Key(w.hashes[b + i]), bytes);
  }
}

SiteTensors ModelCache::DecodeWindows(const std::vector<std::string>& blobs) const {
  const int64_t T = opt_.window_length;
  const at::ScalarType dtype = ScalarTypeOf(model_.info().compute.dtype);
  SiteTensors out;
  size_t offset = 0;
  for (const CoefficientSite& s : model_.sites()) {
    // Views of the blobs: at::stack copies them into the batch's tensor.
    std::vector<at::Tensor> rows;
    for (const std::string& blob : blobs) {
      rows.push_back(
          at::from_blob(const_cast<char*>(blob.data()) + offset, {T, s.channels}, dtype));
    }
    offset += T * s.channels * ElementSize();
    out.push_back(at::stack(rows));
  }
  return out;
}

CoefficientCacheKey ModelCache::Key(const std::string& window_hash) const {
  const ModelInfo& info = model_.info();
  return {info.weights_sha256, window_hash, ComputeDTypeName(info.compute.dtype),
          info.compute.device};
}

size_t ModelCache::WindowBytes() const {
  size_t elements = 0;
  for (const CoefficientSite& s : model_.sites()) elements += s.channels;
  return elements * opt_.window_length * ElementSize();
}

size_t ModelCache::ElementSize() const {
  return ComputeDTypeDefOf(model_.info().compute.dtype).element_bytes;
}

}  // namespace fca::engine
