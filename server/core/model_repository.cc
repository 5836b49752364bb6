#include "server/core/model_repository.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace fca::core {

namespace fs = std::filesystem;

absl::Status ValidateName(const std::string& name, const char* what) {
  const bool ok_length = !name.empty() && name.size() <= 128;
  bool ok_chars = ok_length && name[0] != '.';
  for (char c : name) {
    ok_chars = ok_chars && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' ||
                            c == '_' || c == '-');
  }
  if (!ok_chars) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s name '%s' is not valid: use 1-128 characters of [A-Za-z0-9._-], not starting "
        "with '.'", what, name.substr(0, 130)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ModelRepository>> ModelRepository::Open(const Options& options) {
  std::error_code ec;
  if (!fs::is_directory(options.root, ec)) {
    return absl::FailedPreconditionError("model repository is not a folder: " + options.root);
  }
  return std::unique_ptr<ModelRepository>(new ModelRepository(options));
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
    parts.push_back(absl::StrFormat("%s:%d:%d", e.path().filename().string(),
                                    size_ec ? 0 : size, time_ec ? 0 : mtime));
  }
  std::sort(parts.begin(), parts.end());
  return absl::StrJoin(parts, "|");
}

}  // namespace

absl::StatusOr<std::string> ModelRepository::ModelDir(const std::string& name) const {
  const fs::path dir = fs::path(options_.root) / name;
  std::error_code ec;
  if (!fs::is_regular_file(dir / "config.json", ec)) {
    return absl::NotFoundError(absl::StrFormat("model '%s' is not in the repository", name));
  }
  return dir.string();
}

absl::StatusOr<const engine::Tokenizer*> ModelRepository::GetTokenizer(const std::string& name) {
  FCA_RETURN_IF_ERROR(ValidateName(name, "model"));
  std::lock_guard<std::mutex> lock(mu_);
  auto model = loaded_.find(name);
  if (model != loaded_.end()) return &model->second->tokenizer();
  auto cached = tokenizers_.find(name);
  if (cached != tokenizers_.end()) return cached->second.get();
  FCA_ASSIGN_OR_RETURN(std::string dir, ModelDir(name));
  auto tokenizer = engine::LoadFolderTokenizer(dir);
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrFormat("model '%s': %s", name, tokenizer.status().message()));
  }
  const engine::Tokenizer* ptr = tokenizer->get();
  tokenizers_[name] = std::move(*tokenizer);
  return ptr;
}

absl::StatusOr<engine::ControlledModel*> ModelRepository::Get(const std::string& name) {
  FCA_RETURN_IF_ERROR(ValidateName(name, "model"));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = loaded_.find(name);
  if (it != loaded_.end()) return it->second.get();
  FCA_ASSIGN_OR_RETURN(const fs::path dir, ModelDir(name));
  const std::string signature = FolderSignature(dir);
  auto failed = failed_.find(name);
  if (failed != failed_.end() && failed->second.signature == signature) {
    return failed->second.status;
  }
  ++loads_attempted_;
  auto model = engine::LoadModel(dir.string(), name, options_.compute);
  if (!model.ok()) {
    // Keep the loader's code, but name the model rather than the path.
    absl::Status status(model.status().code(),
                        absl::StrFormat("model '%s': %s", name, model.status().message()));
    failed_[name] = Failure{status, signature};
    return status;
  }
  failed_.erase(name);
  engine::ControlledModel* ptr = model->get();
  loaded_[name] = std::move(*model);
  return ptr;
}

int64_t ModelRepository::loads_attempted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return loads_attempted_;
}

}  // namespace fca::core
