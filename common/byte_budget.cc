#include "common/byte_budget.h"

#include <utility>

namespace fca {

ByteBudget::Lease& ByteBudget::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void ByteBudget::Lease::Release() {
  if (budget_ != nullptr) budget_->Return(bytes_);
  budget_ = nullptr;
  bytes_ = 0;
}

std::optional<ByteBudget::Lease> ByteBudget::TryReserve(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (bytes < 0 || bytes > capacity_ - held_) return std::nullopt;
  held_ += bytes;
  return Lease(this, bytes);
}

int64_t ByteBudget::held() const {
  absl::MutexLock lock(&mu_);
  return held_;
}

void ByteBudget::Return(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  held_ -= bytes;
}

}  // namespace fca
