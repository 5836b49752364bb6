// A budget of bytes shared by concurrent holders: uploads in flight over
// gRPC and HTTP reserve what they may hold (their announced size) before
// taking it, so the server's memory for uploads has a bound
// (ServiceLimits::max_upload_bytes_in_flight, --max_upload_bytes_in_flight).
// Beyond it a reservation is refused at once (the caller answers
// RESOURCE_EXHAUSTED, "retry shortly"): queueing would hold a connection
// and its bytes anyway.
#ifndef FCA_COMMON_BYTE_BUDGET_H_
#define FCA_COMMON_BYTE_BUDGET_H_

#include <cstdint>
#include <optional>

#include "absl/base/thread_annotations.h"
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
    Lease(ByteBudget* budget, int64_t bytes) : budget_(budget), bytes_(bytes) {}
    ByteBudget* budget_ = nullptr;
    int64_t bytes_ = 0;
  };

  explicit ByteBudget(int64_t capacity) : capacity_(capacity) {}
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  // `bytes` (>= 0) of the budget, or nullopt when fewer are free.
  std::optional<Lease> TryReserve(int64_t bytes);

  int64_t capacity() const { return capacity_; }
  int64_t held() const;

 private:
  void Return(int64_t bytes);

  const int64_t capacity_;
  mutable absl::Mutex mu_;
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace fca

#endif  // FCA_COMMON_BYTE_BUDGET_H_
