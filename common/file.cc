#include "common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace fca {
namespace {

absl::Status Cannot(std::string_view what, const std::string& path, int err) {
  return ErrnoStatus(err, absl::StrFormat("cannot read %s '%s'", what, path));
}

// Closes the descriptor on every path out of ReadFile.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

absl::Status ErrnoStatus(int err, std::string_view what) {
  const std::string message = absl::StrFormat("%s: %s", what, std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

absl::StatusOr<std::string> ReadFile(const std::string& path, std::string_view what,
                                     uint64_t max_bytes) {
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return Cannot(what, path, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Cannot(what, path, errno);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot read %s '%s': not a regular file", what, path));
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cannot read %s '%s': it is %d bytes; the limit is %d", what, path, size, max_bytes));
  }
  std::string out;
  out.reserve(size);
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Cannot(what, path, errno);
    if (n == 0) break;
    // The file may grow while it is read; the limit holds for what is read.
    if (out.size() + static_cast<uint64_t>(n) > max_bytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "cannot read %s '%s': it grew past the limit of %d bytes", what, path, max_bytes));
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string ReadFileOrEmpty(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  return text.ok() ? *std::move(text) : std::string();
}

absl::Status WithBaseName(const absl::Status& status, const std::string& path) {
  if (status.ok() || path.empty()) return status;
  const size_t slash = path.find_last_of('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  return absl::Status(status.code(), absl::StrReplaceAll(status.message(), {{path, base}}));
}

}  // namespace fca
