#include "server/engine/models/model_loader.h"

#include <ATen/core/Tensor.h>  // FolderModel passes Forward's result on

#include <filesystem>
#include <future>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file.h"
#include "common/status_macros.h"
#include "server/engine/io/weights_hash_cache.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/model_config.h"
#include "server/engine/models/model_families.h"
#include "server/engine/models/torchscript_config.h"
#include "server/engine/text/bpe_tokenizer.h"

namespace fca::engine {
namespace {

constexpr uint64_t kMaxConfigBytes = 1 << 20;

// Its messages reach clients, so they name no server path.
absl::StatusOr<std::string> ReadConfigText(const std::string& dir) {
  absl::StatusOr<std::string> text = ReadFile(dir + "/config.json", "config.json", kMaxConfigBytes);
  if (text.ok()) return text;
  switch (text.status().code()) {
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kPermissionDenied:
      return absl::NotFoundError("model folder has no readable config.json");
    case absl::StatusCode::kInvalidArgument:
      return absl::InvalidArgumentError(absl::StrFormat(
          "config.json is not a regular file of at most %d bytes", kMaxConfigBytes));
    default:
      return absl::InternalError("cannot read config.json");
  }
}

// A model as loaded from its folder: the family's model, with the identity
// of its weights (hashed beside the load) and, when the folder has a
// tokenizer.json, that tokenizer; everything else is the family model's.
class FolderModel : public ControlledModel {
 public:
  FolderModel(std::unique_ptr<ControlledModel> model, std::string weights_sha256,
              std::unique_ptr<Tokenizer> tokenizer)
      : model_(std::move(model)), info_(model_->info()), tokenizer_(std::move(tokenizer)) {
    info_.weights_sha256 = std::move(weights_sha256);
  }

  const ModelInfo& info() const override { return info_; }
  const std::vector<CoefficientSite>& sites() const override { return model_->sites(); }
  const Tokenizer& tokenizer() const override {
    return tokenizer_ != nullptr ? *tokenizer_ : model_->tokenizer();
  }
  absl::StatusOr<at::Tensor> Forward(const at::Tensor& ids, CoefficientMode mode,
                                     std::vector<at::Tensor>* coefficients) override {
    return model_->Forward(ids, mode, coefficients);
  }
  absl::StatusOr<std::vector<at::Tensor>> NeutralCoefficients() const override {
    return model_->NeutralCoefficients();
  }
  std::vector<int64_t> RoutedExperts() const override { return model_->RoutedExperts(); }
  absl::StatusOr<std::vector<at::Tensor>> ChosenExperts(
      const std::vector<at::Tensor>& coefficients) const override {
    return model_->ChosenExperts(coefficients);
  }
  ExecutionCounters counters() const override { return model_->counters(); }
  void ResetCounters() override { model_->ResetCounters(); }

 private:
  std::unique_ptr<ControlledModel> model_;
  ModelInfo info_;
  std::unique_ptr<Tokenizer> tokenizer_;  // null: the family's own
};

}  // namespace

// Families without routers.
std::vector<int64_t> ControlledModel::RoutedExperts() const { return {}; }
absl::StatusOr<std::vector<at::Tensor>> ControlledModel::ChosenExperts(
    const std::vector<at::Tensor>& coefficients) const {
  return std::vector<at::Tensor>();
}

namespace {

bool HasTokenizerJson(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::exists(dir + "/tokenizer.json", ec);
}

// The BPE tokenizer of `dir`/tokenizer.json when that file exists, checked
// against the model; null when the folder has none (the family's own then).
// The tokenizer may cover fewer ids than the embedding has rows (Pythia pads
// its embedding), never more.
absl::StatusOr<std::unique_ptr<Tokenizer>> FolderTokenizer(const std::string& dir,
                                                           const ModelInfo& info) {
  if (!HasTokenizerJson(dir)) return std::unique_ptr<Tokenizer>();
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, LoadFolderTokenizer(dir));
  FCA_RETURN_IF_ERROR(CheckTokenizerFits(*tokenizer, info));
  return tokenizer;
}

// A torchscript folder keeps code and tensors together in model.pt (a zip
// whose records are not read here): its size, at the saved dtype's element
// size, stands in for the parameter count the safetensors headers give the
// other families (an upper bound: the code and the zip's framing count too).
absl::Status DescribeModuleFile(const std::string& dir, const std::string& config_text,
                                int64_t compute_element_bytes, ModelDescription* d) {
  FCA_ASSIGN_OR_RETURN(const TorchScriptConfig config, ParseTorchScriptConfig(config_text));
  const int64_t saved_element_bytes = ComputeDTypeDefOf(config.dtype).element_bytes;
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(dir + "/model.pt", ec);
  if (ec) return absl::NotFoundError("model folder has no readable model.pt");
  d->weight_file_bytes = static_cast<int64_t>(size);
  d->info.num_parameters = d->weight_file_bytes / saved_element_bytes;
  d->estimated_memory_bytes = d->info.num_parameters * compute_element_bytes;
  return absl::OkStatus();
}

// The loaded model with the identity of its weights and the folder's
// tokenizer.json, when it has one.
absl::StatusOr<std::unique_ptr<ControlledModel>> WithFolderIdentity(
    const std::string& dir, std::unique_ptr<ControlledModel> model, std::string weights_sha256) {
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, FolderTokenizer(dir, model->info()));
  return std::unique_ptr<ControlledModel>(std::make_unique<FolderModel>(
      std::move(model), std::move(weights_sha256), std::move(tokenizer)));
}

// model.pt hashed beside the load, as LoadSafetensorsFolder hashes safetensors.
absl::StatusOr<std::unique_ptr<ControlledModel>> LoadModuleFolder(
    const std::string& dir, const ModelFamily& family, std::string_view config_json, ModelInfo info,
    WeightsHashCache* weights_hash_cache) {
  FolderWeights weights;
  weights.module_path = dir + "/model.pt";
  const std::vector<std::string> files = {weights.module_path};
  std::future<absl::StatusOr<std::string>> weights_sha256 =
      std::async(std::launch::async | std::launch::deferred, [&files, weights_hash_cache] {
        return weights_hash_cache != nullptr ? weights_hash_cache->Sha256Of(files)
                                             : Sha256OfFiles(files);
      });
  absl::StatusOr<std::unique_ptr<ControlledModel>> model =
      family.create(config_json, weights, std::move(info));
  absl::StatusOr<std::string> sha256 = weights_sha256.get();
  // The model's error first: it says what is wrong with the folder without
  // naming a server path.
  FCA_RETURN_IF_ERROR(model.status());
  FCA_RETURN_IF_ERROR(sha256.status());
  return WithFolderIdentity(dir, *std::move(model), *std::move(sha256));
}

absl::StatusOr<std::unique_ptr<ControlledModel>> LoadSafetensorsFolder(
    const std::string& dir, const ModelFamily& family, std::string_view config_json, ModelInfo info,
    WeightsHashCache* weights_hash_cache) {
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<TensorSource> tensors, TensorSource::OpenDir(dir));
  // Hashing is bound by the CPU (~1 GB/s), copying the weights mostly by the
  // memory they are copied into: side by side, a first load takes the longer
  // of the two rather than their sum. (libstdc++ runs the hash here, on the
  // calling thread, when it cannot start one.)
  std::future<absl::StatusOr<std::string>> weights_sha256 = std::async(
      std::launch::async | std::launch::deferred,
      [&tensors, weights_hash_cache] { return tensors->ContentSha256(weights_hash_cache); });
  FolderWeights weights;
  weights.tensors = tensors.get();
  absl::StatusOr<std::unique_ptr<ControlledModel>> model =
      family.create(config_json, weights, std::move(info));
  absl::StatusOr<std::string> sha256 = weights_sha256.get();
  FCA_RETURN_IF_ERROR(sha256.status());
  FCA_RETURN_IF_ERROR(model.status());
  return WithFolderIdentity(dir, *std::move(model), *std::move(sha256));
}

}  // namespace

absl::Status CheckTokenizerFits(const Tokenizer& tokenizer, const ModelInfo& info) {
  if (tokenizer.vocab_size() <= info.vocab_size) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s has %d token ids but the model's vocabulary has only %d",
      tokenizer.name() == "byte" ? "the byte tokenizer (the folder has no tokenizer.json)"
                                 : "tokenizer.json",
      tokenizer.vocab_size(), info.vocab_size));
}

absl::StatusOr<ModelDescription> DescribeModel(const std::string& dir, const std::string& name,
                                               const ComputeOptions& compute) {
  ModelDescription d;
  FCA_ASSIGN_OR_RETURN(d.config_json, ReadConfigText(dir));
  FCA_ASSIGN_OR_RETURN(const std::string model_type, ReadModelFamily(d.config_json));
  FCA_ASSIGN_OR_RETURN(const ModelFamily* family, FindModelFamily(model_type));
  d.info.name = name;
  d.info.compute = compute;
  FCA_ASSIGN_OR_RETURN(d.sites, family->describe(d.config_json, &d.info));
  // What a loaded weight costs.
  const int64_t element_bytes = ComputeDTypeDefOf(compute.dtype).element_bytes;
  if (family->capabilities.weights == WeightsFormat::kTorchScript) {
    FCA_RETURN_IF_ERROR(DescribeModuleFile(dir, d.config_json, element_bytes, &d));
    return d;
  }
  // Opening maps the files and parses their headers; the tensors' bytes are
  // only read when touched, and nothing here touches them.
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<TensorSource> weights, TensorSource::OpenDir(dir));
  for (const std::string& tensor : weights->Names()) {
    FCA_ASSIGN_OR_RETURN(TensorView view, weights->Get(tensor));
    d.info.num_parameters += view.numel();
  }
  for (const std::string& file : weights->files()) {
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(file, ec);
    if (!ec) d.weight_file_bytes += static_cast<int64_t>(size);
  }
  d.estimated_memory_bytes = d.info.num_parameters * element_bytes;
  return d;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadFolderTokenizer(const std::string& dir) {
  if (!HasTokenizerJson(dir)) return std::unique_ptr<Tokenizer>(std::make_unique<ByteTokenizer>());
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> bpe =
      BpeTokenizer::FromFile(dir + "/tokenizer.json");
  if (!bpe.ok()) {
    return absl::Status(bpe.status().code(),
                        absl::StrCat("tokenizer.json: ", bpe.status().message()));
  }
  return std::unique_ptr<Tokenizer>(*std::move(bpe));
}

absl::StatusOr<std::unique_ptr<ControlledModel>> LoadModel(const std::string& dir,
                                                           const std::string& name,
                                                           const ComputeOptions& compute,
                                                           WeightsHashCache* weights_hash_cache) {
  FCA_ASSIGN_OR_RETURN(const std::string text, ReadConfigText(dir));
  FCA_ASSIGN_OR_RETURN(const std::string model_type, ReadModelFamily(text));
  FCA_ASSIGN_OR_RETURN(const ModelFamily* family, FindModelFamily(model_type));
  ModelInfo info;
  info.name = name;
  info.compute = compute;
  // The config is refused before any weight file is opened.
  ModelInfo described = info;
  FCA_RETURN_IF_ERROR(family->describe(text, &described).status());
  if (family->capabilities.weights == WeightsFormat::kTorchScript) {
    return LoadModuleFolder(dir, *family, text, std::move(info), weights_hash_cache);
  }
  return LoadSafetensorsFolder(dir, *family, text, std::move(info), weights_hash_cache);
}

}  // namespace fca::engine
