// A deterministic split of a fortune-file corpus (the Debian `fortunes`
// package: plain-text files whose records end with a line "%") into training,
// calibration and evaluation text. Torch-free.
//
// The rule (also returned as text, to be printed and logged):
//   1. The corpus files are the regular files directly in the folder whose
//      names have no extension (*.dat and *.u8 are skipped, and so are
//      sub-folders such as off/), in byte-wise sorted order.
//   2. The files named in `eval_files` form the evaluation part and those in
//      `calib_files` the calibration part; every other file is training.
//   3. A record (one fortune, compared without leading/trailing whitespace)
//      that also occurs in the evaluation part is dropped from calibration
//      and training, and one that occurs in calibration is dropped from
//      training: the fortune package repeats some fortunes across files.
//   4. Each part is its files' remaining records, each followed by "%\n", in
//      file order then record order.
//   5. Check: no `check_window`-byte window of the evaluation or calibration
//      text (the consecutive windows an audit forms) occurs anywhere in the
//      training text, and evaluation and calibration share no window.
#ifndef FCA_SERVER_TOOLS_TRAIN_CORPUS_SPLIT_H_
#define FCA_SERVER_TOOLS_TRAIN_CORPUS_SPLIT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/json.h"

namespace fca::engine {

struct CorpusSplitOptions {
  std::string corpus_dir = "/usr/share/games/fortunes";
  std::vector<std::string> eval_files = {"fortunes"};
  std::vector<std::string> calib_files = {"literature"};
  int64_t check_window = 128;  // window length of the overlap check (rule 5)
};

// One source file of the corpus and where it went.
struct CorpusFile {
  std::string name;             // base name in the corpus folder
  std::string part;             // "train" | "calib" | "eval"
  int64_t bytes = 0;            // size of the source file
  std::string sha256;           // of the source file's bytes
  int64_t records = 0;          // records read
  int64_t dropped_records = 0;  // dropped as duplicates of eval/calib (rule 3)
};

struct CorpusSplit {
  std::string rule;               // the rule above with the actual file names, one paragraph
  std::vector<CorpusFile> files;  // sorted by name
  std::string train, calib, eval;
};

// NOT_FOUND when the folder or a named file is missing; INVALID_ARGUMENT when
// a file is named twice, a part is empty, or the check of rule 5 fails.
[[nodiscard]] absl::StatusOr<CorpusSplit> SplitCorpus(const CorpusSplitOptions& options);

// Rule, files and the SHA-256 of each part's text, for logs.
json::Value CorpusSplitToJson(const CorpusSplit& split);

// Writes `dir`/train.txt, calib.txt, eval.txt and split.json (creating `dir`).
[[nodiscard]] absl::Status WriteCorpusSplit(const CorpusSplit& split, const std::string& dir);

}  // namespace fca::engine

#endif  // FCA_SERVER_TOOLS_TRAIN_CORPUS_SPLIT_H_
