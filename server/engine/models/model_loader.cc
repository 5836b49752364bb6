// LoadModel: a model folder -> ControlledModel, dispatching on model_type, with
// the folder's tokenizer.json when it has one.
#include <ATen/core/Tensor.h>  // ModelWithTokenizer passes Forward's result on

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/engine/text/bpe_tokenizer.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/muddpythia_model.h"
#include "server/engine/models/transformer_model.h"

namespace fca::engine {
namespace {

constexpr uintmax_t kMaxConfigBytes = 1 << 20;

absl::StatusOr<std::string> ReadConfigText(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError("model folder has no readable config.json");
  if (size > kMaxConfigBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("config.json is %d bytes; the limit is %d", size, kMaxConfigBytes));
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof()) return absl::InternalError("cannot read config.json");
  return ss.str();
}

// A model whose tokenizer comes from its folder rather than its family;
// everything else is the wrapped model's.
class ModelWithTokenizer : public ControlledModel {
 public:
  ModelWithTokenizer(std::unique_ptr<ControlledModel> model, std::unique_ptr<Tokenizer> tokenizer)
      : model_(std::move(model)), tokenizer_(std::move(tokenizer)) {}

  const ModelInfo& info() const override { return model_->info(); }
  const std::vector<CoefficientSite>& sites() const override { return model_->sites(); }
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  absl::StatusOr<at::Tensor> Forward(const at::Tensor& ids, CoefficientMode mode,
                                     std::vector<at::Tensor>* coefficients) override {
    return model_->Forward(ids, mode, coefficients);
  }
  absl::StatusOr<std::vector<at::Tensor>> NeutralCoefficients() const override {
    return model_->NeutralCoefficients();
  }
  ExecutionCounters counters() const override { return model_->counters(); }
  void ResetCounters() override { model_->ResetCounters(); }

 private:
  std::unique_ptr<ControlledModel> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

bool HasTokenizerJson(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::exists(dir + "/tokenizer.json", ec);
}

// Gives `model` the BPE tokenizer of `dir`/tokenizer.json when that file
// exists. The tokenizer may cover fewer ids than the embedding has rows
// (Pythia pads its embedding), never more.
absl::StatusOr<std::unique_ptr<ControlledModel>> AttachTokenizer(
    const std::string& dir, std::unique_ptr<ControlledModel> model) {
  if (!HasTokenizerJson(dir)) return model;
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, LoadFolderTokenizer(dir));
  FCA_RETURN_IF_ERROR(CheckTokenizerFits(*tokenizer, model->info()));
  return std::unique_ptr<ControlledModel>(
      std::make_unique<ModelWithTokenizer>(std::move(model), std::move(tokenizer)));
}

absl::Status UnsupportedFamily(const std::string& family) {
  return absl::InvalidArgumentError(
      absl::StrFormat("config.json: model_type '%s' is not supported (known: dense, "
                      "featuregate, muddpythia)",
                      family));
}

absl::StatusOr<std::unique_ptr<ControlledModel>> LoadFamily(const std::string& dir,
                                                            const std::string& family,
                                                            const std::string& config_text,
                                                            ModelInfo info) {
  if (family == "dense" || family == "featuregate") {
    FCA_ASSIGN_OR_RETURN(TransformerConfig config, ParseTransformerConfig(config_text));
    FCA_ASSIGN_OR_RETURN(std::unique_ptr<TensorSource> weights, TensorSource::OpenDir(dir));
    FCA_ASSIGN_OR_RETURN(info.weights_sha256, weights->ContentSha256());
    return CreateTransformerModel(config, *weights, std::move(info));
  }
  if (family == "muddpythia") {
    FCA_ASSIGN_OR_RETURN(MuddPythiaConfig config, ParseMuddPythiaConfig(config_text));
    FCA_ASSIGN_OR_RETURN(std::unique_ptr<TensorSource> weights, TensorSource::OpenDir(dir));
    FCA_ASSIGN_OR_RETURN(info.weights_sha256, weights->ContentSha256());
    return CreateMuddPythiaModel(config, *weights, std::move(info));
  }
  return UnsupportedFamily(family);
}

// The family-specific part of DescribeModel: the same parse and the same
// site schema as LoadFamily's model gets.
absl::StatusOr<std::vector<CoefficientSite>> DescribeFamily(const std::string& family,
                                                            const std::string& config_text,
                                                            ModelInfo* info) {
  if (family == "dense" || family == "featuregate") {
    FCA_ASSIGN_OR_RETURN(TransformerConfig config, ParseTransformerConfig(config_text));
    return DescribeTransformer(config, info);
  }
  if (family == "muddpythia") {
    FCA_ASSIGN_OR_RETURN(MuddPythiaConfig config, ParseMuddPythiaConfig(config_text));
    return DescribeMuddPythia(config, info);
  }
  return UnsupportedFamily(family);
}

// Bytes of one element in the compute dtype; what a loaded weight costs.
absl::StatusOr<int64_t> ComputeElementBytes(const std::string& dtype) {
  if (dtype == "float32") return 4;
  if (dtype == "bfloat16" || dtype == "float16") return 2;
  return absl::InvalidArgumentError(
      absl::StrFormat("compute dtype '%s' is not supported (float32, bfloat16, float16)", dtype));
}

}  // namespace

absl::Status CheckTokenizerFits(const Tokenizer& tokenizer, const ModelInfo& info) {
  if (tokenizer.vocab_size() <= info.vocab_size) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("tokenizer.json has %d token ids but the model's vocabulary has only %d",
                      tokenizer.vocab_size(), info.vocab_size));
}

absl::StatusOr<ModelDescription> DescribeModel(const std::string& dir, const std::string& name,
                                               const ComputeOptions& compute) {
  ModelDescription d;
  FCA_ASSIGN_OR_RETURN(d.config_json, ReadConfigText(dir));
  FCA_ASSIGN_OR_RETURN(std::string family, ReadModelFamily(d.config_json));
  d.info.name = name;
  d.info.compute = compute;
  FCA_ASSIGN_OR_RETURN(d.sites, DescribeFamily(family, d.config_json, &d.info));
  FCA_ASSIGN_OR_RETURN(const int64_t element_bytes, ComputeElementBytes(compute.dtype));
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
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> bpe = BpeTokenizer::FromFile(dir + "/tokenizer.json");
  if (!bpe.ok()) {
    return absl::Status(bpe.status().code(),
                        absl::StrCat("tokenizer.json: ", bpe.status().message()));
  }
  return std::unique_ptr<Tokenizer>(*std::move(bpe));
}

absl::StatusOr<std::unique_ptr<ControlledModel>> LoadModel(const std::string& dir,
                                                           const std::string& name,
                                                           const ComputeOptions& compute) {
  FCA_ASSIGN_OR_RETURN(std::string text, ReadConfigText(dir));
  FCA_ASSIGN_OR_RETURN(std::string family, ReadModelFamily(text));
  ModelInfo info;
  info.name = name;
  info.compute = compute;
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<ControlledModel> model,
                       LoadFamily(dir, family, text, std::move(info)));
  return AttachTokenizer(dir, std::move(model));
}

}  // namespace fca::engine
