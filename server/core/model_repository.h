// The server's model repository: one folder per model under a root.
//
// Model names come from clients, so they are checked before they touch the
// filesystem: a name is a single path component of [A-Za-z0-9._-], not "."
// or "..", and the resolved folder must lie directly under the root.
// Thread-safe; models are loaded on first use and kept. A folder that fails
// to load is not loaded again (its error is returned) until one of its files
// changes, so a broken multi-GB folder does not cost a reload per request.
#ifndef FCA_SERVER_CORE_MODEL_REPOSITORY_H_
#define FCA_SERVER_CORE_MODEL_REPOSITORY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/models/controlled_model.h"

namespace fca::core {

class ModelRepository {
 public:
  struct Options {
    std::string root;                  // folder holding one folder per model
    engine::ComputeOptions compute;    // device and dtype for every model
  };
  // FAILED_PRECONDITION when the root is not a readable folder.
  static absl::StatusOr<std::unique_ptr<ModelRepository>> Open(const Options& options);

  // Names of the folders that hold a config.json, sorted.
  std::vector<std::string> Names() const;

  // Loads (once) and returns the model. INVALID_ARGUMENT for a malformed
  // name, NOT_FOUND for an unknown one, or the loader's error. The pointer
  // stays valid for the repository's lifetime; callers serialize Forward
  // calls themselves (the scheduler runs one job per device).
  absl::StatusOr<engine::ControlledModel*> Get(const std::string& name);

  // The tokenizer of a model: the loaded model's, or else (without loading
  // the weights) the folder's, kept. Errors as for Get, or the tokenizer's.
  absl::StatusOr<const engine::Tokenizer*> GetTokenizer(const std::string& name);
  const Options& options() const { return options_; }
  // Loads attempted so far, successful or not (tests, monitoring).
  int64_t loads_attempted() const;

 private:
  explicit ModelRepository(Options options) : options_(std::move(options)) {}
  // The folder of a valid, present model name; NOT_FOUND otherwise.
  absl::StatusOr<std::string> ModelDir(const std::string& name) const;
  Options options_;
  // A failed load and the folder's state when it failed.
  struct Failure {
    absl::Status status;
    std::string signature;
  };
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<engine::ControlledModel>> loaded_;  // guarded by mu_
  std::map<std::string, Failure> failed_;                                   // guarded by mu_
  std::map<std::string, std::unique_ptr<engine::Tokenizer>> tokenizers_;    // guarded by mu_
  int64_t loads_attempted_ = 0;                                             // guarded by mu_
};

// OK when `name` may name a model or dataset: 1-128 chars of [A-Za-z0-9._-],
// not starting with '.', so never "." or "..".
absl::Status ValidateName(const std::string& name, const char* what);

}  // namespace fca::core

#endif  // FCA_SERVER_CORE_MODEL_REPOSITORY_H_
