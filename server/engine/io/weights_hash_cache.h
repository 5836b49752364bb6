// The SHA-256 of a model's weight files, and a cache of it that outlives the
// process, so an unchanged model folder is not read in full (2.8 GB for
// MUDDPythia-1.4B) at every server start.
//
// A model's weights identity is the SHA-256 over the bytes of its weight
// files in a fixed order (TensorSource::files()). A cache entry maps that
// list of files, each by its identity, to the digest:
//   canonical path, size, modification time and status-change time (both in
//   nanoseconds), device and inode.
// Rewriting a file in place changes its times (the status-change time
// cannot be set back from user space, unlike the modification time that
// `touch -d` or `rsync -t` set); replacing it by rename changes its inode.
// Either way its entry no longer matches, and the files are hashed again.
// A file changed within the same timestamp tick as it was last hashed would
// go unnoticed, so files changed less than a moment (kSettleNanos) before
// hashing began are hashed but not remembered.
//
// The cache file is a small JSON document written whole, as a temporary
// file renamed over the old one, after every digest it learns, without the
// entries whose files no longer match. A missing file starts an empty
// cache; an unreadable or malformed one is logged on stderr, ignored and
// replaced at the next write, never an error. Several processes may share
// one file: the last writer's entries win, and an entry lost that way only
// costs one more hash.
//
// Torch-free. Thread-safe.
#ifndef FCA_SERVER_ENGINE_IO_WEIGHTS_HASH_CACHE_H_
#define FCA_SERVER_ENGINE_IO_WEIGHTS_HASH_CACHE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace fca::engine {

// SHA-256 (hex) over the bytes of `paths` in order, read with read(2), not
// remembered. Errors name the file's base name only: NOT_FOUND,
// PERMISSION_DENIED, INVALID_ARGUMENT for a file that is not a regular
// file, INTERNAL for a failed read or a failure of OpenSSL.
[[nodiscard]] absl::StatusOr<std::string> Sha256OfFiles(const std::vector<std::string>& paths);

class WeightsHashCache {
 public:
  // A file changed less than this long before its hashing began is not
  // remembered: timestamps advance in ticks (a few milliseconds), so a
  // change later in the same tick would leave its identity as it was.
  static constexpr int64_t kSettleNanos = 100'000'000;

  // What the cache has done since it was opened (monitoring, benchmarks).
  struct Stats {
    int64_t hits = 0;          // lists of files answered without reading them
    int64_t misses = 0;        // lists of files hashed
    int64_t bytes_hashed = 0;  // bytes read to hash them
    double hash_seconds = 0;   // time spent hashing them
  };

  // Reads the cache file at `path`; an empty `path` keeps the entries in
  // this process only. Never fails: a cache file that cannot be read or
  // parsed is logged and treated as empty.
  static std::unique_ptr<WeightsHashCache> Open(std::string path);

  // Sha256OfFiles(paths), answered from the cache when every file's
  // identity is unchanged since it was hashed; errors as Sha256OfFiles's.
  // A failure to write the cache file is logged, not returned.
  [[nodiscard]] absl::StatusOr<std::string> Sha256Of(const std::vector<std::string>& paths);

  Stats stats() const;
  // The cache file; empty when it is kept in memory only.
  const std::string& path() const { return path_; }

  // What identifies one file's contents without reading them (see above).
  struct FileIdentity {
    std::string path;  // canonical
    int64_t size = 0;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
    uint64_t device = 0;
    uint64_t inode = 0;
    bool operator==(const FileIdentity& o) const;
  };

 private:
  struct Entry {
    std::vector<FileIdentity> files;
    std::string sha256;
  };

  explicit WeightsHashCache(std::string path) : path_(std::move(path)) {}
  // Loads path_ into entries_ (at Open, before any other thread sees this).
  void Load();
  // Writes the entries whose files are unchanged to path_; logs failures.
  void Save();

  const std::string path_;
  mutable absl::Mutex mu_;
  // Keyed by the list of files' identities, serialized.
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
  // Held across a whole Save, so that the file written last holds the
  // entries known last.
  absl::Mutex save_mu_ ABSL_ACQUIRED_BEFORE(mu_);
};

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_IO_WEIGHTS_HASH_CACHE_H_
