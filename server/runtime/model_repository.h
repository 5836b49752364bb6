// The server's model repository: one folder per model under a root, in the
// manner of TF Serving's manager. Three parts:
//   - the source: which folders exist (Names) and what each holds, read from
//     config.json, the safetensors headers and the tokenizer without reading
//     the weights (Describe, List);
//   - the loader: Options::loader, engine::LoadModel by default; a model's
//     memory is estimated from its headers before it is loaded;
//   - the manager: which models stay loaded (Get), within a memory budget,
//     with every load outside the repository's lock.
//
// Model names come from clients, so they are checked before they touch the
// filesystem: a name is a single path component of [A-Za-z0-9._-], not "."
// or "..", and the resolved folder must lie directly under the root.
//
// Thread-safe. What callers may rely on:
//   - A load never holds the repository's lock: while one model loads, every
//     other model's Get, GetTokenizer, Describe and List answer at once.
//     Concurrent Gets of one model share one load.
//   - A model returned by Get stays valid for as long as the caller holds the
//     shared_ptr, even when the repository unloads it meanwhile (its memory
//     is freed when the last holder lets go).
//   - A folder whose files change (name, size or modification time of any
//     file) is described, loaded and tokenized afresh on its next use.
//   - A folder that fails to load is not loaded again (its error is returned)
//     until one of its files changes, so a broken multi-GB folder does not
//     cost a reload per request.
#ifndef FCA_SERVER_RUNTIME_MODEL_REPOSITORY_H_
#define FCA_SERVER_RUNTIME_MODEL_REPOSITORY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/model_loader.h"

namespace fca::runtime {

class ModelRepository {
 public:
  // Loads the folder `dir` as model `name` (engine::LoadModel's contract).
  using Loader = std::function<absl::StatusOr<std::unique_ptr<engine::ControlledModel>>(
      const std::string& dir, const std::string& name, const engine::ComputeOptions& compute)>;
  // A model was loaded from the folder whose config.json is `config_json`.
  using LoadListener =
      std::function<void(const engine::ModelInfo& model, const std::string& config_json)>;

  struct Options {
    std::string root;                // folder holding one folder per model
    engine::ComputeOptions compute;  // device and dtype for every model
    // Bytes the loaded models may take together, by their estimates
    // (engine::ModelDescription::estimated_memory_bytes); 0 = unlimited.
    // Loading a model first unloads least recently used models, those not
    // in use before those in use, until it fits. The budget bounds what the
    // repository keeps: a model unloaded while a caller holds it lives on
    // until released, so the process may briefly hold more.
    int64_t memory_budget_bytes = 0;
    // Empty: engine::LoadModel with weights_hash_cache. Tests substitute a
    // loader that blocks.
    Loader loader;
    // Optional, not owned, may be shared by repositories: answers the
    // SHA-256 of weight files unchanged since they were last hashed (by
    // loads and by WeightsHash), across server starts when it has a file.
    engine::WeightsHashCache* weights_hash_cache = nullptr;
    // Optional: told of each model loaded (its info and config.json).
    // fca-server records them in the store (server/jobs/model_registry.h),
    // so stored results can be traced to the weights they came from. Called
    // on the loading thread, outside the repository's lock; it cannot fail
    // the load.
    LoadListener on_load;
  };
  // FAILED_PRECONDITION when the root is not a readable folder.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ModelRepository>> Open(
      const Options& options);

  // Names of the folders that hold a config.json, sorted.
  std::vector<std::string> Names() const;

  // A model as listed, without its weights being read.
  struct Listing {
    // Describe's description, except that info.weights_sha256 is the hash of
    // the weights when the model is loaded now, and empty otherwise (hashing
    // reads every byte of the weights).
    engine::ModelDescription description;
    std::shared_ptr<const engine::Tokenizer> tokenizer;
    bool loaded = false;
  };

  // What the folder holds (engine::DescribeModel) plus its tokenizer, kept
  // until the folder changes. Errors as for Get, or FAILED_PRECONDITION
  // "model 'x' is unavailable: <reason>" for a folder the engine refuses (a
  // malformed config.json or header, an unknown model_type, a tokenizer
  // with more ids than the model's vocabulary).
  [[nodiscard]] absl::StatusOr<Listing> Describe(const std::string& name);

  // A folder of Names() that does not describe: Describe's error message
  // without its "model 'x' is unavailable: ".
  struct UnavailableFolder {
    std::string name;
    std::string reason;
  };
  // Every model of Names() that describes, in name order. A folder that does
  // not describe goes to `unavailable` when given (in name order), and its
  // error is logged once per folder state.
  std::vector<Listing> List(std::vector<UnavailableFolder>* unavailable = nullptr);

  // RESOURCE_EXHAUSTED when the model of `listing` is estimated to need more
  // than the whole memory budget, so Get would refuse it.
  [[nodiscard]] absl::Status CheckFitsBudget(const Listing& listing) const;

  // Loads (once) and returns the model. INVALID_ARGUMENT for a malformed
  // name, NOT_FOUND for an unknown one, RESOURCE_EXHAUSTED when the model's
  // estimate exceeds the whole memory budget, or the loader's error (naming
  // the model, never the path). Callers serialize Forward calls themselves
  // (each worker has a repository of its own).
  [[nodiscard]] absl::StatusOr<std::shared_ptr<engine::ControlledModel>> Get(
      const std::string& name);

  // The model loaded afresh in float32 on the repository's device, outside
  // the cache and the memory budget, for as long as the caller holds it: the
  // float32 recording behind a reduced-precision audit's routing flip rate
  // (docs/fca.md "Routing flip rate"). Errors as for Get.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<engine::ControlledModel>> LoadFloat32(
      const std::string& name);

  // The tokenizer of a model: the loaded model's, or else (without loading
  // the weights) the folder's, kept until the folder changes. Errors as for
  // Get, or the tokenizer's. The pointer keeps what it points into alive.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const engine::Tokenizer>> GetTokenizer(
      const std::string& name);

  // SHA-256 of the model's weight files (the weights_sha256 a load gives),
  // without loading them: the loaded model's, or else computed once per
  // folder state (from Options::weights_hash_cache, or reading every byte,
  // off the lock). Errors as for Get.
  [[nodiscard]] absl::StatusOr<std::string> WeightsHash(const std::string& name);

  const Options& options() const { return options_; }
  // Loads attempted so far, successful or not (tests, monitoring).
  int64_t loads_attempted() const;
  // Whether the repository holds `name` loaded now.
  bool IsLoaded(const std::string& name) const;
  // The models it holds loaded now, in name order (no folder is read: a
  // remote worker sends this with every poll).
  std::vector<std::string> LoadedNames() const;
  // Estimated bytes of the models the repository holds or is loading.
  int64_t resident_bytes() const;

 private:
  // Everything known about one folder, for the folder state `signature`.
  struct Entry {
    std::string signature;
    // Describe's result; `listing_status` is its error when not OK.
    std::unique_ptr<Listing> listing;
    absl::Status listing_status;
    std::shared_ptr<const engine::Tokenizer> tokenizer;
    std::shared_ptr<engine::ControlledModel> model;  // null when not loaded
    // A model unloaded while in use: handed out again while it lives.
    std::weak_ptr<engine::ControlledModel> unloaded;
    absl::Status load_failure;   // a failed load of this signature (never out of memory)
    std::string weights_sha256;  // WeightsHash of this signature, once computed
    int64_t bytes = 0;           // the model's estimate, once described
    bool reserved = false;       // `bytes` counted in resident_bytes_
    uint64_t last_used = 0;      // LRU clock
    bool loading = false;        // one load at a time per name
  };

  explicit ModelRepository(Options options);
  // The folder of a valid, present model name; NOT_FOUND otherwise.
  [[nodiscard]] absl::StatusOr<std::string> ModelDir(const std::string& name) const;
  // The names a NOT_FOUND for an unknown model lists (capped).
  std::string NamesForError() const;
  // The entry of `name`, reset when the folder's signature has changed.
  Entry& EntryFor(const std::string& name, const std::string& signature)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Describe for a checked name, its folder and the folder's signature.
  [[nodiscard]] absl::StatusOr<Listing> DescribeAt(const std::string& name, const std::string& dir,
                                                   const std::string& signature);
  // The folder's tokenizer, kept in the entry (loaded off the lock).
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const engine::Tokenizer>> FolderTokenizer(
      const std::string& name, const std::string& dir, const std::string& signature);
  // Describe, loading and the budget check off the lock; the entry's
  // `loading` flag (set by the caller) keeps a second load out.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<engine::ControlledModel>> LoadUnlocked(
      const std::string& name, const std::string& dir, const std::string& signature);
  // Reserves `bytes` for `name`, unloading least recently used models;
  // RESOURCE_EXHAUSTED when `bytes` exceeds the whole budget.
  [[nodiscard]] absl::Status MakeRoom(const std::string& name, int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unload(Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  int64_t resident_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t loads_attempted_ ABSL_GUARDED_BY(mu_) = 0;
};

// OK when `name` may name a model or dataset: 1-128 chars of [A-Za-z0-9._-],
// not starting with '.', so never "." or "..".
[[nodiscard]] absl::Status ValidateName(const std::string& name, const char* what);

}  // namespace fca::runtime

#endif  // FCA_SERVER_RUNTIME_MODEL_REPOSITORY_H_
