// SHA-256 (FIPS 180-4). Identities of weights, datasets and windows.
#ifndef FCA_COMMON_SHA256_H_
#define FCA_COMMON_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fca {

// Incremental hasher: Update any number of times, then Finish once.
class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t size);
  void Update(std::string_view data) { Update(data.data(), data.size()); }
  std::array<uint8_t, 32> Finish();
  // Lower-case hex of Finish().
  std::string FinishHex();

 private:
  void Block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string Sha256Hex(std::string_view data);
// Hashes a file by streaming it; NOT_FOUND / INTERNAL on I/O errors.
absl::StatusOr<std::string> Sha256FileHex(const std::string& path);

}  // namespace fca

#endif  // FCA_COMMON_SHA256_H_
