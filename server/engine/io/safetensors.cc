// Long file: the safetensors format whole: reader (single and sharded), validation, writer.
#include "server/engine/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/file.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "server/engine/io/weights_hash_cache.h"

namespace fca::engine {
namespace {

constexpr char kIndexFileName[] = "model.safetensors.index.json";
constexpr char kSingleFileName[] = "model.safetensors";
constexpr char kMetadataKey[] = "__metadata__";
// Headers are {name: {dtype, shape: [..], data_offsets: [..]}}: three levels.
constexpr int kHeaderMaxDepth = 8;

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kF32, "F32", 4},   {DType::kF16, "F16", 2}, {DType::kBF16, "BF16", 2},
    {DType::kF64, "F64", 8},   {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},   {DType::kI8, "I8", 1},   {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
};

const DTypeInfo* FindDType(DType d) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == d) return &info;
  }
  return nullptr;
}

// The last path component; error messages never carry server paths.
std::string BaseName(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  const size_t slash = path.find_last_of('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::string DirName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

// Keeps the status code, puts `prefix: ` in front of the message.
absl::Status Prefixed(const absl::Status& status, std::string_view prefix) {
  return absl::Status(status.code(), absl::StrFormat("%s: %s", prefix, status.message()));
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

uint64_t ReadLittleEndian64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// numel * itemsize, or false when a dimension is negative or either product
// overflows. The element count must fit int64 dimension by dimension, as
// TensorView::numel and torch multiply it: a zero dimension after the
// overflow would make the byte count 0 but not the multiplication defined.
bool CheckedNumBytes(const std::vector<int64_t>& shape, DType dtype, uint64_t* out) {
  int64_t numel = 1;
  for (int64_t dim : shape) {
    if (dim < 0) return false;
    if (__builtin_mul_overflow(numel, dim, &numel)) return false;
  }
  return !__builtin_mul_overflow(static_cast<uint64_t>(numel), DTypeSize(dtype), out);
}

// Opens `path` for reading if it is a regular file. O_NONBLOCK keeps a FIFO
// (or device) planted in a model folder from blocking the open forever; it
// has no effect on reads of a regular file.
absl::StatusOr<int> OpenRegularFile(const std::string& path) {
  const std::string name = BaseName(path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open '", name, "'"));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, absl::StrCat("cannot stat '", name, "'"));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(name, ": not a regular file"));
  }
  return fd;
}

// Reads a whole small file (index JSON), refusing anything over max_bytes.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path, uint64_t max_bytes) {
  const std::string name = BaseName(path);
  FCA_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path));
  std::string contents;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, absl::StrCat("cannot read '", name, "'"));
    }
    if (n == 0) break;
    if (contents.size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": file is larger than the limit of ", max_bytes, " bytes"));
    }
    contents.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return contents;
}

absl::Status WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "write failed");
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Writes `pieces` to a temporary file next to `path`, then renames it over
// `path`, so readers see either the old file or the complete new one.
absl::Status WriteFileAtomically(const std::string& path,
                                 const std::vector<std::string_view>& pieces) {
  const std::string name = BaseName(path);
  std::string tmp = path + ".tmp-XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0)
    return ErrnoStatus(errno, absl::StrCat("cannot create a temporary file for '", name, "'"));
  absl::Status status;
  if (::fchmod(fd, 0644) != 0) status = ErrnoStatus(errno, "fchmod failed");
  for (std::string_view piece : pieces) {
    if (!status.ok()) break;
    status = WriteAll(fd, piece);
  }
  if (::close(fd) != 0 && status.ok()) status = ErrnoStatus(errno, "close failed");
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = ErrnoStatus(errno, "rename failed");
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return Prefixed(status, absl::StrCat("cannot write '", name, "'"));
  }
  return absl::OkStatus();
}

// Validates one tensor entry of a header against the data area; messages
// carry no file or tensor prefix (the caller adds it).
absl::Status ParseTensorEntry(const json::Value& entry, uint64_t data_size, TensorView* view,
                              uint64_t* begin, uint64_t* end) {
  if (!entry.is_object()) return absl::InvalidArgumentError("entry must be a JSON object");
  const json::Value* dtype = entry.Find("dtype");
  if (dtype == nullptr) return absl::InvalidArgumentError("missing 'dtype'");
  if (!dtype->is_string()) return absl::InvalidArgumentError("'dtype' must be a string");
  FCA_ASSIGN_OR_RETURN(view->dtype, ParseDType(dtype->as_string()));

  const json::Value* shape = entry.Find("shape");
  if (shape == nullptr) return absl::InvalidArgumentError("missing 'shape'");
  if (!shape->is_array()) {
    return absl::InvalidArgumentError("'shape' must be an array of non-negative integers");
  }
  for (const json::Value& dim : shape->as_array()) {
    if (!dim.is_int()) {
      return absl::InvalidArgumentError("'shape' must be an array of non-negative integers");
    }
    if (dim.as_int() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape has a negative dimension ", dim.as_int()));
    }
    view->shape.push_back(dim.as_int());
  }

  const json::Value* offsets = entry.Find("data_offsets");
  if (offsets == nullptr) return absl::InvalidArgumentError("missing 'data_offsets'");
  if (!offsets->is_array() || offsets->as_array().size() != 2 || !offsets->as_array()[0].is_int() ||
      !offsets->as_array()[1].is_int() || offsets->as_array()[0].as_int() < 0 ||
      offsets->as_array()[1].as_int() < 0) {
    return absl::InvalidArgumentError("'data_offsets' must be two non-negative integers");
  }
  *begin = static_cast<uint64_t>(offsets->as_array()[0].as_int());
  *end = static_cast<uint64_t>(offsets->as_array()[1].as_int());
  if (*begin > *end) {
    return absl::InvalidArgumentError(
        absl::StrFormat("data_offsets [%d, %d] begin after they end", *begin, *end));
  }
  if (*end > data_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "data_offsets [%d, %d] end beyond the %d-byte data area", *begin, *end, data_size));
  }
  uint64_t needed = 0;
  if (!CheckedNumBytes(view->shape, view->dtype, &needed)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shape %s of %s is too large", ShapeString(view->shape), DTypeName(view->dtype)));
  }
  if (*end - *begin != needed) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "data_offsets [%d, %d] hold %d bytes but shape %s of %s needs %d", *begin, *end,
        *end - *begin, ShapeString(view->shape), DTypeName(view->dtype), needed));
  }
  view->num_bytes = static_cast<size_t>(needed);
  return absl::OkStatus();
}

absl::Status CheckTensorData(const TensorData& t) {
  if (t.name.empty()) return absl::InvalidArgumentError("a tensor has an empty name");
  if (t.name == kMetadataKey) {
    return absl::InvalidArgumentError(
        absl::StrCat("a tensor may not be named '", kMetadataKey, "'"));
  }
  uint64_t needed = 0;
  if (!CheckedNumBytes(t.shape, t.dtype, &needed)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor '%s': shape %s must have non-negative "
                        "dimensions and fit in memory",
                        t.name, ShapeString(t.shape)));
  }
  if (t.bytes.size() != needed) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor '%s': %d bytes given but shape %s of %s needs %d", t.name,
                        t.bytes.size(), ShapeString(t.shape), DTypeName(t.dtype), needed));
  }
  return absl::OkStatus();
}

// Validates every tensor and returns pointers to them sorted by name.
absl::StatusOr<std::vector<const TensorData*>> SortedTensors(
    const std::vector<TensorData>& tensors) {
  std::vector<const TensorData*> sorted;
  sorted.reserve(tensors.size());
  for (const TensorData& t : tensors) {
    FCA_RETURN_IF_ERROR(CheckTensorData(t));
    sorted.push_back(&t);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const TensorData* a, const TensorData* b) { return a->name < b->name; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->name == sorted[i - 1]->name) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", sorted[i]->name, "' appears more than once"));
    }
  }
  return sorted;
}

// The 8-byte length prefix plus the space-padded JSON header.
std::string BuildHeader(const std::vector<const TensorData*>& sorted,
                        const std::map<std::string, std::string>& metadata) {
  json::Object header;
  if (!metadata.empty()) {
    json::Object meta;
    for (const auto& [key, value] : metadata) meta.emplace_back(key, json::Value::String(value));
    header.emplace_back(kMetadataKey, json::Value::MakeObject(std::move(meta)));
  }
  int64_t offset = 0;
  for (const TensorData* t : sorted) {
    json::Array shape;
    for (int64_t dim : t->shape) shape.push_back(json::Value::Int(dim));
    const int64_t end = offset + static_cast<int64_t>(t->bytes.size());
    json::Object entry;
    entry.emplace_back("dtype", json::Value::String(std::string(DTypeName(t->dtype))));
    entry.emplace_back("shape", json::Value::MakeArray(std::move(shape)));
    entry.emplace_back("data_offsets",
                       json::Value::MakeArray({json::Value::Int(offset), json::Value::Int(end)}));
    header.emplace_back(t->name, json::Value::MakeObject(std::move(entry)));
    offset = end;
  }
  std::string json_text = json::Write(json::Value::MakeObject(std::move(header)));
  json_text.append((8 - json_text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = json_text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out += json_text;
  return out;
}

absl::Status WriteSorted(const std::string& path, const std::vector<const TensorData*>& sorted,
                         const std::map<std::string, std::string>& metadata) {
  const std::string header = BuildHeader(sorted, metadata);
  std::vector<std::string_view> pieces;
  pieces.reserve(sorted.size() + 1);
  pieces.push_back(header);
  for (const TensorData* t : sorted) pieces.push_back(t->bytes);
  return WriteFileAtomically(path, pieces);
}

bool IsPlainFileName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of("/\\") == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

}  // namespace

// ---------------------------------------------------------------------------
// DType

std::string_view DTypeName(DType d) {
  const DTypeInfo* info = FindDType(d);
  return info != nullptr ? info->name : "UNKNOWN";
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return absl::InvalidArgumentError(absl::StrFormat("unknown dtype '%s'", name));
}

size_t DTypeSize(DType d) {
  const DTypeInfo* info = FindDType(d);
  return info != nullptr ? info->size : 0;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

// ---------------------------------------------------------------------------
// SafetensorsFile

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(
    const std::string& path, const SafetensorsLimits& limits) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->display_name_ = BaseName(path);
  FCA_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, absl::StrCat("cannot stat '", file->display_name_, "'"));
  }
  file->size_ = static_cast<uint64_t>(st.st_size);
  // A file too short for the length prefix is reported by ParseHeader.
  if (file->size_ >= 8) {
    void* base = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (base == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, absl::StrCat("cannot map '", file->display_name_, "'"));
    }
    file->base_ = static_cast<const uint8_t*>(base);
    file->mapped_ = true;
    file->fd_ = fd;  // kept for ReadInto: the same file as the mapping
  } else {
    ::close(fd);
  }
  FCA_RETURN_IF_ERROR(file->ParseHeader(limits));
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBytes(
    std::string bytes, std::string display_name, const SafetensorsLimits& limits) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->display_name_ = std::move(display_name);
  file->owned_ = std::move(bytes);
  file->base_ = reinterpret_cast<const uint8_t*>(file->owned_.data());
  file->size_ = file->owned_.size();
  FCA_RETURN_IF_ERROR(file->ParseHeader(limits));
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(base_), size_);
  if (fd_ >= 0) ::close(fd_);
}

absl::Status SafetensorsFile::ParseHeader(const SafetensorsLimits& limits) {
  const std::string& file = display_name_;
  if (size_ < 8) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: file is %d bytes, too short for the 8-byte header length", file, size_));
  }
  const uint64_t header_len = ReadLittleEndian64(base_);
  if (header_len > limits.max_header_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: header length %d exceeds the limit of %d bytes", file, header_len,
                        limits.max_header_bytes));
  }
  if (header_len > size_ - 8) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: header length %d exceeds the %d bytes that follow it", file, header_len, size_ - 8));
  }
  const std::string_view header_text(reinterpret_cast<const char*>(base_ + 8), header_len);
  json::ParseOptions options;
  options.max_depth = kHeaderMaxDepth;
  absl::StatusOr<json::Value> header = json::Parse(header_text, options);
  if (!header.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": header is not valid JSON: ", header.status().message()));
  }
  if (!header->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": header is not a JSON object"));
  }
  const uint8_t* data = base_ + 8 + header_len;
  const uint64_t data_size = size_ - 8 - header_len;

  struct Range {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header->as_object()) {
    if (name == kMetadataKey) {
      if (!entry.is_object()) {
        return absl::InvalidArgumentError(
            absl::StrCat(file, ": '", kMetadataKey, "' must be an object of strings"));
      }
      for (const auto& [key, value] : entry.as_object()) {
        if (!value.is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat(file, ": '", kMetadataKey, "' value for '", key, "' must be a string"));
        }
        metadata_[key] = value.as_string();
      }
      continue;
    }
    if (name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": a tensor has an empty name"));
    }
    TensorView view;
    view.name = name;
    uint64_t begin = 0, end = 0;
    absl::Status status = ParseTensorEntry(entry, data_size, &view, &begin, &end);
    if (!status.ok()) {
      return Prefixed(status, absl::StrCat(file, ": tensor '", name, "'"));
    }
    view.data = view.num_bytes == 0 ? nullptr : data + begin;
    // Duplicate names cannot reach here: the JSON parser rejects duplicate
    // keys.
    const auto it = tensors_.emplace(name, std::move(view)).first;
    if (end > begin) ranges.push_back({begin, end, &it->first});
  }

  // Zero-length tensors hold no bytes, so they cannot overlap anything.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : *a.name < *b.name;
  });
  for (size_t i = 1; i < ranges.size(); ++i) {
    const Range& prev = ranges[i - 1];
    const Range& cur = ranges[i];
    if (cur.begin < prev.end) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: tensor '%s': data_offsets [%d, %d] overlap "
                          "tensor '%s' at [%d, %d]",
                          file, *cur.name, cur.begin, cur.end, *prev.name, prev.begin, prev.end));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> SafetensorsFile::Names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, view] : tensors_) names.push_back(name);
  return names;
}

bool SafetensorsFile::Has(std::string_view name) const {
  return tensors_.find(name) != tensors_.end();
}

void SafetensorsFile::ReleasePages(const TensorView& view) const {
  if (!mapped_ || view.num_bytes == 0 || view.data < base_ ||
      view.data + view.num_bytes > base_ + size_) {
    return;
  }
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (page_size <= 0) return;
  const uintptr_t page = static_cast<uintptr_t>(page_size);
  const uintptr_t begin = reinterpret_cast<uintptr_t>(view.data);
  const uintptr_t first = (begin + page - 1) / page * page;  // pages wholly inside the view
  const uintptr_t last = (begin + view.num_bytes) / page * page;
  // The address as a pointer into the mapping, not an integer cast back.
  uint8_t* const start = const_cast<uint8_t*>(view.data) + (first - begin);
  if (last > first) ::madvise(start, last - first, MADV_DONTNEED);
}

absl::Status SafetensorsFile::ReadInto(const TensorView& view, void* dst) const {
  if (view.num_bytes == 0) return absl::OkStatus();
  if (view.data < base_ || view.num_bytes > size_ ||
      view.data - base_ > static_cast<ptrdiff_t>(size_ - view.num_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: tensor '%s' is not in this file", display_name_, view.name));
  }
  if (fd_ < 0) {
    std::memcpy(dst, view.data, view.num_bytes);
    return absl::OkStatus();
  }
  auto* out = static_cast<uint8_t*>(dst);
  const off_t offset = view.data - base_;
  size_t done = 0;
  while (done < view.num_bytes) {
    const ssize_t n = ::pread(fd_, out + done, view.num_bytes - done, offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return ErrnoStatus(
          errno, absl::StrFormat("cannot read tensor '%s' from '%s'", view.name, display_name_));
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrFormat(
          "%s: the file ends inside tensor '%s': it was truncated after it was opened",
          display_name_, view.name));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorView> SafetensorsFile::Get(std::string_view name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrFormat("%s: no tensor named '%s'", display_name_, name));
  }
  return it->second;
}

// ---------------------------------------------------------------------------
// TensorSource

TensorSource::~TensorSource() = default;

absl::StatusOr<std::unique_ptr<TensorSource>> TensorSource::OpenDir(
    const std::string& dir, const SafetensorsLimits& limits) {
  const std::string index = JoinPath(dir, kIndexFileName);
  if (IsRegularFile(index)) return OpenIndex(index, limits);
  const std::string single = JoinPath(dir, kSingleFileName);
  if (IsRegularFile(single)) return OpenFile(single, limits);
  return absl::NotFoundError(
      absl::StrCat("no ", kSingleFileName, " or ", kIndexFileName, " in '", BaseName(dir), "'"));
}

absl::StatusOr<std::unique_ptr<TensorSource>> TensorSource::OpenFile(
    const std::string& path, const SafetensorsLimits& limits) {
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(path, limits));
  std::unique_ptr<TensorSource> source(new TensorSource());
  for (const std::string& name : file->Names()) source->owner_.emplace(name, file.get());
  source->files_.push_back(path);
  source->shards_.push_back(std::move(file));
  return source;
}

absl::StatusOr<std::unique_ptr<TensorSource>> TensorSource::OpenIndex(
    const std::string& index_path, const SafetensorsLimits& limits) {
  const std::string index_name = BaseName(index_path);
  FCA_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(index_path, limits.max_header_bytes));
  absl::StatusOr<json::Value> index = json::Parse(text);
  if (!index.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_name, ": not valid JSON: ", index.status().message()));
  }
  if (!index->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index_name, ": not a JSON object"));
  }
  const json::Value* metadata = index->Find("metadata");
  if (metadata != nullptr && !metadata->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index_name, ": 'metadata' must be an object"));
  }
  const json::Value* weight_map = index->Find("weight_map");
  if (weight_map == nullptr || !weight_map->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_name, ": 'weight_map' must be an object of tensor -> file"));
  }
  if (weight_map->as_object().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(index_name, ": 'weight_map' is empty"));
  }

  // shard file name -> tensors the weight map places in it.
  std::map<std::string, std::vector<std::string>> by_shard;
  std::map<std::string, std::string, std::less<>> mapped;  // tensor -> shard
  for (const auto& [tensor, shard] : weight_map->as_object()) {
    if (!shard.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(index_name, ": tensor '", tensor,
                                                     "': weight_map value must be a file name"));
    }
    if (!IsPlainFileName(shard.as_string())) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_name, ": tensor '", tensor, "': shard name '", shard.as_string(),
                       "' must be a plain file name in the index's folder"));
    }
    // open() would fail with ENAMETOOLONG (INTERNAL); too long to echo.
    if (shard.as_string().size() > NAME_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(index_name, ": tensor '", tensor,
                                                     "': shard name of ", shard.as_string().size(),
                                                     " bytes is longer than ", NAME_MAX));
    }
    by_shard[shard.as_string()].push_back(tensor);
    mapped.emplace(tensor, shard.as_string());
  }

  const std::string dir = DirName(index_path);
  std::unique_ptr<TensorSource> source(new TensorSource());
  for (const auto& [shard_name, tensors] : by_shard) {
    const std::string shard_path = JoinPath(dir, shard_name);
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> shard =
        SafetensorsFile::Open(shard_path, limits);
    if (!shard.ok()) return Prefixed(shard.status(), index_name);
    for (const std::string& tensor : tensors) {
      if (!(*shard)->Has(tensor)) {
        return absl::InvalidArgumentError(absl::StrCat(index_name, ": tensor '", tensor,
                                                       "' is mapped to '", shard_name,
                                                       "' but that file does not contain it"));
      }
    }
    for (const std::string& tensor : (*shard)->Names()) {
      const auto owner = source->owner_.find(tensor);
      if (owner != source->owner_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(index_name, ": tensor '", tensor, "' appears in both '",
                         BaseName(owner->second->path()), "' and '", shard_name, "'"));
      }
      const auto listed = mapped.find(tensor);
      if (listed == mapped.end()) {
        return absl::InvalidArgumentError(absl::StrCat(index_name, ": tensor '", tensor,
                                                       "' is in '", shard_name,
                                                       "' but the weight map does not list it"));
      }
      if (listed->second != shard_name) {
        return absl::InvalidArgumentError(
            absl::StrCat(index_name, ": tensor '", tensor, "' is in '", shard_name,
                         "' but the weight map places it in '", listed->second, "'"));
      }
      source->owner_.emplace(tensor, shard->get());
    }
    source->files_.push_back(shard_path);
    source->shards_.push_back(std::move(*shard));
  }
  return source;
}

std::vector<std::string> TensorSource::Names() const {
  std::vector<std::string> names;
  names.reserve(owner_.size());
  for (const auto& [name, file] : owner_) names.push_back(name);
  return names;
}

bool TensorSource::Has(std::string_view name) const { return owner_.find(name) != owner_.end(); }

absl::StatusOr<TensorView> TensorSource::Get(std::string_view name) const {
  const auto it = owner_.find(name);
  if (it == owner_.end()) {
    return absl::NotFoundError(absl::StrFormat("no tensor named '%s' in the checkpoint", name));
  }
  return it->second->Get(name);
}

void TensorSource::ReleasePages(const TensorView& view) const {
  const auto it = owner_.find(view.name);
  if (it != owner_.end()) it->second->ReleasePages(view);
}

absl::Status TensorSource::ReadInto(const TensorView& view, void* dst) const {
  const auto it = owner_.find(view.name);
  if (it == owner_.end()) {
    return absl::NotFoundError(
        absl::StrFormat("no tensor named '%s' in the checkpoint", view.name));
  }
  return it->second->ReadInto(view, dst);
}

absl::StatusOr<std::string> TensorSource::ContentSha256(WeightsHashCache* cache) const {
  if (cache != nullptr) return cache->Sha256Of(files_);
  return Sha256OfFiles(files_);
}

// ---------------------------------------------------------------------------
// Writer

absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<TensorData>& tensors, const std::map<std::string, std::string>& metadata) {
  FCA_ASSIGN_OR_RETURN(std::vector<const TensorData*> sorted, SortedTensors(tensors));
  std::string out = BuildHeader(sorted, metadata);
  size_t total = out.size();
  for (const TensorData* t : sorted) total += t->bytes.size();
  out.reserve(total);
  for (const TensorData* t : sorted) out += t->bytes;
  return out;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorData>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  FCA_ASSIGN_OR_RETURN(std::vector<const TensorData*> sorted, SortedTensors(tensors));
  return WriteSorted(path, sorted, metadata);
}

absl::Status WriteShardedSafetensors(const std::string& dir, const std::vector<TensorData>& tensors,
                                     uint64_t max_shard_bytes) {
  if (max_shard_bytes == 0) {
    return absl::InvalidArgumentError("max_shard_bytes must be positive");
  }
  if (tensors.empty()) return absl::InvalidArgumentError("no tensors to write");
  FCA_ASSIGN_OR_RETURN(std::vector<const TensorData*> sorted, SortedTensors(tensors));

  // Greedy packing in name order; a tensor larger than the limit gets its own
  // shard.
  std::vector<std::vector<const TensorData*>> shards(1);
  uint64_t shard_bytes = 0;
  uint64_t total_size = 0;
  for (const TensorData* t : sorted) {
    if (!shards.back().empty() && shard_bytes + t->bytes.size() > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(t);
    shard_bytes += t->bytes.size();
    total_size += t->bytes.size();
  }

  json::Object weight_map;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string shard_name =
        absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
    FCA_RETURN_IF_ERROR(WriteSorted(JoinPath(dir, shard_name), shards[i], {}));
    for (const TensorData* t : shards[i]) {
      weight_map.emplace_back(t->name, json::Value::String(shard_name));
    }
  }
  // Shards hold consecutive runs of the sorted names, so weight_map is sorted.
  json::Value index = json::Value::MakeObject();
  index.Set("metadata", json::Value::MakeObject(
                            {{"total_size", json::Value::Int(static_cast<int64_t>(total_size))}}));
  index.Set("weight_map", json::Value::MakeObject(std::move(weight_map)));
  const std::string text = json::Write(index, /*pretty=*/true) + "\n";
  return WriteFileAtomically(JoinPath(dir, kIndexFileName), {text});
}

absl::Status WriteModelFolder(const std::string& dir, const json::Value& config,
                              const std::vector<TensorData>& tensors) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError("cannot create model folder: " + ec.message());
  std::ofstream cfg(dir + "/config.json", std::ios::trunc);
  cfg << json::Write(config, /*pretty=*/true) << "\n";
  if (!cfg.good()) return absl::InternalError("cannot write config.json in " + dir);
  cfg.close();
  return WriteSafetensors(dir + "/model.safetensors", tensors);
}

}  // namespace fca::engine
