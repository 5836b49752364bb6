// Safetensors reader and writer (https://github.com/huggingface/safetensors).
//
// Layout: 8-byte little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data area; offsets are relative to the start of the data area.
//
// Files are memory-mapped read-only; a tensor is a view into the mapping and
// stays valid while its SafetensorsFile (or ShardedSafetensors) lives.
// Every malformed input (truncated file, oversized header, bad JSON, unknown
// dtype, shape/offset mismatch, out-of-range or overlapping offsets) is an
// INVALID_ARGUMENT whose message names the file's base name, the tensor and the
// problem. Nothing here throws. Torch-free.
#ifndef FCA_SERVER_ENGINE_IO_SAFETENSORS_H_
#define FCA_SERVER_ENGINE_IO_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/json.h"

namespace fca::engine {

class WeightsHashCache;

enum class DType { kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool };

// "F32", "BF16", ... as written in safetensors headers.
std::string_view DTypeName(DType d);
[[nodiscard]] absl::StatusOr<DType> ParseDType(std::string_view name);
size_t DTypeSize(DType d);

// A read-only view of one tensor's bytes inside a mapped file.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // may be nullptr when num_bytes == 0
  size_t num_bytes = 0;
  // The product of `shape`. Views from a SafetensorsFile have shapes whose
  // every partial product fits int64, so this never overflows for them.
  int64_t numel() const;
};

struct SafetensorsLimits {
  // A header larger than this is refused before it is read (the format's own
  // reference implementation uses 100 MB).
  uint64_t max_header_bytes = 100ull << 20;
};

// One memory-mapped .safetensors file.
class SafetensorsFile {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(
      const std::string& path, const SafetensorsLimits& limits = {});
  // Parses an in-memory buffer (tests, uploads). The bytes are copied.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBytes(
      std::string bytes, std::string display_name, const SafetensorsLimits& limits = {});
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // Tensor names in sorted order.
  std::vector<std::string> Names() const;
  bool Has(std::string_view name) const;
  // NOT_FOUND naming the tensor when absent.
  [[nodiscard]] absl::StatusOr<TensorView> Get(std::string_view name) const;
  // Drops the memory pages wholly inside `view` from the process's resident
  // set once its bytes have been copied (they are re-read from the file if
  // touched again), so a loaded model costs its weights once in RSS, not
  // twice. No-op unless this file is mapped and the view lies inside it.
  void ReleasePages(const TensorView& view) const;
  // Copies the bytes of `view`, one of this file's tensors, into `dst`
  // (view.num_bytes of them). A mapped file is read with pread, not through
  // the mapping: its pages never enter the process's resident set and no
  // page fault is taken per 4 KiB page, which is where a multi-GB load
  // spent most of its time. The read is from the file opened by Open, even
  // if its path has been replaced since. INVALID_ARGUMENT when `view` is
  // not this file's, DATA_LOSS when the file has been truncated since it
  // was opened, else the read's error (by errno), naming the file.
  [[nodiscard]] absl::Status ReadInto(const TensorView& view, void* dst) const;
  // The "__metadata__" string map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }

 private:
  SafetensorsFile() = default;
  [[nodiscard]] absl::Status ParseHeader(const SafetensorsLimits& limits);

  std::string path_;
  std::string display_name_;
  std::string owned_;              // FromBytes storage
  const uint8_t* base_ = nullptr;  // start of the file bytes
  uint64_t size_ = 0;
  bool mapped_ = false;
  int fd_ = -1;  // the mapped file, for ReadInto; -1 for FromBytes
  std::map<std::string, TensorView, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A set of tensors from either a single model.safetensors or a sharded
// checkpoint described by model.safetensors.index.json
// ({"metadata": {...}, "weight_map": {tensor: shard file}}). Shard file names
// must be plain names inside the same folder (no '/', no '..'); every tensor
// in the weight map must exist in its shard and no tensor may appear twice.
class TensorSource {
 public:
  // Opens `dir`/model.safetensors.index.json when it exists, otherwise
  // `dir`/model.safetensors. NOT_FOUND when neither exists.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TensorSource>> OpenDir(
      const std::string& dir, const SafetensorsLimits& limits = {});
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TensorSource>> OpenFile(
      const std::string& path, const SafetensorsLimits& limits = {});
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TensorSource>> OpenIndex(
      const std::string& index_path, const SafetensorsLimits& limits = {});
  ~TensorSource();

  std::vector<std::string> Names() const;
  bool Has(std::string_view name) const;
  [[nodiscard]] absl::StatusOr<TensorView> Get(std::string_view name) const;
  // The files backing this source, in a fixed (sorted) order; the weights
  // identity is the SHA-256 over their bytes in this order.
  const std::vector<std::string>& files() const { return files_; }
  // SafetensorsFile::ReleasePages for the shard holding `view`.
  void ReleasePages(const TensorView& view) const;
  // SafetensorsFile::ReadInto for the shard holding `view`; NOT_FOUND when
  // no shard holds a tensor of its name.
  [[nodiscard]] absl::Status ReadInto(const TensorView& view, void* dst) const;
  // SHA-256 (hex) over the bytes of files() in order: the weights identity.
  // Read from the files on demand, or answered by `cache` (optional, not
  // owned) when they have not changed since it hashed them.
  [[nodiscard]] absl::StatusOr<std::string> ContentSha256(WeightsHashCache* cache = nullptr) const;

 private:
  TensorSource() = default;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, const SafetensorsFile*, std::less<>> owner_;
  std::vector<std::string> files_;
};

// A tensor to be written: bytes are little-endian, row-major, exactly
// numel * DTypeSize(dtype) long.
struct TensorData {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::string bytes;
};

// Serializes tensors (sorted by name, contiguous offsets, header padded with
// spaces to a multiple of 8 bytes). INVALID_ARGUMENT on a size mismatch or a
// duplicate name.
[[nodiscard]] absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<TensorData>& tensors,
    const std::map<std::string, std::string>& metadata = {});
// Writes atomically (temporary file + rename).
[[nodiscard]] absl::Status WriteSafetensors(
    const std::string& path, const std::vector<TensorData>& tensors,
    const std::map<std::string, std::string>& metadata = {});
// Writes `dir`/model-0000i-of-0000n.safetensors shards of at most
// `max_shard_bytes` each (a tensor never spans shards) plus
// `dir`/model.safetensors.index.json.
[[nodiscard]] absl::Status WriteShardedSafetensors(const std::string& dir,
                                                   const std::vector<TensorData>& tensors,
                                                   uint64_t max_shard_bytes);
// A model folder: creates `dir`, writes `dir`/config.json (`config`, pretty)
// and `dir`/model.safetensors.
[[nodiscard]] absl::Status WriteModelFolder(const std::string& dir, const json::Value& config,
                                            const std::vector<TensorData>& tensors);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_IO_SAFETENSORS_H_
