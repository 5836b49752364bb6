#include "server/tools/train/corpus_split.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string_view>
#include <unordered_set>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/file.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace fca::engine {
namespace {

namespace fs = std::filesystem;

// Records of a fortune file: the text before each line "%" (with its line
// ends), plus a non-blank tail without a terminating "%".
std::vector<std::string> Records(const std::string& text) {
  std::vector<std::string> records;
  std::string current;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    const size_t next = end == std::string::npos ? text.size() : end + 1;
    std::string_view line(text.data() + pos, (end == std::string::npos ? text.size() : end) - pos);
    if (line == "%") {
      records.push_back(std::move(current));
      current.clear();
    } else {
      current.append(text, pos, next - pos);
    }
    pos = next;
  }
  if (current.find_first_not_of(" \t\r\n") != std::string::npos) {
    records.push_back(std::move(current));
  }
  return records;
}

std::string Key(const std::string& record) {
  const size_t b = record.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return std::string();
  const size_t e = record.find_last_not_of(" \t\r\n");
  return record.substr(b, e - b + 1);
}

std::string Rule(const CorpusSplitOptions& o) {
  return absl::StrFormat(
      "Files: the regular files directly in the corpus folder whose names have no extension "
      "(*.dat, *.u8 and sub-folders skipped), sorted by name. Evaluation: %s. Calibration: %s. "
      "Training: every other file. A record (fortune, trimmed) that also occurs in evaluation "
      "is dropped from calibration and training; one that occurs in calibration is dropped "
      "from training. Each part is its files' remaining records, each followed by \"%%\\n\", "
      "in file order. Checked: no %d-byte window of evaluation or calibration occurs in "
      "training, and evaluation and calibration share no window.",
      absl::StrJoin(o.eval_files, ", "), absl::StrJoin(o.calib_files, ", "), o.check_window);
}

// Rule 5: no consecutive window of `part` occurs anywhere in `train`, and
// none is shared by eval and calib.
absl::Status CheckWindows(const CorpusSplit& s, int64_t T) {
  if (T < 2) return absl::InvalidArgumentError("check_window must be at least 2");
  std::hash<std::string_view> hash;
  std::vector<size_t> train_hashes;
  const std::string_view train(s.train);
  for (size_t i = 0; i + T <= train.size(); ++i) train_hashes.push_back(hash(train.substr(i, T)));
  std::sort(train_hashes.begin(), train_hashes.end());
  auto windows = [T](const std::string& text) {
    std::vector<std::string_view> w;
    for (size_t i = 0; i + T <= text.size(); i += T)
      w.push_back(std::string_view(text).substr(i, T));
    return w;
  };
  for (const auto& [name, text] :
       {std::pair<const char*, const std::string*>{"evaluation", &s.eval},
        {"calibration", &s.calib}}) {
    int64_t k = 0;
    for (std::string_view w : windows(*text)) {
      if (std::binary_search(train_hashes.begin(), train_hashes.end(), hash(w)) &&
          train.find(w) != std::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s window %d (%d bytes) also occurs in the training text; name other files", name, k,
            T));
      }
      ++k;
    }
  }
  std::unordered_set<std::string_view> calib_windows;
  for (std::string_view w : windows(s.calib)) calib_windows.insert(w);
  for (std::string_view w : windows(s.eval)) {
    if (calib_windows.count(w)) {
      return absl::InvalidArgumentError("evaluation and calibration share a window");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CorpusSplit> SplitCorpus(const CorpusSplitOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(options.corpus_dir, ec)) {
    return absl::NotFoundError("corpus folder " + options.corpus_dir + " does not exist");
  }
  std::set<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(options.corpus_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.find('.') == std::string::npos) names.insert(name);
  }
  if (ec) return absl::InternalError("cannot list " + options.corpus_dir + ": " + ec.message());
  std::map<std::string, std::string> part;
  for (const auto& [list, label] :
       {std::pair{&options.eval_files, "eval"}, std::pair{&options.calib_files, "calib"}}) {
    for (const std::string& f : *list) {
      if (names.count(f) == 0) {
        return absl::NotFoundError(absl::StrFormat("corpus file '%s' (named for %s) is not in %s",
                                                   f, label, options.corpus_dir));
      }
      if (!part.emplace(f, label).second) {
        return absl::InvalidArgumentError(absl::StrFormat("corpus file '%s' is named twice", f));
      }
    }
  }
  CorpusSplit split;
  split.rule = Rule(options);
  std::map<std::string, std::vector<std::string>> records;  // by file
  for (const std::string& name : names) {
    FCA_ASSIGN_OR_RETURN(std::string text,
                         ReadFile(options.corpus_dir + "/" + name, "corpus file"));
    CorpusFile f;
    f.name = name;
    f.part = part.count(name) ? part[name] : "train";
    f.bytes = static_cast<int64_t>(text.size());
    f.sha256 = Sha256Hex(text);
    records[name] = Records(text);
    f.records = static_cast<int64_t>(records[name].size());
    split.files.push_back(std::move(f));
  }
  // Rule 3: parts are built in the order eval, calib, train, and a record
  // already in an earlier part is dropped (repeats within a part are kept).
  std::unordered_set<std::string> earlier;
  for (const std::string p : {"eval", "calib", "train"}) {
    std::string* out = p == "eval" ? &split.eval : p == "calib" ? &split.calib : &split.train;
    std::unordered_set<std::string> added;
    for (CorpusFile& f : split.files) {
      if (f.part != p) continue;
      for (const std::string& r : records[f.name]) {
        std::string key = Key(r);
        if (earlier.count(key)) {
          ++f.dropped_records;
          continue;
        }
        added.insert(std::move(key));
        *out += r;
        *out += "%\n";
      }
    }
    earlier.insert(added.begin(), added.end());
  }
  if (split.train.empty() || split.calib.empty() || split.eval.empty()) {
    return absl::InvalidArgumentError("the split leaves a part empty; name other files");
  }
  FCA_RETURN_IF_ERROR(CheckWindows(split, options.check_window));
  return split;
}

json::Value CorpusSplitToJson(const CorpusSplit& split) {
  json::Value v = json::Value::MakeObject();
  v.Set("rule", json::Value::String(split.rule));
  json::Value files = json::Value::MakeArray();
  for (const CorpusFile& f : split.files) {
    json::Value o = json::Value::MakeObject();
    o.Set("name", json::Value::String(f.name));
    o.Set("part", json::Value::String(f.part));
    o.Set("bytes", json::Value::Int(f.bytes));
    o.Set("sha256", json::Value::String(f.sha256));
    o.Set("records", json::Value::Int(f.records));
    o.Set("dropped_records", json::Value::Int(f.dropped_records));
    files.mutable_array().push_back(std::move(o));
  }
  v.Set("files", std::move(files));
  for (const auto& [name, text] :
       {std::pair<const char*, const std::string*>{"train", &split.train},
        {"calib", &split.calib},
        {"eval", &split.eval}}) {
    json::Value o = json::Value::MakeObject();
    o.Set("bytes", json::Value::Int(static_cast<int64_t>(text->size())));
    o.Set("sha256", json::Value::String(Sha256Hex(*text)));
    v.Set(name, std::move(o));
  }
  return v;
}

absl::Status WriteCorpusSplit(const CorpusSplit& split, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError("cannot create " + dir + ": " + ec.message());
  const std::string json_text = json::Write(CorpusSplitToJson(split), /*pretty=*/true) + "\n";
  for (const auto& [name, text] :
       {std::pair<const char*, const std::string*>{"train.txt", &split.train},
        {"calib.txt", &split.calib},
        {"eval.txt", &split.eval},
        {"split.json", &json_text}}) {
    std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
    out << *text;
    if (!out.good()) return absl::InternalError(absl::StrFormat("cannot write %s/%s", dir, name));
  }
  return absl::OkStatus();
}

}  // namespace fca::engine
