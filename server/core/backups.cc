#include "server/core/backups.h"

#include <dirent.h>
#include <glog/logging.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace fca::core {
namespace {

constexpr absl::string_view kScheduledPrefix = "fca-backup-";
constexpr absl::string_view kScheduledSuffix = ".sqlite";
constexpr char kScheduledTimeFormat[] = "%Y%m%dT%H%M%E3SZ";
// ParseTime's %Y takes every digit it finds ("20261204" as a year), so the
// seconds are parsed with separators put in, the ".123Z" by hand.
constexpr char kScheduledSecondsFormat[] = "%Y-%m-%dT%H:%M:%S";
constexpr size_t kScheduledSecondsLength = 15;  // "20261204T084635"

}  // namespace

absl::StatusOr<std::unique_ptr<BackupDirectory>> BackupDirectory::Open(
    std::string db, std::string dir, storage::BackupOptions copy) {
  struct stat st {};
  if (dir.empty() || stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrFormat("--backup_dir '%s' is not a folder (create it first)", dir));
  }
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return std::unique_ptr<BackupDirectory>(
      new BackupDirectory(std::move(db), std::move(dir), std::move(copy)));
}

absl::Status BackupDirectory::CheckName(absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("backup: no file name given");
  // A name an operator can type, list and pass to a shell without quoting:
  // no control characters, no backslash, not a hidden file, not an option.
  const bool plain = std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-';
  });
  if (!plain || name.front() == '.' || name.front() == '-') {
    return absl::InvalidArgumentError(absl::StrFormat(
        "backup: '%s' is not a plain file name: letters, digits, '.', '_' and '-', not first "
        "'.' or '-' (the copy goes into the server's --backup_dir)",
        absl::CHexEscape(name.substr(0, 64))));
  }
  if (name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "backup: the file name has %d bytes; at most %d", name.size(), kMaxNameBytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::BackupDatabaseResponse> BackupDirectory::Write(
    const std::string& name, const std::function<bool()>& go_on) {
  if (absl::Status ok = CheckName(name); !ok.ok()) return ok;
  const std::string path = absl::StrCat(dir_, "/", name);
  storage::BackupOptions options = copy_;
  options.progress = [&](int64_t done, int64_t total) {
    if (go_on && !go_on()) return false;
    return !copy_.progress || copy_.progress(done, total);
  };
  absl::MutexLock lock(&copying_);
  absl::StatusOr<storage::BackupSummary> summary = storage::BackupDatabase(db_, path, options);
  if (!summary.ok()) return summary.status();
  LOG(INFO) << absl::StrFormat("backup: wrote %s (%d bytes) in %.1f s, checked in %.1f s", path,
                               summary->bytes, summary->copy_seconds, summary->check_seconds);
  v1::BackupDatabaseResponse response;
  response.set_path(path);
  response.set_bytes(summary->bytes);
  response.set_pages(summary->pages);
  response.set_copy_seconds(summary->copy_seconds);
  response.set_check_seconds(summary->check_seconds);
  return response;
}

std::string BackupDirectory::ScheduledName(absl::Time time) {
  return absl::StrCat(kScheduledPrefix,
                      absl::FormatTime(kScheduledTimeFormat, time, absl::UTCTimeZone()),
                      kScheduledSuffix);
}

std::optional<absl::Time> BackupDirectory::ScheduledTime(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kScheduledPrefix) ||
      !absl::ConsumeSuffix(&name, kScheduledSuffix)) {
    return std::nullopt;
  }
  // "20261204T084635" ".123Z"
  if (name.size() != kScheduledSecondsLength + 5) return std::nullopt;
  const absl::string_view millis = name.substr(kScheduledSecondsLength + 1, 3);
  if (name[kScheduledSecondsLength] != '.' || name.back() != 'Z' ||
      !std::all_of(millis.begin(), millis.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  absl::Time time;
  std::string error;
  const std::string seconds =
      absl::StrCat(name.substr(0, 4), "-", name.substr(4, 2), "-", name.substr(6, 5), ":",
                   name.substr(11, 2), ":", name.substr(13, 2));
  if (!absl::ParseTime(kScheduledSecondsFormat, seconds, absl::UTCTimeZone(), &time, &error)) {
    return std::nullopt;
  }
  time += absl::Milliseconds(std::stoi(std::string(millis)));
  // Only the exact form ScheduledName writes (sorting by name = by time).
  if (ScheduledName(time) != absl::StrCat(kScheduledPrefix, name, kScheduledSuffix)) {
    return std::nullopt;
  }
  return time;
}

absl::StatusOr<std::vector<std::string>> BackupDirectory::ListScheduled() const {
  DIR* folder = opendir(dir_.c_str());
  if (folder == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("backup: cannot list '%s': %s", dir_, std::strerror(errno)));
  }
  std::vector<std::string> names;
  while (const dirent* entry = readdir(folder)) {
    if (ScheduledTime(entry->d_name).has_value()) names.emplace_back(entry->d_name);
  }
  closedir(folder);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::vector<std::string>> BackupDirectory::Prune(int keep) const {
  absl::StatusOr<std::vector<std::string>> names = ListScheduled();
  if (!names.ok()) return names.status();
  const size_t kept = static_cast<size_t>(std::max(keep, 0));
  std::vector<std::string> removed;
  for (size_t i = 0; i + kept < names->size(); ++i) {
    const std::string path = absl::StrCat(dir_, "/", (*names)[i]);
    if (std::remove(path.c_str()) != 0) {
      return absl::InternalError(
          absl::StrFormat("backup: cannot remove '%s': %s", path, std::strerror(errno)));
    }
    removed.push_back((*names)[i]);
  }
  return removed;
}

absl::Time NextBackupDue(std::optional<absl::Time> newest, absl::Duration every, absl::Time now) {
  if (!newest.has_value()) return now;
  return std::max(now, *newest + every);
}

BackupScheduler::BackupScheduler(BackupDirectory* dir, absl::Duration every, int keep)
    : dir_(dir), every_(every), keep_(keep) {
  thread_ = std::thread([this] { Run(); });
}

void BackupScheduler::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

int BackupScheduler::written() const {
  absl::MutexLock lock(&mu_);
  return written_;
}

bool BackupScheduler::Stopping() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

void BackupScheduler::Run() {
  // This thread's own last try counts too: a folder that cannot be listed
  // (or a copy that failed) must not make it copy again at once.
  std::optional<absl::Time> last_try;
  for (;;) {
    std::optional<absl::Time> newest = last_try;
    if (absl::StatusOr<std::vector<std::string>> names = dir_->ListScheduled();
        names.ok() && !names->empty()) {
      const std::optional<absl::Time> in_folder = BackupDirectory::ScheduledTime(names->back());
      if (in_folder.has_value() && (!newest.has_value() || *in_folder > *newest)) {
        newest = in_folder;
      }
    }
    const absl::Time due = NextBackupDue(newest, every_, absl::Now());
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithDeadline(absl::Condition(&stop_), due);
      if (stop_) return;
    }
    last_try = absl::Now();
    BackUpOnce();
    if (Stopping()) return;
  }
}

void BackupScheduler::BackUpOnce() {
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::BackupDatabaseResponse> written =
      dir_->Write(BackupDirectory::ScheduledName(start), [this] { return !Stopping(); });
  if (!written.ok()) {
    LOG(ERROR) << "scheduled backup failed: " << written.status();
    // The next try comes a period after this one, not at once.
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithDeadline(absl::Condition(&stop_), start + every_);
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    ++written_;
  }
  absl::StatusOr<std::vector<std::string>> removed = dir_->Prune(keep_);
  if (!removed.ok()) {
    LOG(ERROR) << "pruning old backups failed: " << removed.status();
  } else if (!removed->empty()) {
    LOG(INFO) << "backup: removed " << absl::StrJoin(*removed, ", ") << " (--backup_keep " << keep_
              << ")";
  }
}

}  // namespace fca::core
