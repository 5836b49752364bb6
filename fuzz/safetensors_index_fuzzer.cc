// Fuzzes the sharded-checkpoint index (model.safetensors.index.json): the
// input becomes the index file of a per-process scratch folder in /dev/shm
// that also holds two small valid shards. Whatever the index says, a source
// that opens may only use shard files inside that folder, and every tensor it
// names must read back in full.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fuzz/fuzz_check.h"
#include "server/engine/io/safetensors.h"

namespace {

using fca::engine::DType;
using fca::engine::TensorData;
using fca::engine::TensorSource;

const char* const kShards[] = {"model-00001-of-00002.safetensors",
                               "model-00002-of-00002.safetensors"};

class ScratchDir {
 public:
  ScratchDir() {
    // /dev/shm keeps the per-input file write off the disk.
    dir_ = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    dir_ += "/fca_index_fuzz_XXXXXX";
    FUZZ_CHECK(::mkdtemp(dir_.data()) != nullptr);
    const std::vector<TensorData> first = {
        {"a", DType::kF32, {2}, std::string(8, '\1')},
        {"b", DType::kU8, {0, 3}, ""},
    };
    const std::vector<TensorData> second = {{"c", DType::kI64, {1}, std::string(8, '\2')}};
    FUZZ_CHECK(fca::engine::WriteSafetensors(Path(kShards[0]), first).ok());
    FUZZ_CHECK(fca::engine::WriteSafetensors(Path(kShards[1]), second).ok());
  }
  ~ScratchDir() {
    for (const char* name : {kShards[0], kShards[1], "model.safetensors.index.json"}) {
      std::remove(Path(name).c_str());
    }
    ::rmdir(dir_.c_str());
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

void WriteIndex(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  FUZZ_CHECK(f != nullptr);
  FUZZ_CHECK(std::fwrite(data, 1, size, f) == size);
  FUZZ_CHECK(std::fclose(f) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Static storage: removed at exit, also when libFuzzer stops after -runs.
  static ScratchDir scratch;
  const std::string index = scratch.Path("model.safetensors.index.json");
  WriteIndex(index, data, size);
  auto source = TensorSource::OpenDir(scratch.dir());
  if (!source.ok()) {
    // NOT_FOUND: a shard the index names is not in the folder.
    FUZZ_CHECK(source.status().code() == absl::StatusCode::kInvalidArgument ||
               source.status().code() == absl::StatusCode::kNotFound);
    return 0;
  }
  for (const std::string& file : (*source)->files()) {
    FUZZ_CHECK(file == scratch.Path(kShards[0]) || file == scratch.Path(kShards[1]));
  }
  for (const std::string& name : (*source)->Names()) {
    const auto view = (*source)->Get(name);
    FUZZ_CHECK(view.ok());
    uint8_t sum = 0;
    for (size_t i = 0; i < view->num_bytes; ++i) sum += view->data[i];
    volatile uint8_t sink = sum;
    (void)sink;
  }
  return 0;
}
