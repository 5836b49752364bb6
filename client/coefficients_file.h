// The files `fca export` writes: a coefficient tensor (ExportCoefficients'
// header and bytes) as NumPy .npy, safetensors or the raw stream.
//
// The stream is site-major: for each site in the header's order a row-major
// [T, channels] block, little-endian, of the header's dtype.
//   - npy (NPY format 1.0): one array [T, C], C = the channels of every
//     site, the sites' columns side by side in the header's order (site s
//     holds columns [sum of the channels before it, + its channels)).
//     float32 is '<f4', float16 '<f2'; bfloat16, which NumPy lacks, is
//     widened to '<f4' (exact: bfloat16 is float32's upper half).
//   - safetensors: one tensor per site, named by the site ("attn_gate.3"),
//     [T, channels], dtype F32 / F16 / BF16 as stored; __metadata__ names the
//     model, its weights SHA-256, the window hash and the dtype.
//   - raw: the stream's bytes as they came.
// Several windows of one model (`fca export --job`) stack into [N, T, C],
// window n being the one-window npy's [T, C]:
//   - npy: one array [N, T, C] (bfloat16 widened to '<f4' as above).
//   - safetensors: one tensor "coefficients" [N, T, C], dtype as stored;
//     __metadata__ names the model, its weights SHA-256, the dtype, the
//     layout, window_hashes (a JSON array, in the stack's order) and sites
//     (a JSON array of [name, channels], the columns' order).
#ifndef FCA_CLIENT_COEFFICIENTS_FILE_H_
#define FCA_CLIENT_COEFFICIENTS_FILE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/fca/v1/audit_service.pb.h"

namespace fca::client {

enum class CoefficientsFormat { kRaw, kNpy, kSafetensors };

// `format` when given ("npy", "safetensors", "raw"), else from the path's
// extension (.npy, .safetensors; anything else raw). A usage error for
// another format name.
absl::StatusOr<CoefficientsFormat> ChooseCoefficientsFormat(std::string_view format,
                                                            std::string_view path);

// The file's bytes. INVALID_ARGUMENT when `raw` does not hold the header's
// sites (T x channels x element size each) or the dtype is not one fca
// computes in.
absl::StatusOr<std::string> EncodeCoefficients(const fca::v1::CoefficientsHeader& header,
                                               std::string_view raw, CoefficientsFormat format);

// One window's export: its header and its stream's bytes.
struct CoefficientsWindow {
  fca::v1::CoefficientsHeader header;
  std::string raw;
};

// The stacked file (npy or safetensors) of `windows`, in their order.
// INVALID_ARGUMENT when there are none, when a window's bytes do not hold its
// header's sites, or when the windows differ in model, dtype, T or sites;
// a usage error for the raw format.
absl::StatusOr<std::string> EncodeStackedCoefficients(
    const std::vector<CoefficientsWindow>& windows, CoefficientsFormat format);

}  // namespace fca::client

#endif  // FCA_CLIENT_COEFFICIENTS_FILE_H_
