// Replays inputs through a fuzz target without libFuzzer, so the normal (gcc)
// build can keep every corpus file and every input that ever crashed as a
// test (ctest fuzz_regression_test, fuzz/replay_all.cmake).
//
// Usage: <name>_replay PATH...  Each PATH is a file or a folder whose regular
// files (recursively, in sorted order) are fed once each to
// LLVMFuzzerTestOneInput. Exit status 0 when every input ran; 2 when a path is
// missing or unreadable; a failed check or a sanitizer report aborts.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

// The regular files under `path` (or `path` itself), sorted; false when
// `path` cannot be listed.
bool CollectInputs(const fs::path& path, std::vector<fs::path>* inputs) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    inputs->push_back(path);
    return true;
  }
  if (!fs::is_directory(path, ec)) return false;
  std::vector<fs::path> found;
  for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec)) found.push_back(it->path());
  }
  if (ec) return false;
  std::sort(found.begin(), found.end());
  inputs->insert(inputs->end(), found.begin(), found.end());
  return true;
}

bool ReadInput(const fs::path& path, std::vector<uint8_t>* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  bytes->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    if (!CollectInputs(argv[i], &inputs)) {
      std::fprintf(stderr, "replay: cannot read '%s'\n", argv[i]);
      return 2;
    }
  }
  std::vector<uint8_t> bytes;
  for (const fs::path& input : inputs) {
    if (!ReadInput(input, &bytes)) {
      std::fprintf(stderr, "replay: cannot read '%s'\n", input.c_str());
      return 2;
    }
    // An exactly sized heap copy, so a sanitized build catches a read one
    // byte past the input, as libFuzzer would.
    std::unique_ptr<uint8_t[]> copy(new uint8_t[bytes.size()]);
    std::copy(bytes.begin(), bytes.end(), copy.get());
    std::fprintf(stderr, "replay: %s\n", input.c_str());
    LLVMFuzzerTestOneInput(copy.get(), bytes.size());
  }
  std::printf("replay: %zu inputs ran\n", inputs.size());
  return 0;
}
