// LoadModel: a model folder -> ControlledModel, dispatching on model_type.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/engine/controlled_model.h"
#include "server/engine/transformer_model.h"

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

}  // namespace

absl::StatusOr<std::unique_ptr<ControlledModel>> LoadModel(const std::string& dir,
                                                           const std::string& name,
                                                           const ComputeOptions& compute) {
  FCA_ASSIGN_OR_RETURN(std::string text, ReadConfigText(dir));
  FCA_ASSIGN_OR_RETURN(std::string family, ReadModelFamily(text));
  if (family != "dense" && family != "featuregate") {
    return absl::InvalidArgumentError(
        absl::StrFormat("config.json: model_type '%s' is not supported (known: dense, "
                        "featuregate)", family));
  }
  FCA_ASSIGN_OR_RETURN(TransformerConfig config, ParseTransformerConfig(text));
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<TensorSource> weights, TensorSource::OpenDir(dir));
  ModelInfo info;
  info.name = name;
  info.compute = compute;
  FCA_ASSIGN_OR_RETURN(info.weights_sha256, weights->ContentSha256());
  return CreateTransformerModel(config, *weights, std::move(info));
}

}  // namespace fca::engine
