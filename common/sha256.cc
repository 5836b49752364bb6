#include "common/sha256.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace fca {
namespace {

constexpr size_t kFileChunkBytes = size_t{1} << 20;

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// OpenSSL's oldest queued reason on this thread, and the queue emptied: the
// queue is shared with gRPC's TLS, which must not find our errors in it.
std::string TakeOpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no reason given";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

struct FetchedDigest {
  const EVP_MD* digest = nullptr;  // null when no provider offers SHA-256
  std::string error;               // why, then
};

// Fetched once per process: an implicit fetch (EVP_sha256()) at every
// initialisation takes a lock and searches the provider store, which costs
// more than hashing a short window. Never freed: it lives as long as the
// process.
const FetchedDigest& Sha256Digest() {
  static const FetchedDigest* const fetched = [] {
    auto* f = new FetchedDigest;
    f->digest = EVP_MD_fetch(nullptr, "SHA2-256", nullptr);
    if (f->digest == nullptr) f->error = TakeOpenSslError();
    return f;
  }();
  return *fetched;
}

}  // namespace

void Sha256::FreeContext::operator()(evp_md_ctx_st* ctx) const { EVP_MD_CTX_free(ctx); }

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  // EVP_MD_CTX_new fails only when malloc does. Update, Finish and
  // Sha256Hex have no error channel to report it through, and a hasher
  // without a context has no state to fall back on; so this aborts, as a
  // failed `new` would.
  if (ctx_ == nullptr) {
    // A plain write, not glog: nothing is allocated on the way to abort,
    // and the CLI, which hashes uploads too, does not link glog.
    std::fprintf(stderr, "fca: out of memory: OpenSSL cannot allocate a SHA-256 context\n");
    std::abort();
  }
  const FetchedDigest& fetched = Sha256Digest();
  if (fetched.digest == nullptr) {
    status_ = absl::InternalError(absl::StrCat("OpenSSL has no SHA-256: ", fetched.error));
  } else if (EVP_DigestInit_ex(ctx_.get(), fetched.digest, nullptr) != 1) {
    Fail("initialise SHA-256");
  }
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::Fail(const char* what) {
  const std::string reason = TakeOpenSslError();
  if (!status_.ok()) return;  // the first failure explains the rest
  status_ = absl::InternalError(absl::StrCat("OpenSSL cannot ", what, ": ", reason));
}

void Sha256::Update(const void* data, size_t size) {
  if (size == 0 || !status_.ok()) return;  // data may be nullptr when size is 0
  if (EVP_DigestUpdate(ctx_.get(), data, size) != 1) Fail("hash");
}

std::array<uint8_t, 32> Sha256::Finish() {
  std::array<uint8_t, 32> digest{};
  unsigned int length = 0;
  if (status_.ok() &&
      (EVP_DigestFinal_ex(ctx_.get(), digest.data(), &length) != 1 || length != digest.size())) {
    Fail("finish SHA-256");
  }
  if (!status_.ok()) digest.fill(0);
  return digest;
}

std::string Sha256::FinishHex() {
  static constexpr char kHex[] = "0123456789abcdef";
  const std::array<uint8_t, 32> digest = Finish();
  std::string out(64, '0');
  for (size_t i = 0; i < digest.size(); ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 0xF];
  }
  return out;
}

std::string Sha256Hex(std::string_view data) {
  Sha256 hasher;
  hasher.Update(data);
  return hasher.FinishHex();
}

absl::StatusOr<std::string> Sha256FileHex(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open '", BaseName(path), "' for hashing: ", std::strerror(errno)));
  }
  Sha256 hasher;
  std::unique_ptr<uint8_t[]> chunk(new uint8_t[kFileChunkBytes]);
  while (true) {
    const ssize_t n = ::read(fd, chunk.get(), kFileChunkBytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return absl::InternalError(
          absl::StrCat("cannot read '", BaseName(path), "' for hashing: ", std::strerror(err)));
    }
    if (n == 0) break;
    hasher.Update(chunk.get(), static_cast<size_t>(n));
  }
  ::close(fd);
  std::string hex = hasher.FinishHex();
  if (!hasher.status().ok()) return hasher.status();
  return hex;
}

}  // namespace fca
