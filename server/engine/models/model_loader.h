// LoadModel (model_loader.cc): a model folder -> ControlledModel, through
// its model_type's row of the family registry (model_families.h), with the
// weights' SHA-256 and the folder's tokenizer.json when it has one; and what
// a folder holds, known without loading its weights. Torch-free header.
#ifndef FCA_SERVER_ENGINE_MODELS_MODEL_LOADER_H_
#define FCA_SERVER_ENGINE_MODELS_MODEL_LOADER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/text/tokenizer.h"

namespace fca::engine {

class WeightsHashCache;  // server/engine/io/weights_hash_cache.h

// Loads a model folder (config.json + model.safetensors or a sharded index).
// `name` is what info().name will say. info().weights_sha256 is read from
// `weights_hash_cache` (optional, not owned) when the weight files have not
// changed since it hashed them, else computed from every byte (and taught
// to the cache). NOT_FOUND when files are missing, INVALID_ARGUMENT for
// malformed or mismatching config/weights.
[[nodiscard]] absl::StatusOr<std::unique_ptr<ControlledModel>> LoadModel(
    const std::string& dir, const std::string& name, const ComputeOptions& compute,
    WeightsHashCache* weights_hash_cache = nullptr);

// What a model folder holds, known without reading its weights: what
// ListModels shows and what the model repository budgets memory by.
struct ModelDescription {
  // name, family, vocab_size, max_seq_len, num_layers and compute as the
  // loaded model's info() will say; num_parameters counts the elements of
  // every tensor in the checkpoint headers (what a valid checkpoint loads);
  // weights_sha256 is empty (hashing reads every byte of the weights).
  ModelInfo info;
  std::vector<CoefficientSite> sites;  // as the loaded model's sites()
  std::string config_json;             // the folder's config.json, verbatim
  int64_t weight_file_bytes = 0;       // sizes of the weight files together
  // Bytes the loaded weights take on the compute device: num_parameters
  // times the size of one element of the compute dtype. An estimate: the
  // activations of a forward come on top.
  int64_t estimated_memory_bytes = 0;
};

// Describes the folder `dir` from config.json and the safetensors headers
// (the data areas are not read). The family, sites and sizes come from the
// same code that builds a loaded model, so they agree with LoadModel's.
// NOT_FOUND when files are missing, INVALID_ARGUMENT for a malformed
// config.json or header, an unsupported family or compute dtype. A folder
// that describes may still fail to load (say, a tensor of the wrong shape).
[[nodiscard]] absl::StatusOr<ModelDescription> DescribeModel(const std::string& dir,
                                                             const std::string& name,
                                                             const ComputeOptions& compute);

// OK when a tokenizer of a folder may drive a model of `info`: it may cover
// fewer ids than the embedding has rows (Pythia pads its embedding), never
// more (INVALID_ARGUMENT).
[[nodiscard]] absl::Status CheckTokenizerFits(const Tokenizer& tokenizer, const ModelInfo& info);

// The tokenizer LoadModel gives a model of `dir`: the GPT-NeoX BPE of
// `dir`/tokenizer.json when that file exists, else one id per byte. Loads no
// weights (cheap next to LoadModel). INVALID_ARGUMENT for a malformed
// tokenizer.json.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Tokenizer>> LoadFolderTokenizer(
    const std::string& dir);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_MODEL_LOADER_H_
