// SHA-256 (FIPS 180-4). Identities of weights, datasets and windows.
//
// Computed by OpenSSL's EVP interface (libcrypto), which uses the CPU's SHA
// extensions where it has them: several times faster than portable C++, and
// weights are hashed by the gigabyte.
#ifndef FCA_COMMON_SHA256_H_
#define FCA_COMMON_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// OpenSSL's digest context (EVP_MD_CTX), kept out of this header.
struct evp_md_ctx_st;

namespace fca {

// Incremental hasher: Update any number of times, then Finish once.
// Move-only (a moved-from hasher may only be destroyed or assigned to);
// one thread at a time per instance.
class Sha256 {
 public:
  // Aborts, naming OpenSSL, only when the digest context cannot be allocated.
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  void Update(const void* data, size_t size);
  void Update(std::string_view data) { Update(data.data(), data.size()); }
  std::array<uint8_t, 32> Finish();
  // Lower-case hex of Finish().
  std::string FinishHex();

  // OK, or INTERNAL with OpenSSL's reason when it refused an operation: its
  // SHA-256 implementation could not be loaded (a broken OpenSSL
  // configuration) or stopped (a failed FIPS self-test). Never for any
  // input. Once not OK, Update does nothing and Finish returns 32 zero
  // bytes, so callers that keep a digest as an identity check this first
  // (Sha256FileHex does).
  [[nodiscard]] const absl::Status& status() const { return status_; }

 private:
  struct FreeContext {
    void operator()(evp_md_ctx_st* ctx) const;
  };
  // Records the first failure of `what`, with OpenSSL's queued reason.
  void Fail(const char* what);

  std::unique_ptr<evp_md_ctx_st, FreeContext> ctx_;
  absl::Status status_;
};

// Sha256 of `data`; 64 zeros when OpenSSL fails (see Sha256::status).
std::string Sha256Hex(std::string_view data);
// Hashes a file by streaming it; NOT_FOUND / INTERNAL on I/O errors, and
// INTERNAL when OpenSSL fails.
[[nodiscard]] absl::StatusOr<std::string> Sha256FileHex(const std::string& path);

}  // namespace fca

#endif  // FCA_COMMON_SHA256_H_
