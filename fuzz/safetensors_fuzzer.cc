// Fuzzes the safetensors reader on an in-memory file: length prefix, header
// JSON, tensor table validation. When a file opens, every tensor's bytes are
// read (a sanitizer sees any view outside the file), its size must match its
// shape, and writing the tensors back must give a file that reads back the
// same.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fuzz/fuzz_check.h"
#include "server/engine/io/safetensors.h"

namespace {

using fca::engine::DTypeSize;
using fca::engine::SafetensorsFile;
using fca::engine::TensorData;
using fca::engine::TensorView;

// Touches every byte of the view; the sum keeps the reads from being elided.
uint8_t ReadAll(const TensorView& view) {
  uint8_t sum = 0;
  for (size_t i = 0; i < view.num_bytes; ++i) sum += view.data[i];
  return sum;
}

// safetensors.h promises that every partial product of a view's shape fits
// int64, so numel() is defined.
bool NumelFits(const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(numel, dim, &numel)) return false;
  }
  return true;
}

std::vector<TensorData> CheckTensors(const SafetensorsFile& file) {
  std::vector<TensorData> tensors;
  for (const std::string& name : file.Names()) {
    FUZZ_CHECK(file.Has(name));
    const auto view = file.Get(name);
    FUZZ_CHECK(view.ok());
    FUZZ_CHECK(view->name == name);
    FUZZ_CHECK(view->num_bytes == 0 || view->data != nullptr);
    FUZZ_CHECK(NumelFits(view->shape));
    FUZZ_CHECK(static_cast<uint64_t>(view->numel()) * DTypeSize(view->dtype) == view->num_bytes);
    volatile uint8_t sink = ReadAll(*view);
    (void)sink;
    file.ReleasePages(*view);  // a no-op for in-memory files; must stay one
    tensors.push_back({name, view->dtype, view->shape,
                       std::string(reinterpret_cast<const char*>(view->data), view->num_bytes)});
  }
  FUZZ_CHECK(file.Get("").status().code() == absl::StatusCode::kNotFound);
  return tensors;
}

void CheckRewrite(const std::vector<TensorData>& tensors,
                  const std::map<std::string, std::string>& metadata) {
  const auto bytes = fca::engine::SerializeSafetensors(tensors, metadata);
  FUZZ_CHECK(bytes.ok());
  const auto reread = SafetensorsFile::FromBytes(*bytes, "rewritten.safetensors");
  FUZZ_CHECK(reread.ok());
  FUZZ_CHECK((*reread)->metadata() == metadata);
  FUZZ_CHECK((*reread)->Names().size() == tensors.size());
  for (const TensorData& t : tensors) {
    const auto view = (*reread)->Get(t.name);
    FUZZ_CHECK(view.ok());
    FUZZ_CHECK(view->dtype == t.dtype && view->shape == t.shape);
    FUZZ_CHECK(std::string(reinterpret_cast<const char*>(view->data), view->num_bytes) == t.bytes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = SafetensorsFile::FromBytes(std::string(reinterpret_cast<const char*>(data), size),
                                         "fuzz.safetensors");
  if (!file.ok()) {
    FUZZ_CHECK(file.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  FUZZ_CHECK((*file)->file_size() == size);
  CheckRewrite(CheckTensors(**file), (*file)->metadata());
  return 0;
}
