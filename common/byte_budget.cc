#include "common/byte_budget.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace fca {

ByteBudget::Lease& ByteBudget::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    clients_ = std::exchange(other.clients_, {});
  }
  return *this;
}

void ByteBudget::Lease::Release() {
  if (budget_ != nullptr) budget_->Return(bytes_, clients_);
  budget_ = nullptr;
  bytes_ = 0;
  clients_.clear();
}

ByteBudget::ByteBudget(int64_t capacity, int64_t per_client)
    : capacity_(capacity), per_client_(std::min(capacity, per_client)) {}

absl::StatusOr<ByteBudget::Lease> ByteBudget::TryReserve(int64_t bytes,
                                                         std::vector<std::string> clients) {
  if (bytes < 0) return absl::InvalidArgumentError("a negative number of bytes");
  absl::MutexLock lock(&mu_);
  if (bytes > capacity_ - held_) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("uploads in flight would exceed the server's limit of %d bytes "
                        "(--max_upload_bytes_in_flight); retry shortly",
                        capacity_));
  }
  for (const std::string& client : clients) {
    const auto it = held_by_.find(client);
    const int64_t holds = it == held_by_.end() ? 0 : it->second;
    if (bytes > per_client_ - holds) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("uploads in flight of %s would exceed its share of %d bytes "
                          "(--max_upload_bytes_per_client); retry when one of them has finished",
                          client, per_client_));
    }
  }
  held_ += bytes;
  for (const std::string& client : clients) held_by_[client] += bytes;
  return Lease(this, bytes, std::move(clients));
}

std::vector<std::string> ByteBudget::Clients(const std::string& address, const std::string& user) {
  std::vector<std::string> clients;
  if (!user.empty()) clients.push_back("user " + user);
  if (!address.empty()) clients.push_back("address " + address);
  return clients;
}

int64_t ByteBudget::held() const {
  absl::MutexLock lock(&mu_);
  return held_;
}

int64_t ByteBudget::held_by(const std::string& client) const {
  absl::MutexLock lock(&mu_);
  const auto it = held_by_.find(client);
  return it == held_by_.end() ? 0 : it->second;
}

void ByteBudget::Return(int64_t bytes, const std::vector<std::string>& clients) {
  absl::MutexLock lock(&mu_);
  held_ -= bytes;
  for (const std::string& client : clients) {
    const auto it = held_by_.find(client);
    if (it == held_by_.end()) continue;
    it->second -= bytes;
    if (it->second <= 0) held_by_.erase(it);
  }
}

}  // namespace fca
