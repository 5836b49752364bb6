#include "server/runtime/model_repository.h"

#include <glog/logging.h>

#include <algorithm>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "server/engine/io/safetensors.h"
#include "server/engine/models/model_loader.h"

namespace fca::runtime {

namespace fs = std::filesystem;

absl::Status ValidateName(const std::string& name, const char* what) {
  const bool ok_length = !name.empty() && name.size() <= 128;
  bool ok_chars = ok_length && name[0] != '.';
  for (char c : name) {
    ok_chars = ok_chars &&
               (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  }
  if (!ok_chars) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s name '%s' is not valid: use 1-128 characters of [A-Za-z0-9._-], not starting "
        "with '.'",
        what, name.substr(0, 130)));
  }
  return absl::OkStatus();
}

ModelRepository::ModelRepository(Options options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<ModelRepository>> ModelRepository::Open(const Options& options) {
  std::error_code ec;
  if (!fs::is_directory(options.root, ec)) {
    return absl::FailedPreconditionError("model repository is not a folder: " + options.root);
  }
  Options with_loader = options;
  if (!with_loader.loader) {
    engine::WeightsHashCache* cache = options.weights_hash_cache;
    with_loader.loader = [cache](const std::string& dir, const std::string& name,
                                 const engine::ComputeOptions& compute) {
      return engine::LoadModel(dir, name, compute, cache);
    };
  }
  return std::unique_ptr<ModelRepository>(new ModelRepository(std::move(with_loader)));
}

std::vector<std::string> ModelRepository::Names() const {
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(options_.root, ec)) {
    const std::string name = e.path().filename().string();
    if (!ValidateName(name, "model").ok()) continue;
    if (fs::is_regular_file(e.path() / "config.json", ec)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

// Name, size and modification time of every file in `dir`, in name order:
// changes when a file is replaced, added or removed.
std::string FolderSignature(const fs::path& dir) {
  std::vector<std::string> parts;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::error_code size_ec, time_ec;
    const uintmax_t size = e.file_size(size_ec);
    const auto mtime = e.last_write_time(time_ec).time_since_epoch().count();
    parts.push_back(absl::StrFormat("%s:%d:%d", e.path().filename().string(), size_ec ? 0 : size,
                                    time_ec ? 0 : mtime));
  }
  std::sort(parts.begin(), parts.end());
  return absl::StrJoin(parts, "|");
}

// Keeps the code of an engine error but names the model rather than the path.
absl::Status NameModel(const std::string& name, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrFormat("model '%s': %s", name, status.message()));
}

std::string UnavailablePrefix(const std::string& name) {
  return absl::StrFormat("model '%s' is unavailable: ", name);
}

// A folder the engine refused to describe cannot be served: FAILED_PRECONDITION
// (the request naming it is fine; the repository is not), with the reason
// after "is unavailable: " (ListModels shows the same reason). Other errors
// (I/O, memory) keep their code.
absl::Status Unavailable(const std::string& name, const absl::Status& refused) {
  if (refused.code() != absl::StatusCode::kInvalidArgument &&
      refused.code() != absl::StatusCode::kNotFound) {
    return NameModel(name, refused);
  }
  return absl::FailedPreconditionError(absl::StrCat(UnavailablePrefix(name), refused.message()));
}

}  // namespace

// "the repository holds a, b, c" (the first kListedModels names, then "and N
// more"), so that a mistyped name is answered with the names that exist.
std::string ModelRepository::NamesForError() const {
  constexpr size_t kListedModels = 20;
  const std::vector<std::string> names = Names();
  if (names.empty()) return "the repository holds no model";
  const size_t shown = std::min(names.size(), kListedModels);
  std::string list = absl::StrJoin(names.begin(), names.begin() + shown, ", ");
  if (names.size() > shown) absl::StrAppend(&list, " and ", names.size() - shown, " more");
  return "the repository holds " + list;
}

absl::StatusOr<std::string> ModelRepository::ModelDir(const std::string& name) const {
  const fs::path dir = fs::path(options_.root) / name;
  std::error_code ec;
  if (!fs::is_regular_file(dir / "config.json", ec)) {
    return absl::NotFoundError(
        absl::StrFormat("model '%s' is not in the repository (%s)", name, NamesForError()));
  }
  return dir.string();
}

ModelRepository::Entry& ModelRepository::EntryFor(const std::string& name,
                                                  const std::string& signature) {
  Entry& e = entries_[name];
  if (e.signature == signature) return e;
  // The folder changed: nothing known about it holds any more. A load in
  // flight finishes for its caller and is not kept (see Get); its
  // reservation ends here.
  e.signature = signature;
  e.listing.reset();
  e.listing_status = absl::OkStatus();
  e.tokenizer.reset();
  e.load_failure = absl::OkStatus();
  Unload(e);
  e.unloaded.reset();
  return e;
}

void ModelRepository::Unload(Entry& e) {
  if (e.model != nullptr) e.unloaded = std::move(e.model);
  e.model.reset();
  if (e.reserved) resident_bytes_ -= e.bytes;
  e.reserved = false;
}

absl::StatusOr<std::shared_ptr<const engine::Tokenizer>> ModelRepository::FolderTokenizer(
    const std::string& name, const std::string& dir, const std::string& signature) {
  {
    absl::MutexLock lock(&mu_);
    const Entry& e = EntryFor(name, signature);
    if (e.tokenizer != nullptr) return e.tokenizer;
  }
  // A BPE tokenizer.json takes a while to parse: never under the lock.
  absl::StatusOr<std::unique_ptr<engine::Tokenizer>> loaded = engine::LoadFolderTokenizer(dir);
  if (!loaded.ok()) return loaded.status();  // the callers name the model
  std::shared_ptr<const engine::Tokenizer> tokenizer = std::move(*loaded);
  absl::MutexLock lock(&mu_);
  Entry& e = entries_[name];
  if (e.signature == signature && e.tokenizer == nullptr) e.tokenizer = tokenizer;
  return tokenizer;
}

absl::StatusOr<ModelRepository::Listing> ModelRepository::DescribeAt(const std::string& name,
                                                                     const std::string& dir,
                                                                     const std::string& signature) {
  {
    absl::MutexLock lock(&mu_);
    const Entry& e = EntryFor(name, signature);
    if (!e.listing_status.ok()) return e.listing_status;
    if (e.listing != nullptr) {
      Listing listing = *e.listing;
      listing.loaded = e.model != nullptr;
      if (listing.loaded) listing.description.info.weights_sha256 = e.model->info().weights_sha256;
      return listing;
    }
  }
  // Why the folder cannot be served: its config.json, a safetensors header
  // or its tokenizer refused (the engine's message, which names no path).
  absl::Status refused;
  absl::StatusOr<Listing> listing = [&]() -> absl::StatusOr<Listing> {
    Listing out;
    absl::StatusOr<engine::ModelDescription> d = engine::DescribeModel(dir, name, options_.compute);
    if (!d.ok()) return d.status();
    out.description = *std::move(d);
    FCA_ASSIGN_OR_RETURN(out.tokenizer, FolderTokenizer(name, dir, signature));
    FCA_RETURN_IF_ERROR(engine::CheckTokenizerFits(*out.tokenizer, out.description.info));
    return out;
  }();
  if (!listing.ok()) listing = Unavailable(name, listing.status());
  absl::MutexLock lock(&mu_);
  Entry& e = entries_[name];
  if (e.signature != signature || e.listing != nullptr || !e.listing_status.ok()) return listing;
  if (listing.ok()) {
    e.listing = std::make_unique<Listing>(*listing);
    e.bytes = listing->description.estimated_memory_bytes;
  } else {
    e.listing_status = listing.status();
    // Once per folder state, whoever asked: a listing every few seconds must
    // not flood the log with the same broken folder.
    LOG(WARNING) << "model repository: " << listing.status();
  }
  return listing;
}

absl::StatusOr<ModelRepository::Listing> ModelRepository::Describe(const std::string& name) {
  FCA_RETURN_IF_ERROR(ValidateName(name, "model"));
  FCA_ASSIGN_OR_RETURN(const std::string dir, ModelDir(name));
  return DescribeAt(name, dir, FolderSignature(dir));
}

std::vector<ModelRepository::Listing> ModelRepository::List(
    std::vector<UnavailableFolder>* unavailable) {
  std::vector<Listing> out;
  for (const std::string& name : Names()) {
    absl::StatusOr<Listing> listing = Describe(name);
    if (listing.ok()) {
      out.push_back(*std::move(listing));
    } else if (unavailable != nullptr) {
      const absl::string_view message = listing.status().message();
      unavailable->push_back(
          {name, std::string(absl::StripPrefix(message, UnavailablePrefix(name)))});
    }
  }
  return out;
}

absl::StatusOr<std::string> ModelRepository::WeightsHash(const std::string& name) {
  FCA_RETURN_IF_ERROR(ValidateName(name, "model"));
  FCA_ASSIGN_OR_RETURN(const std::string dir, ModelDir(name));
  const std::string signature = FolderSignature(dir);
  {
    absl::MutexLock lock(&mu_);
    const Entry& e = EntryFor(name, signature);
    if (e.model != nullptr) return e.model->info().weights_sha256;
    if (!e.weights_sha256.empty()) return e.weights_sha256;
  }
  // Off the lock: hashing reads every byte of the weights.
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<engine::TensorSource> weights,
                       engine::TensorSource::OpenDir(dir));
  FCA_ASSIGN_OR_RETURN(std::string hash, weights->ContentSha256(options_.weights_hash_cache));
  absl::MutexLock lock(&mu_);
  EntryFor(name, signature).weights_sha256 = hash;
  return hash;
}

absl::StatusOr<std::shared_ptr<const engine::Tokenizer>> ModelRepository::GetTokenizer(
    const std::string& name) {
  FCA_RETURN_IF_ERROR(ValidateName(name, "model"));
  FCA_ASSIGN_OR_RETURN(const std::string dir, ModelDir(name));
  const std::string signature = FolderSignature(dir);
  {
    absl::MutexLock lock(&mu_);
    const Entry& e = EntryFor(name, signature);
    if (e.model != nullptr) {
      // Aliasing: the pointer keeps the whole model alive.
      return std::shared_ptr<const engine::Tokenizer>(e.model, &e.model->tokenizer());
    }
  }
  absl::StatusOr<std::shared_ptr<const engine::Tokenizer>> tokenizer =
      FolderTokenizer(name, dir, signature);
  if (!tokenizer.ok()) return NameModel(name, tokenizer.status());
  return tokenizer;
}

namespace {

absl::Status FitsBudget(const std::string& name, int64_t bytes, int64_t budget) {
  if (budget == 0 || bytes <= budget) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "model '%s' needs about %d bytes loaded, more than the server's whole model memory "
      "budget of %d bytes",
      name, bytes, budget));
}

}  // namespace

absl::Status ModelRepository::CheckFitsBudget(const Listing& listing) const {
  return FitsBudget(listing.description.info.name, listing.description.estimated_memory_bytes,
                    options_.memory_budget_bytes);
}

absl::Status ModelRepository::MakeRoom(const std::string& name, int64_t bytes) {
  const int64_t budget = options_.memory_budget_bytes;
  FCA_RETURN_IF_ERROR(FitsBudget(name, bytes, budget));
  while (budget > 0 && resident_bytes_ + bytes > budget) {
    // Least recently used first, models nobody holds before those in use
    // (the repository's own reference is the only one of an idle model).
    Entry* victim = nullptr;
    for (auto& [other, e] : entries_) {
      if (other == name || e.model == nullptr) continue;
      const bool in_use = e.model.use_count() > 1;
      const bool victim_in_use = victim != nullptr && victim->model.use_count() > 1;
      if (victim == nullptr || (!in_use && victim_in_use) ||
          (in_use == victim_in_use && e.last_used < victim->last_used)) {
        victim = &e;
      }
    }
    // Only loads in flight remain: they are let through over the budget
    // rather than made to wait for one another.
    if (victim == nullptr) break;
    Unload(*victim);
  }
  Entry& e = entries_[name];
  e.bytes = bytes;
  e.reserved = true;
  resident_bytes_ += bytes;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<engine::ControlledModel>> ModelRepository::LoadUnlocked(
    const std::string& name, const std::string& dir, const std::string& signature) {
  FCA_ASSIGN_OR_RETURN(const Listing listing, DescribeAt(name, dir, signature));
  {
    absl::MutexLock lock(&mu_);
    FCA_RETURN_IF_ERROR(MakeRoom(name, listing.description.estimated_memory_bytes));
  }
  absl::StatusOr<std::unique_ptr<engine::ControlledModel>> model =
      options_.loader(dir, name, options_.compute);
  if (!model.ok()) return NameModel(name, model.status());
  std::shared_ptr<engine::ControlledModel> shared = std::move(*model);
  if (options_.on_load) options_.on_load(shared->info(), listing.description.config_json);
  return shared;
}

absl::StatusOr<std::shared_ptr<engine::ControlledModel>> ModelRepository::LoadFloat32(
    const std::string& name) {
  FCA_RETURN_IF_ERROR(ValidateName(name, "model"));
  FCA_ASSIGN_OR_RETURN(const std::string dir, ModelDir(name));
  FCA_RETURN_IF_ERROR(DescribeAt(name, dir, FolderSignature(dir)).status());
  engine::ComputeOptions compute = options_.compute;
  compute.dtype = ComputeDType::kFloat32;
  absl::StatusOr<std::unique_ptr<engine::ControlledModel>> model =
      options_.loader(dir, name, compute);
  if (!model.ok()) return NameModel(name, model.status());
  return std::shared_ptr<engine::ControlledModel>(std::move(*model));
}

absl::StatusOr<std::shared_ptr<engine::ControlledModel>> ModelRepository::Get(
    const std::string& name) {
  FCA_RETURN_IF_ERROR(ValidateName(name, "model"));
  FCA_ASSIGN_OR_RETURN(const std::string dir, ModelDir(name));
  const std::string signature = FolderSignature(dir);
  {
    absl::MutexLock lock(&mu_);
    Entry& waiting = entries_[name];
    // Another caller's load of this model: wait for it rather than load twice.
    mu_.Await(absl::Condition(
        +[](Entry* e) { return !e->loading; }, &waiting));
    Entry& e = EntryFor(name, signature);
    if (e.model != nullptr) {
      e.last_used = ++clock_;
      return e.model;
    }
    if (!e.load_failure.ok()) return e.load_failure;
    if (std::shared_ptr<engine::ControlledModel> alive = e.unloaded.lock()) {
      // Unloaded while in use and still alive: take it back, not a copy.
      FCA_RETURN_IF_ERROR(MakeRoom(name, e.bytes));
      e.model = std::move(alive);
      e.last_used = ++clock_;
      return e.model;
    }
    e.loading = true;
    ++loads_attempted_;
  }
  absl::StatusOr<std::shared_ptr<engine::ControlledModel>> loaded =
      LoadUnlocked(name, dir, signature);
  absl::MutexLock lock(&mu_);
  Entry& e = entries_[name];
  e.loading = false;
  if (loaded.ok() && e.signature == signature) {
    e.model = *loaded;
    e.last_used = ++clock_;
    return loaded;
  }
  if (e.reserved) resident_bytes_ -= e.bytes;
  e.reserved = false;
  // A failure is remembered for the folder state it belongs to; a load of
  // a folder that changed meanwhile goes to its caller and is not kept, nor
  // is running out of memory, the device's passing state (a later Get tries
  // again).
  if (!loaded.ok() && e.signature == signature && !absl::IsResourceExhausted(loaded.status())) {
    e.load_failure = loaded.status();
  }
  return loaded;
}

int64_t ModelRepository::loads_attempted() const {
  absl::MutexLock lock(&mu_);
  return loads_attempted_;
}

bool ModelRepository::IsLoaded(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(name);
  return it != entries_.end() && it->second.model != nullptr;
}

std::vector<std::string> ModelRepository::LoadedNames() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries_) {
    if (entry.model != nullptr) names.push_back(name);
  }
  return names;
}

int64_t ModelRepository::resident_bytes() const {
  absl::MutexLock lock(&mu_);
  return resident_bytes_;
}

}  // namespace fca::runtime
