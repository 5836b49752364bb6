#include "storage/database_file.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"

namespace fca::storage {
namespace {

std::optional<std::string> RealPath(const std::string& path) {
  char* resolved = realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return std::nullopt;
  std::string out(resolved);
  free(resolved);  // NOLINT(cppcoreguidelines-no-malloc): realpath's buffer
  return out;
}

}  // namespace

std::string CanonicalPath(const std::string& path) {
  if (std::optional<std::string> real = RealPath(path)) return *real;
  const size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (std::optional<std::string> real = RealPath(folder)) return *real + "/" + name;
  return path;
}

// ------------------------------------------------------------- FileWatch

FileWatch::FileWatch(std::string path) : path_(std::move(path)) {
  absl::MutexLock lock(&mu_);
  Compare(path_, &db_);
  Compare(path_ + "-wal", &wal_);
}

std::string FileWatch::Compare(const std::string& file, std::optional<Identity>* seen) {
  struct stat info {};
  if (stat(file.c_str(), &info) != 0) {
    // A -wal that never existed is not missing; a database always exists.
    return errno == ENOENT && seen->has_value() ? "deleted" : "";
  }
  if (!seen->has_value()) {
    *seen = Identity{info.st_dev, info.st_ino};
    return "";
  }
  return info.st_dev == (*seen)->dev && info.st_ino == (*seen)->ino ? ""
                                                                    : "replaced by another file";
}

absl::Status FileWatch::Check() {
  absl::MutexLock lock(&mu_);
  if (!lost_.ok()) return lost_;
  std::string what = "the database file " + path_;
  std::string happened = Compare(path_, &db_);
  if (happened.empty()) {
    what = "the database's write-ahead log " + path_ + "-wal";
    happened = Compare(path_ + "-wal", &wal_);
  }
  if (happened.empty()) return absl::OkStatus();
  lost_ = absl::UnavailableError(absl::StrFormat(
      "storage: %s was %s while the server ran; nothing more is written to it (it would be "
      "lost). Put the file back or restore it from a backup, then restart fca-server",
      what, happened));
  LOG(ERROR) << "*** " << lost_.message() << " ***";
  return lost_;
}

// ----------------------------------------------------------- DiskReserve

bool DiskReserve::Fill() {
  absl::MutexLock lock(&mu_);
  struct stat info {};
  if (stat(path_.c_str(), &info) == 0 && info.st_blocks * 512 >= bytes_) return true;
  const int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  int error = fd < 0 ? errno : posix_fallocate(fd, 0, bytes_);
  if (fd >= 0 && error == 0 && fsync(fd) != 0) error = errno;
  if (fd >= 0) close(fd);
  if (error == 0) {
    if (warned_ || released_) LOG(INFO) << "storage: the disk reserve " << path_ << " is back";
    warned_ = released_ = false;
    return true;
  }
  // No half reserve: its blocks are what others need now.
  if (fd >= 0 && truncate(path_.c_str(), 0) != 0) error = errno;
  if (!warned_) {
    LOG(WARNING) << absl::StrFormat(
        "storage: cannot keep the disk reserve %s (%d bytes): %s; a delete on a full disk may "
        "fail until there is room",
        path_, bytes_, std::strerror(error));
  }
  warned_ = true;
  return false;
}

std::optional<int64_t> FreeBytesBeside(const std::string& path) {
  const std::string canonical = CanonicalPath(path);
  const size_t slash = canonical.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : canonical.substr(0, slash + 1);
  struct statvfs fs {};
  if (statvfs(folder.c_str(), &fs) != 0) return std::nullopt;
  return static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
}

bool DiskReserve::Release(std::string_view for_what) {
  absl::MutexLock lock(&mu_);
  struct stat info {};
  if (stat(path_.c_str(), &info) != 0 || info.st_blocks == 0) return false;
  if (truncate(path_.c_str(), 0) != 0) {
    LOG(ERROR) << "storage: cannot release the disk reserve " << path_ << ": "
               << std::strerror(errno);
    return false;
  }
  LOG(WARNING) << "storage: the disk is full: released the disk reserve " << path_ << " "
               << for_what;
  released_ = true;
  return true;
}

}  // namespace fca::storage
