// fca_prepacked_gemm_bench: how much the engine's GEMMs would gain from
// weights packed once at load, measured, and whether that keeps their bits.
//
// The engine multiplies by a weight through at::linear, which on the CPU
// hands the weight to OpenBLAS (float32) or oneDNN (bfloat16) in its plain
// layout every call, and each call packs it again into the kernel's blocked
// layout. This bench times, at the shapes of the bundled models and of
// OLMoE-1B-7B, that call against oneDNN's matmul with the weight reordered
// once into the layout oneDNN chooses (format_tag::any) and the primitive
// made once; and it compares the two results bit for bit at those shapes
// and, for each weight, over a range of row counts (an expert's rows vary
// from call to call). Prints a table; --json writes the figures.
// bench/prepacked_gemm.sh runs it (docs/moe.md, "Full size").
//
// Built only where oneDNN's headers are (libdnnl-dev, bench/CMakeLists.txt):
// the engine does not use it.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/gemm_bench.h"
#include "dnnl.hpp"
#include "server/engine/models/torch_util.h"

ABSL_FLAG(int, threads, 1, "torch and oneDNN threads");
ABSL_FLAG(double, seconds, 0.3, "time per measurement (the best of 5 runs of this long)");
ABSL_FLAG(std::string, json, "", "also write the figures here");

namespace {

using Shape = fca::bench::GemmShape;
using fca::bench::kGemmShapes;
using fca::bench::SecondsPerCall;

// Row counts at which each weight's bits are compared.
const int64_t kRowCounts[] = {1, 7, 16, 33, 64, 100, 128, 200, 256, 512, 1024};

// A weight reordered once, and a matmul primitive per row count.
class Prepacked {
 public:
  Prepacked(dnnl::engine& engine, dnnl::stream& stream, const at::Tensor& w,
            dnnl::memory::data_type type)
      : engine_(engine), stream_(stream), type_(type), in_(w.size(1)), out_(w.size(0)) {
    const dnnl::matmul::primitive_desc pd = Desc(64, Any());
    // w [out, in] row-major is [in, out] with the "ba" layout.
    dnnl::memory plain({{in_, out_}, type_, dnnl::memory::format_tag::ba}, engine_, w.data_ptr());
    packed_ = dnnl::memory(pd.weights_desc(), engine_);
    dnnl::reorder(plain, packed_).execute(stream_, plain, packed_);
    stream_.wait();
  }

  // Whether the packed layout is blocked, and the implementation oneDNN
  // chose for `rows`: "blocked brg:avx512_core_amx_bf16".
  std::string Describe(int64_t rows) const {
    dnnl::memory::desc packed = packed_.get_desc();
    const std::string layout = packed.data.format_kind == dnnl_blocked ? "blocked" : "other";
    return absl::StrFormat("%s %s", layout, Desc(rows, packed).impl_info_str());
  }

  dnnl::matmul Primitive(int64_t rows) const {
    return dnnl::matmul(Desc(rows, packed_.get_desc()));
  }

  // y [rows, out] = x [rows, in] times the packed weight.
  void Run(const dnnl::matmul& primitive, const at::Tensor& x, at::Tensor& y) const {
    const int64_t rows = x.size(0);
    dnnl::memory src({{rows, in_}, type_, dnnl::memory::format_tag::ab}, engine_, x.data_ptr());
    dnnl::memory dst({{rows, out_}, type_, dnnl::memory::format_tag::ab}, engine_, y.data_ptr());
    primitive.execute(stream_,
                      {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, packed_}, {DNNL_ARG_DST, dst}});
    stream_.wait();
  }

 private:
  dnnl::memory::desc Any() const {
    return dnnl::memory::desc({in_, out_}, type_, dnnl::memory::format_tag::any);
  }
  dnnl::matmul::primitive_desc Desc(int64_t rows, const dnnl::memory::desc& weights) const {
    const dnnl::matmul::desc d({{rows, in_}, type_, dnnl::memory::format_tag::ab}, weights,
                               {{rows, out_}, type_, dnnl::memory::format_tag::ab});
    return dnnl::matmul::primitive_desc(d, engine_);
  }

  dnnl::engine& engine_;
  dnnl::stream& stream_;
  dnnl::memory::data_type type_;
  int64_t in_, out_;
  dnnl::memory packed_;
};

struct Row {
  std::string dtype, name, kernel;
  int64_t rows, in, out;
  double linear_gflops, prepacked_gflops;
  bool same_bits;
  std::vector<int64_t> differing_rows;  // row counts whose bits differ
};

Row Measure(dnnl::engine& engine, dnnl::stream& stream, const Shape& s, at::ScalarType dtype) {
  const auto type =
      dtype == at::kBFloat16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
  at::manual_seed(0);
  const at::Tensor w = (at::randn({s.out, s.in}) * 0.05).to(dtype);
  const Prepacked packed(engine, stream, w, type);
  Row row{dtype == at::kBFloat16 ? "bfloat16" : "float32",
          s.name,
          packed.Describe(s.rows),
          s.rows,
          s.in,
          s.out,
          0,
          0,
          false,
          {}};
  for (const int64_t rows : kRowCounts) {
    const at::Tensor x = at::randn({rows, s.in}).to(dtype);
    at::Tensor y = at::empty({rows, s.out}, x.options());
    packed.Run(packed.Primitive(rows), x, y);
    if (!at::equal(at::linear(x, w), y)) row.differing_rows.push_back(rows);
  }
  const at::Tensor x = at::randn({s.rows, s.in}).to(dtype);
  at::Tensor y = at::empty({s.rows, s.out}, x.options());
  const dnnl::matmul primitive = packed.Primitive(s.rows);
  packed.Run(primitive, x, y);
  row.same_bits = at::equal(at::linear(x, w), y);
  const double flops = 2.0 * static_cast<double>(s.rows * s.in * s.out);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  row.linear_gflops = flops / SecondsPerCall([&] { (void)at::linear(x, w); }, seconds) / 1e9;
  row.prepacked_gflops =
      flops / SecondsPerCall([&] { packed.Run(primitive, x, y); }, seconds) / 1e9;
  return row;
}

std::string Json(const std::vector<Row>& rows, int threads) {
  std::vector<std::string> items;
  for (const Row& r : rows) {
    items.push_back(absl::StrFormat(
        R"({"dtype": "%s", "shape": "%s", "rows": %d, "in": %d, "out": %d, "kernel": "%s", )"
        R"("linear_gflops": %.2f, "prepacked_gflops": %.2f, "same_bits": %s, )"
        R"("differing_rows": [%s]})",
        r.dtype, r.name, r.rows, r.in, r.out, r.kernel, r.linear_gflops, r.prepacked_gflops,
        r.same_bits ? "true" : "false", absl::StrJoin(r.differing_rows, ", ")));
  }
  return absl::StrFormat(R"({"threads": %d, "dnnl": "%d.%d.%d", "rows_compared": [%s], )"
                         R"("shapes": [%s]})"
                         "\n",
                         threads, dnnl::version()->major, dnnl::version()->minor,
                         dnnl::version()->patch, absl::StrJoin(kRowCounts, ", "),
                         absl::StrJoin(items, ",\n  "));
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int threads = absl::GetFlag(FLAGS_threads);
  // The engine's runtime: its OpenBLAS kernels (torch_util.h) and threads;
  // oneDNN's OpenMP follows torch's setting.
  fca::engine::ConfigureRuntime({threads, fca::engine::Parallelism::kWithinOps});
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  std::vector<Row> rows;
  std::printf(
      "%d thread(s); torch %s (OpenBLAS kernels %s) at::linear against oneDNN %d.%d.%d with the "
      "weight packed once\n",
      threads, fca::engine::TorchVersion().c_str(), fca::engine::BlasKernels().c_str(),
      dnnl::version()->major, dnnl::version()->minor, dnnl::version()->patch);
  std::printf("%-9s %-28s %18s %10s %10s %7s %5s  %s\n", "dtype", "shape", "rows x in -> out",
              "linear", "prepacked", "ratio", "bits", "rows whose bits differ");
  for (const at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    for (const Shape& s : kGemmShapes) {
      const Row r = Measure(engine, stream, s, dtype);
      std::printf("%-9s %-28s %18s %10.1f %10.1f %6.2fx %5s  %s\n", r.dtype.c_str(), r.name.c_str(),
                  absl::StrFormat("%d x %d -> %d", r.rows, r.in, r.out).c_str(), r.linear_gflops,
                  r.prepacked_gflops, r.prepacked_gflops / r.linear_gflops,
                  r.same_bits ? "same" : "DIFF",
                  r.differing_rows.empty() ? "none" : absl::StrJoin(r.differing_rows, " ").c_str());
      rows.push_back(r);
    }
  }
  std::printf("(GFLOP/s; rows compared: %s)\n", absl::StrJoin(kRowCounts, " ").c_str());
  const std::string path = absl::GetFlag(FLAGS_json);
  if (!path.empty()) std::ofstream(path) << Json(rows, threads);
  return 0;
}
