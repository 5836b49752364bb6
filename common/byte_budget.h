// A budget of bytes shared by concurrent holders: uploads in flight over
// gRPC and HTTP reserve what they may hold (their announced size) before
// taking it, so the server's memory for uploads has a bound
// (ServiceLimits::max_upload_bytes_in_flight, --max_upload_bytes_in_flight).
// Each reservation names its clients (the address it comes from, the user
// it authenticated as), and each client may hold only a share of the
// budget (--max_upload_bytes_per_client), so one address or key cannot
// take it all. Beyond either a reservation is refused at once (the caller
// answers RESOURCE_EXHAUSTED, "retry shortly"): queueing would hold a
// connection and its bytes anyway.
#ifndef FCA_COMMON_BYTE_BUDGET_H_
#define FCA_COMMON_BYTE_BUDGET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace fca {

class ByteBudget {
 public:
  // Holds bytes of the budget until destroyed (or moved from).
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept { *this = std::move(other); }
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { Release(); }
    int64_t bytes() const { return bytes_; }
    void Release();

   private:
    friend class ByteBudget;
    Lease(ByteBudget* budget, int64_t bytes, std::vector<std::string> clients)
        : budget_(budget), bytes_(bytes), clients_(std::move(clients)) {}
    ByteBudget* budget_ = nullptr;
    int64_t bytes_ = 0;
    std::vector<std::string> clients_;
  };

  // `per_client` above `capacity` is `capacity`.
  ByteBudget(int64_t capacity, int64_t per_client);
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  // `bytes` (>= 0) of the budget for `clients` (each named once, e.g.
  // "user alice" and "address 10.0.0.7"), or RESOURCE_EXHAUSTED naming the
  // first limit it would pass: the budget's, else the first client's share.
  absl::StatusOr<Lease> TryReserve(int64_t bytes, std::vector<std::string> clients);

  // The clients of an upload from `address` by `user` (either may be
  // empty: not counted), as TryReserve takes them.
  static std::vector<std::string> Clients(const std::string& address, const std::string& user);

  int64_t capacity() const { return capacity_; }
  int64_t per_client() const { return per_client_; }
  int64_t held() const;
  // What `client` holds now.
  int64_t held_by(const std::string& client) const;

 private:
  void Return(int64_t bytes, const std::vector<std::string>& clients);

  const int64_t capacity_;
  const int64_t per_client_;
  mutable absl::Mutex mu_;
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, int64_t> held_by_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fca

#endif  // FCA_COMMON_BYTE_BUDGET_H_
