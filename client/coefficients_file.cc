#include "client/coefficients_file.h"

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/exit_codes.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "common/vocabulary.h"

namespace fca::client {

namespace v1 = ::fca::v1;
namespace {

struct Layout {
  ComputeDType dtype;
  size_t element_bytes;
  int64_t window_length;
  int64_t total_channels = 0;
};

absl::StatusOr<Layout> CheckLayout(const v1::CoefficientsHeader& h, std::string_view raw) {
  const std::optional<ComputeDType> dtype = ParseComputeDType(h.dtype());
  if (!dtype.has_value()) {
    return absl::InvalidArgumentError(absl::StrFormat("coefficients of dtype '%s': not one of %s",
                                                      h.dtype(), ComputeDTypeNameList()));
  }
  Layout l{*dtype, static_cast<size_t>(ComputeDTypeDefOf(*dtype).element_bytes), h.window_length()};
  if (l.window_length <= 0) return absl::InvalidArgumentError("coefficients with T <= 0");
  for (const v1::CoefficientSite& s : h.sites()) {
    if (s.channels() <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat("site %s has no channels", s.name()));
    }
    l.total_channels += s.channels();
  }
  const uint64_t want = static_cast<uint64_t>(l.window_length) * l.total_channels * l.element_bytes;
  if (raw.size() != want) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d bytes of coefficients, but T=%d x %d channels x %d bytes = %d",
                        raw.size(), l.window_length, l.total_channels, l.element_bytes, want));
  }
  return l;
}

// NPY 1.0: magic, version, a uint16 LE header length, then the header (a
// Python dict literal) padded with spaces and ended by '\n' so that the
// data starts at a multiple of 64 bytes (numpy.lib.format). `shape` is the
// tuple's inside, "3, 4".
std::string NpyHeader(const Layout& l, const std::string& shape) {
  const char* descr = l.dtype == ComputeDType::kFloat16 ? "<f2" : "<f4";
  std::string dict =
      absl::StrFormat("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape);
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

// Site-major blocks into one token-major matrix [T, C] appended to `out`:
// row t is every site's row t, in site order; `widen`: bfloat16 to float32.
void AppendTokenMajor(const v1::CoefficientsHeader& h, const Layout& l, std::string_view raw,
                      bool widen, std::string& out) {
  const size_t e = l.element_bytes;
  out.reserve(out.size() + raw.size() * (widen ? 2 : 1));
  for (int64_t t = 0; t < l.window_length; ++t) {
    size_t block = 0;  // byte offset of the site's [T, channels] block
    for (const v1::CoefficientSite& s : h.sites()) {
      const size_t row_bytes = static_cast<size_t>(s.channels()) * e;
      const std::string_view row = raw.substr(block + t * row_bytes, row_bytes);
      if (widen) {
        for (size_t i = 0; i < row.size(); i += 2) {
          const char bytes[4] = {0, 0, row[i], row[i + 1]};  // little-endian
          out.append(bytes, 4);
        }
      } else {
        out.append(row.data(), row.size());
      }
      block += row_bytes * l.window_length;
    }
  }
}

std::string Npy(const v1::CoefficientsHeader& h, const Layout& l, std::string_view raw) {
  std::string out = NpyHeader(l, absl::StrFormat("%d, %d", l.window_length, l.total_channels));
  AppendTokenMajor(h, l, raw, l.dtype == ComputeDType::kBFloat16, out);
  return out;
}

const char* SafetensorsDType(const Layout& l) {
  return l.dtype == ComputeDType::kFloat32   ? "F32"
         : l.dtype == ComputeDType::kFloat16 ? "F16"
                                             : "BF16";
}

json::Value IntArray(const std::vector<int64_t>& values) {
  json::Value a = json::Value::MakeArray();
  for (int64_t v : values) a.mutable_array().push_back(json::Value::Int(v));
  return a;
}

json::Value TensorEntry(const Layout& l, const std::vector<int64_t>& shape, int64_t begin,
                        int64_t end) {
  json::Value t = json::Value::MakeObject();
  t.Set("dtype", json::Value::String(SafetensorsDType(l)));
  t.Set("shape", IntArray(shape));
  t.Set("data_offsets", IntArray({begin, end}));
  return t;
}

// The file: a uint64 LE header length, the JSON header padded with spaces to
// 8 bytes, then the data.
std::string SafetensorsFile(const json::Value& header, std::string_view data) {
  std::string text = json::Write(header);
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((uint64_t{text.size()} >> (8 * i)) & 0xff);
  out += text;
  out.append(data.data(), data.size());
  return out;
}

// safetensors: one tensor per site, the stream as it is.
std::string Safetensors(const v1::CoefficientsHeader& h, const Layout& l, std::string_view raw) {
  json::Value header = json::Value::MakeObject();
  json::Value meta = json::Value::MakeObject();
  meta.Set("model", json::Value::String(h.model()));
  meta.Set("weights_sha256", json::Value::String(h.weights_sha256()));
  meta.Set("window_hash", json::Value::String(h.window_hash()));
  meta.Set("dtype", json::Value::String(h.dtype()));
  header.Set("__metadata__", std::move(meta));
  int64_t offset = 0;
  for (const v1::CoefficientSite& s : h.sites()) {
    const int64_t bytes = l.window_length * s.channels() * static_cast<int64_t>(l.element_bytes);
    header.Set(s.name(), TensorEntry(l, {l.window_length, s.channels()}, offset, offset + bytes));
    offset += bytes;
  }
  return SafetensorsFile(header, raw);
}

// What a stack's windows must share: the first window's model, dtype, T and
// sites (names and channels, in order).
absl::Status SameShape(const v1::CoefficientsHeader& a, const v1::CoefficientsHeader& b) {
  bool same = a.model() == b.model() && a.dtype() == b.dtype() &&
              a.window_length() == b.window_length() && a.sites_size() == b.sites_size();
  for (int i = 0; same && i < a.sites_size(); ++i) {
    same = a.sites(i).name() == b.sites(i).name() && a.sites(i).channels() == b.sites(i).channels();
  }
  if (same) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "window %s differs from window %s in model, dtype, T or sites; they cannot be stacked",
      b.window_hash(), a.window_hash()));
}

json::Value StackMetadata(const std::vector<CoefficientsWindow>& windows) {
  const v1::CoefficientsHeader& h = windows.front().header;
  json::Value hashes = json::Value::MakeArray();
  for (const CoefficientsWindow& w : windows) {
    hashes.mutable_array().push_back(json::Value::String(w.header.window_hash()));
  }
  json::Value sites = json::Value::MakeArray();
  for (const v1::CoefficientSite& s : h.sites()) {
    json::Value site = json::Value::MakeArray();
    site.mutable_array().push_back(json::Value::String(s.name()));
    site.mutable_array().push_back(json::Value::Int(s.channels()));
    sites.mutable_array().push_back(std::move(site));
  }
  json::Value meta = json::Value::MakeObject();
  meta.Set("model", json::Value::String(h.model()));
  meta.Set("weights_sha256", json::Value::String(h.weights_sha256()));
  meta.Set("dtype", json::Value::String(h.dtype()));
  meta.Set("layout", json::Value::String("[N windows, T tokens, C channels]"));
  meta.Set("window_hashes", json::Value::String(json::Write(hashes)));
  meta.Set("sites", json::Value::String(json::Write(sites)));
  return meta;
}

}  // namespace

absl::StatusOr<CoefficientsFormat> ChooseCoefficientsFormat(std::string_view format,
                                                            std::string_view path) {
  if (format == "npy") return CoefficientsFormat::kNpy;
  if (format == "safetensors") return CoefficientsFormat::kSafetensors;
  if (format == "raw") return CoefficientsFormat::kRaw;
  if (!format.empty()) {
    return UsageError(absl::StrFormat("export: --format must be npy, safetensors or raw, not '%s'",
                                      std::string(format)));
  }
  auto ends_with = [&](std::string_view suffix) {
    return path.size() >= suffix.size() && path.substr(path.size() - suffix.size()) == suffix;
  };
  if (ends_with(".npy")) return CoefficientsFormat::kNpy;
  if (ends_with(".safetensors")) return CoefficientsFormat::kSafetensors;
  return CoefficientsFormat::kRaw;
}

absl::StatusOr<std::string> EncodeCoefficients(const v1::CoefficientsHeader& header,
                                               std::string_view raw, CoefficientsFormat format) {
  if (format == CoefficientsFormat::kRaw) return std::string(raw);
  absl::StatusOr<Layout> layout = CheckLayout(header, raw);
  if (!layout.ok()) return layout.status();
  return format == CoefficientsFormat::kNpy ? Npy(header, *layout, raw)
                                            : Safetensors(header, *layout, raw);
}

absl::StatusOr<std::string> EncodeStackedCoefficients(
    const std::vector<CoefficientsWindow>& windows, CoefficientsFormat format) {
  if (format == CoefficientsFormat::kRaw) {
    return UsageError("export --job: the stacked file is npy or safetensors, not raw");
  }
  if (windows.empty()) return absl::InvalidArgumentError("no windows to stack");
  Layout layout;
  for (const CoefficientsWindow& w : windows) {
    FCA_RETURN_IF_ERROR(SameShape(windows.front().header, w.header));
    absl::StatusOr<Layout> l = CheckLayout(w.header, w.raw);
    if (!l.ok()) return l.status();
    layout = *l;
  }
  const int64_t n = static_cast<int64_t>(windows.size());
  const bool npy = format == CoefficientsFormat::kNpy;
  std::string data;
  for (const CoefficientsWindow& w : windows) {
    AppendTokenMajor(w.header, layout, w.raw, npy && layout.dtype == ComputeDType::kBFloat16, data);
  }
  if (npy) {
    return NpyHeader(layout, absl::StrFormat("%d, %d, %d", n, layout.window_length,
                                             layout.total_channels)) +
           data;
  }
  json::Value header = json::Value::MakeObject();
  header.Set("__metadata__", StackMetadata(windows));
  header.Set("coefficients", TensorEntry(layout, {n, layout.window_length, layout.total_channels},
                                         0, static_cast<int64_t>(data.size())));
  return SafetensorsFile(header, data);
}

}  // namespace fca::client
