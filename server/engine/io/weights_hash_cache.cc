#include "server/engine/io/weights_hash_cache.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>  // rename
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file.h"
#include "common/json.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace fca::engine {
namespace {

constexpr size_t kReadChunkBytes = size_t{1} << 20;
// Far more than any lab's list of models needs; a bigger file is not ours.
constexpr int64_t kMaxCacheFileBytes = int64_t{16} << 20;
constexpr char kFormat[] = "fca weights hash cache 1";

using FileIdentity = WeightsHashCache::FileIdentity;

// Error messages carry base names only: they may reach clients.
std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

int64_t Nanos(const struct timespec& t) {
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

int64_t RealtimeNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

FileIdentity IdentityOf(const struct stat& st, std::string canonical_path) {
  FileIdentity id;
  id.path = std::move(canonical_path);
  id.size = static_cast<int64_t>(st.st_size);
  id.mtime_ns = Nanos(st.st_mtim);
  id.ctime_ns = Nanos(st.st_ctim);
  id.device = static_cast<uint64_t>(st.st_dev);
  id.inode = static_cast<uint64_t>(st.st_ino);
  return id;
}

absl::StatusOr<FileIdentity> Identify(const std::string& path) {
  char* real = ::realpath(path.c_str(), nullptr);
  if (real == nullptr)
    return ErrnoStatus(errno, absl::StrCat("cannot open '", BaseName(path), "'"));
  std::string canonical(real);
  std::free(real);
  struct stat st;
  if (::stat(canonical.c_str(), &st) != 0) {
    return ErrnoStatus(errno, absl::StrCat("cannot stat '", BaseName(path), "'"));
  }
  return IdentityOf(st, std::move(canonical));
}

absl::StatusOr<std::vector<FileIdentity>> IdentifyAll(const std::vector<std::string>& paths) {
  std::vector<FileIdentity> files;
  for (const std::string& path : paths) {
    FCA_ASSIGN_OR_RETURN(FileIdentity id, Identify(path));
    files.push_back(std::move(id));
  }
  return files;
}

// The same file in the same state, whatever path named it.
bool SameState(const FileIdentity& a, const FileIdentity& b) {
  return a.size == b.size && a.mtime_ns == b.mtime_ns && a.ctime_ns == b.ctime_ns &&
         a.device == b.device && a.inode == b.inode;
}

std::string KeyOf(const std::vector<FileIdentity>& files) {
  std::string key;
  for (const FileIdentity& f : files) {
    absl::StrAppend(&key, f.path, "\n", f.size, " ", f.mtime_ns, " ", f.ctime_ns, " ", f.device,
                    " ", f.inode, "\n");
  }
  return key;
}

struct Hashed {
  std::string sha256;
  std::vector<FileIdentity> files;  // each as it was while it was read (no path)
  bool changed_while_read = false;
  int64_t bytes = 0;
};

// Feeds the file at `path` to `hasher`. O_NONBLOCK keeps a FIFO planted in a
// model folder from blocking the open; it does nothing to a regular file.
absl::Status HashFile(const std::string& path, fca::Sha256& hasher, Hashed& out) {
  const std::string name = BaseName(path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open '", name, "'"));
  struct stat before, after;
  absl::Status status;
  if (::fstat(fd, &before) != 0) {
    status = ErrnoStatus(errno, absl::StrCat("cannot stat '", name, "'"));
  } else if (!S_ISREG(before.st_mode)) {
    status = absl::InvalidArgumentError(absl::StrCat(name, ": not a regular file"));
  }
  std::unique_ptr<uint8_t[]> chunk(status.ok() ? new uint8_t[kReadChunkBytes] : nullptr);
  while (status.ok()) {
    const ssize_t n = ::read(fd, chunk.get(), kReadChunkBytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) status = ErrnoStatus(errno, absl::StrCat("cannot read '", name, "'"));
    if (n <= 0) break;
    hasher.Update(chunk.get(), static_cast<size_t>(n));
    out.bytes += n;
  }
  if (status.ok() && ::fstat(fd, &after) != 0) {
    status = ErrnoStatus(errno, absl::StrCat("cannot stat '", name, "'"));
  }
  ::close(fd);
  FCA_RETURN_IF_ERROR(status);
  out.files.push_back(IdentityOf(before, ""));
  if (!SameState(out.files.back(), IdentityOf(after, ""))) out.changed_while_read = true;
  return absl::OkStatus();
}

absl::StatusOr<Hashed> HashFiles(const std::vector<std::string>& paths) {
  Hashed out;
  fca::Sha256 hasher;
  for (const std::string& path : paths) FCA_RETURN_IF_ERROR(HashFile(path, hasher, out));
  out.sha256 = hasher.FinishHex();
  FCA_RETURN_IF_ERROR(hasher.status());
  return out;
}

// ---------------------------------------------------------------- the file

json::Value FileToJson(const FileIdentity& f) {
  json::Value v = json::Value::MakeObject();
  v.Set("path", json::Value::String(f.path));
  v.Set("size", json::Value::Int(f.size));
  v.Set("mtime_ns", json::Value::Int(f.mtime_ns));
  v.Set("ctime_ns", json::Value::Int(f.ctime_ns));
  // Strings: device and inode numbers are unsigned 64-bit.
  v.Set("device", json::Value::String(absl::StrCat(f.device)));
  v.Set("inode", json::Value::String(absl::StrCat(f.inode)));
  return v;
}

absl::StatusOr<FileIdentity> FileFromJson(const json::Value& v) {
  FileIdentity f;
  FCA_ASSIGN_OR_RETURN(f.path, json::GetString(v, "path"));
  FCA_ASSIGN_OR_RETURN(f.size, json::GetInt(v, "size"));
  FCA_ASSIGN_OR_RETURN(f.mtime_ns, json::GetInt(v, "mtime_ns"));
  FCA_ASSIGN_OR_RETURN(f.ctime_ns, json::GetInt(v, "ctime_ns"));
  FCA_ASSIGN_OR_RETURN(const std::string device, json::GetString(v, "device"));
  FCA_ASSIGN_OR_RETURN(const std::string inode, json::GetString(v, "inode"));
  if (!absl::SimpleAtoi(device, &f.device) || !absl::SimpleAtoi(inode, &f.inode)) {
    return absl::InvalidArgumentError("'device' and 'inode' must be decimal numbers");
  }
  return f;
}

bool IsSha256Hex(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// The entries of a cache file's text, keyed as entries_ is.
absl::StatusOr<std::map<std::string, std::vector<FileIdentity>>> ParseEntries(
    const std::string& text, std::map<std::string, std::string>* sha256_by_key) {
  FCA_ASSIGN_OR_RETURN(const json::Value doc, json::Parse(text));
  FCA_ASSIGN_OR_RETURN(const std::string format, json::GetString(doc, "format"));
  if (format != kFormat) return absl::InvalidArgumentError("unknown format '" + format + "'");
  const json::Value* entries = doc.Find("entries");
  if (entries == nullptr || !entries->is_array()) {
    return absl::InvalidArgumentError("'entries' must be an array");
  }
  std::map<std::string, std::vector<FileIdentity>> files_by_key;
  for (const json::Value& entry : entries->as_array()) {
    FCA_ASSIGN_OR_RETURN(std::string sha256, json::GetString(entry, "sha256"));
    const json::Value* files = entry.Find("files");
    if (!IsSha256Hex(sha256) || files == nullptr || !files->is_array() ||
        files->as_array().empty()) {
      return absl::InvalidArgumentError("an entry needs a 'sha256' and a list of 'files'");
    }
    std::vector<FileIdentity> identities;
    for (const json::Value& file : files->as_array()) {
      FCA_ASSIGN_OR_RETURN(FileIdentity f, FileFromJson(file));
      identities.push_back(std::move(f));
    }
    const std::string key = KeyOf(identities);
    (*sha256_by_key)[key] = std::move(sha256);
    files_by_key[key] = std::move(identities);
  }
  return files_by_key;
}

absl::StatusOr<std::string> ReadCacheFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, "cannot open it");
  std::string text;
  char buffer[1 << 16];
  absl::Status status;
  while (status.ok()) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) status = ErrnoStatus(errno, "cannot read it");
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (static_cast<int64_t>(text.size()) > kMaxCacheFileBytes) {
      status = absl::InvalidArgumentError(
          absl::StrCat("it is larger than ", kMaxCacheFileBytes, " bytes"));
    }
  }
  ::close(fd);
  FCA_RETURN_IF_ERROR(status);
  return text;
}

// A temporary file beside `path`, renamed over it: readers (other processes
// included) see the old file or the new one, never a part. Not synced: after
// a crash the file may be old or empty, and an empty one is only ignored.
absl::Status WriteAtomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp-XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return ErrnoStatus(errno, "cannot create a temporary file beside it");
  absl::Status status;
  size_t done = 0;
  while (status.ok() && done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) status = ErrnoStatus(errno, "cannot write it");
    if (n > 0) done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 && status.ok()) status = ErrnoStatus(errno, "cannot write it");
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = ErrnoStatus(errno, "cannot rename the temporary file over it");
  }
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

void LogCacheProblem(const std::string& path, const absl::Status& status, const char* outcome) {
  LOG(WARNING) << "weights hash cache " << path << ": " << status.message() << "; " << outcome;
}

}  // namespace

bool WeightsHashCache::FileIdentity::operator==(const FileIdentity& o) const {
  return path == o.path && SameState(*this, o);
}

absl::StatusOr<std::string> Sha256OfFiles(const std::vector<std::string>& paths) {
  FCA_ASSIGN_OR_RETURN(Hashed hashed, HashFiles(paths));
  return hashed.sha256;
}

std::unique_ptr<WeightsHashCache> WeightsHashCache::Open(std::string path) {
  std::unique_ptr<WeightsHashCache> cache(new WeightsHashCache(std::move(path)));
  cache->Load();
  return cache;
}

void WeightsHashCache::Load() {
  if (path_.empty()) return;
  absl::StatusOr<std::string> text = ReadCacheFile(path_);
  if (absl::IsNotFound(text.status())) return;  // the first start: nothing learnt yet
  std::map<std::string, std::string> sha256_by_key;
  absl::StatusOr<std::map<std::string, std::vector<FileIdentity>>> files_by_key =
      text.ok() ? ParseEntries(*text, &sha256_by_key)
                : absl::StatusOr<std::map<std::string, std::vector<FileIdentity>>>(text.status());
  if (!files_by_key.ok()) {
    LogCacheProblem(path_, files_by_key.status(),
                    "ignoring it (weights are hashed again and it is rewritten)");
    return;
  }
  absl::MutexLock lock(&mu_);
  for (auto& [key, files] : *files_by_key) {
    entries_[key] = Entry{std::move(files), sha256_by_key[key]};
  }
}

absl::StatusOr<std::string> WeightsHashCache::Sha256Of(const std::vector<std::string>& paths) {
  FCA_ASSIGN_OR_RETURN(const std::vector<FileIdentity> files, IdentifyAll(paths));
  const std::string key = KeyOf(files);
  {
    absl::MutexLock lock(&mu_);
    const auto it = entries_.find(key);
    if (it != entries_.end()) {
      ++stats_.hits;
      return it->second.sha256;
    }
  }
  const int64_t began_ns = RealtimeNanos();
  const auto start = std::chrono::steady_clock::now();
  FCA_ASSIGN_OR_RETURN(const Hashed hashed, HashFiles(paths));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Remembered only when the bytes hashed are those of the identities
  // looked up, and no later change could leave those identities as they are.
  bool remember = !files.empty() && !hashed.changed_while_read;
  for (size_t i = 0; i < files.size(); ++i) {
    remember = remember && SameState(files[i], hashed.files[i]) &&
               files[i].mtime_ns + kSettleNanos < began_ns &&
               files[i].ctime_ns + kSettleNanos < began_ns;
  }
  {
    absl::MutexLock lock(&mu_);
    ++stats_.misses;
    stats_.bytes_hashed += hashed.bytes;
    stats_.hash_seconds += seconds;
    if (remember) entries_[key] = Entry{files, hashed.sha256};
  }
  if (remember && !path_.empty()) Save();
  return hashed.sha256;
}

void WeightsHashCache::Save() {
  absl::MutexLock save_lock(&save_mu_);
  std::map<std::string, Entry> snapshot;
  {
    absl::MutexLock lock(&mu_);
    snapshot = entries_;
  }
  json::Array entries;
  std::vector<std::string> stale;
  for (const auto& [key, entry] : snapshot) {
    std::vector<std::string> paths;
    paths.reserve(entry.files.size());
    for (const FileIdentity& f : entry.files) paths.push_back(f.path);
    absl::StatusOr<std::vector<FileIdentity>> now = IdentifyAll(paths);
    // A file changed, moved or gone: its entry can never match again.
    if (!now.ok() || *now != entry.files) {
      stale.push_back(key);
      continue;
    }
    json::Array files;
    for (const FileIdentity& f : entry.files) files.push_back(FileToJson(f));
    json::Value e = json::Value::MakeObject();
    e.Set("sha256", json::Value::String(entry.sha256));
    e.Set("files", json::Value::MakeArray(std::move(files)));
    entries.push_back(std::move(e));
  }
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& key : stale) entries_.erase(key);
  }
  json::Value doc = json::Value::MakeObject();
  doc.Set("format", json::Value::String(kFormat));
  doc.Set("entries", json::Value::MakeArray(std::move(entries)));
  const absl::Status written = WriteAtomically(path_, json::Write(doc, /*pretty=*/true) + "\n");
  if (!written.ok()) LogCacheProblem(path_, written, "the digest is kept in memory only");
}

WeightsHashCache::Stats WeightsHashCache::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace fca::engine
