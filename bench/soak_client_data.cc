// fca_soak_bench: the client's calls about models, tokens, datasets and
// cached coefficients.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/soak_client.h"
#include "common/sha256.h"

namespace fca::soak {
namespace {

using grpc::StatusCode;

std::string WindowHash(const std::vector<int32_t>& ids, size_t begin, size_t length) {
  Sha256 h;
  for (size_t i = begin; i < begin + length; ++i) {
    const uint32_t v = static_cast<uint32_t>(ids[i]);
    const uint8_t le[4] = {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8),
                           static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 24)};
    h.Update(le, 4);
  }
  return h.FinishHex();
}

}  // namespace

// --- ListModels: the three tiny models, sorted, with their sites.
void Client::ListModels() {
  Call call(this, kListModels, kUnaryDeadlineS);
  v1::ListModelsResponse resp;
  const grpc::Status st = stub_->ListModels(&call.ctx, v1::ListModelsRequest(), &resp);
  std::string bad;
  if (st.ok()) {
    std::vector<std::string> names;
    for (const v1::Model& m : resp.models()) {
      names.push_back(m.name());
      const std::string wrong = shared_->CheckWeights(m.name(), m.weights_sha256(), false);
      if (!wrong.empty()) bad = wrong;
    }
    if (names != std::vector<std::string>{"dense", "fg-a", "fg-b"}) {
      bad = "ListModels returned [" + absl::StrJoin(names, ",") + "]";
    }
  }
  Finish(call, st, bad, {});
}

// --- Tokenize: random text with a byte tokenizer gives back the bytes.
void Client::Tokenize() {
  v1::TokenizeRequest req;
  const bool unknown_model = Chance(0.03), oversized = !unknown_model && Chance(0.02);
  req.set_model(unknown_model ? "no-such-model" : PickModel(/*dense_too=*/true));
  // Log-uniform-ish sizes from a few bytes to 64 KiB.
  const size_t size = oversized ? shared_->max_tokenize_bytes + 1 + rng_.Uniform(1024)
                                : 1 + rng_.Uniform(size_t{1} << (4 + rng_.Uniform(13)));
  req.set_text(Letters(size, rng_.Next()));
  TokenizeCall(req, unknown_model || oversized, nullptr);
}

// One Tokenize call; the ids go to `*ids` when asked for. A refusal is
// expected when `refusal_expected` (unknown model, text over the limit).
bool Client::TokenizeCall(const v1::TokenizeRequest& req, bool refusal_expected,
                          std::vector<int32_t>* ids) {
  Call call(this, kTokenize, kUnaryDeadlineS);
  v1::TokenizeResponse resp;
  const grpc::Status st = stub_->Tokenize(&call.ctx, req, &resp);
  std::string bad;
  if (st.ok()) {
    if (refusal_expected) {
      bad = absl::StrFormat("Tokenize of %d bytes with model '%s' was not refused",
                            req.text().size(), req.model());
    } else if (resp.tokenizer() != "byte" || resp.vocab_size() != 256 ||
               resp.ids_size() != static_cast<int>(req.text().size())) {
      bad =
          absl::StrFormat("Tokenize: tokenizer %s, vocab %d, %d ids for %d bytes", resp.tokenizer(),
                          resp.vocab_size(), resp.ids_size(), req.text().size());
    } else {
      for (int i = 0; i < resp.ids_size() && bad.empty(); ++i) {
        if (resp.ids(i) != static_cast<uint8_t>(req.text()[i])) {
          bad = absl::StrFormat("Tokenize: id %d is %d, byte is %d", i, resp.ids(i),
                                static_cast<uint8_t>(req.text()[i]));
        }
      }
    }
  }
  std::initializer_list<StatusCode> expected = {StatusCode::NOT_FOUND,
                                                StatusCode::RESOURCE_EXHAUSTED};
  Finish(call, st, bad, refusal_expected ? expected : std::initializer_list<StatusCode>{});
  if (st.ok() && bad.empty() && ids != nullptr) ids->assign(resp.ids().begin(), resp.ids().end());
  return st.ok() && bad.empty();
}

// --- UploadDataset: small and medium uploads, chunked at <= 1 MiB, and
// re-uploads of earlier bytes under new names (reported as deduplicated).
void Client::Upload() {
  DatasetInfo d;
  d.name = absl::StrFormat("%s-c%d-%d", shared_->run_tag, index_, next_dataset_++);
  bool reupload = false;
  if (!datasets_.empty() && Chance(0.12)) {
    const DatasetInfo& old = PickOf(datasets_);
    d.seed = old.seed;
    d.size = old.size;
    d.tokens = old.tokens;
    reupload = true;
  } else {
    d.seed = rng_.Next() ^ shared_->content_salt;
    d.tokens = Chance(0.1);
    if (Chance(0.08) && shared_->medium_bytes.load() < shared_->medium_budget_bytes) {
      d.size = 256 * 1024 + rng_.Uniform(3 * kMiB - 256 * 1024);
      shared_->medium_bytes += static_cast<int64_t>(d.size);
    } else {
      d.size = 2048 + rng_.Uniform(14 * 1024);
    }
    if (d.tokens) d.size -= d.size % 4;
  }
  const std::string bytes = d.Bytes();
  d.sha = Sha256Hex(bytes);
  // Chunks of 64 KiB .. 1 MiB; large uploads usually in whole MiB.
  const size_t chunk = Chance(0.5) ? kMiB : 64 * 1024 + rng_.Uniform(kMiB - 64 * 1024 + 1);

  Call call(this, kUploadDataset, kUploadDeadlineS);
  v1::UploadDatasetResponse resp;
  auto writer = stub_->UploadDataset(&call.ctx, &resp);
  v1::UploadDatasetRequest header;
  header.mutable_header()->set_name(d.name);
  header.mutable_header()->set_kind(d.tokens ? v1::DATASET_KIND_TOKENS_INT32
                                             : v1::DATASET_KIND_TEXT);
  header.mutable_header()->set_size_bytes(static_cast<int64_t>(bytes.size()));
  header.mutable_header()->set_project(WriteProject());
  if (Chance(0.5)) header.mutable_header()->set_sha256(d.sha);
  bool open = writer->Write(header);
  for (size_t off = 0; open && off < bytes.size(); off += chunk) {
    v1::UploadDatasetRequest part;
    part.set_chunk(bytes.substr(off, chunk));
    open = writer->Write(part);
  }
  if (open) writer->WritesDone();
  const grpc::Status st = writer->Finish();
  std::string bad;
  if (st.ok()) {
    const v1::Dataset& got = resp.dataset();
    if (got.name() != d.name || got.sha256() != d.sha ||
        got.size_bytes() != static_cast<int64_t>(bytes.size())) {
      bad = absl::StrFormat("UploadDataset %s: got name %s sha %s size %d", d.name, got.name(),
                            got.sha256().substr(0, 12), got.size_bytes());
    } else if (reupload && !resp.deduplicated()) {
      bad = "re-upload of stored bytes as " + d.name + " not reported as deduplicated";
    } else if (!reupload && resp.deduplicated()) {
      bad = "fresh random bytes of " + d.name + " reported as deduplicated";
    }
  }
  Finish(call, st, bad, {});
  if (st.ok() && bad.empty()) {
    datasets_.push_back(d);
    last_dataset_ = d.name;
    if (user_ != nullptr) shared_->NoteDataset(user_->write, d.name);
  }
}

// --- ListDatasets: newest first, and what this client uploaded is there;
// with --projects, the client's project's datasets and no other's.
void Client::ListDatasets() {
  Call call(this, kListDatasets, kUnaryDeadlineS);
  v1::ListDatasetsRequest req;
  req.set_project(WriteProject());
  v1::ListDatasetsResponse resp;
  const grpc::Status st = stub_->ListDatasets(&call.ctx, req, &resp);
  std::string bad;
  if (st.ok()) {
    bool found = last_dataset_.empty();
    for (int i = 0; i < resp.datasets_size(); ++i) {
      if (i > 0 && resp.datasets(i).id() >= resp.datasets(i - 1).id()) {
        bad = "ListDatasets is not newest first";
      }
      if (user_ != nullptr && resp.datasets(i).project() != req.project()) {
        ++shared_->cross_project_ok;
        bad = absl::StrFormat("ListDatasets of %s listed %s of project %s", req.project(),
                              resp.datasets(i).name(), resp.datasets(i).project());
      }
      found = found || resp.datasets(i).name() == last_dataset_;
    }
    if (!found) bad = "ListDatasets misses " + last_dataset_;
  }
  Finish(call, st, bad, {});
}

// --- ExportCoefficients: an evaluation window of a succeeded job (its
// hash from Tokenize, as a user would compute it) must be cached; random
// hashes, the dense twin and unknown models are NOT_FOUND.
void Client::Export() {
  std::vector<JobInfo*> done;
  for (JobInfo& j : jobs_) {
    if (j.state == v1::JOB_STATE_SUCCEEDED) done.push_back(&j);
  }
  v1::ExportCoefficientsRequest req;
  const uint64_t mode = rng_.Uniform(100);
  int64_t window = 0;
  if (mode < 65 && !done.empty()) {
    JobInfo& job = *done[rng_.Uniform(done.size())];
    if (job.hashes.empty() && (Done() || !WindowHashes(job) || Done())) return;
    req.set_model(job.models[rng_.Uniform(job.models.size())]);
    req.set_window_hash(PickOf(job.hashes));
    if (Chance(0.5)) req.set_dtype("float32");
    window = job.window;
  } else {
    static const char* kOther[] = {"fg-a", "fg-b", "dense", "no-such-model"};
    req.set_model(kOther[rng_.Uniform(4)]);
    req.set_window_hash(Sha256Hex(absl::StrCat("random window ", rng_.Next())));
  }
  req.set_project(WriteProject());
  Call call(this, kExportCoefficients, kExportDeadlineS);
  auto reader = stub_->ExportCoefficients(&call.ctx, req);
  v1::ExportCoefficientsResponse msg;
  std::string bad;
  int64_t total = -1, got = 0;
  while (reader->Read(&msg)) {
    call.FirstMessage();
    if (msg.has_header()) {
      const v1::CoefficientsHeader& h = msg.header();
      if (total >= 0) bad = "ExportCoefficients sent a second header";
      total = h.total_bytes();
      if (h.window_length() != window || h.sites_size() != 4 ||
          h.total_bytes() != window * shared_->coeff_bytes_per_token) {
        bad = absl::StrFormat("ExportCoefficients header: T %d, %d sites, %d bytes (want T %d)",
                              h.window_length(), h.sites_size(), h.total_bytes(), window);
      }
      const std::string wrong = shared_->CheckWeights(req.model(), h.weights_sha256(), true);
      if (!wrong.empty()) bad = "ExportCoefficients header: " + wrong;
    } else {
      if (total < 0) bad = "ExportCoefficients sent a chunk before the header";
      if (msg.chunk().size() > static_cast<size_t>(kMiB)) bad = "export chunk over 1 MiB";
      got += static_cast<int64_t>(msg.chunk().size());
    }
  }
  const grpc::Status st = reader->Finish();
  if (st.ok() && window == 0) bad = "ExportCoefficients of a random window answered OK";
  if (st.ok() && bad.empty() && got != total) {
    bad = absl::StrFormat("ExportCoefficients: %d bytes after a header of %d", got, total);
  }
  if (!st.ok() && window > 0 && st.error_code() == StatusCode::NOT_FOUND) {
    bad = "window of a succeeded job not in the cache: " + st.error_message();
  }
  Finish(call, st, bad,
         window > 0 ? std::initializer_list<StatusCode>{}
                    : std::initializer_list<StatusCode>{StatusCode::NOT_FOUND});
}

// The hashes of `job`'s evaluation windows: the ids from Tokenize (text)
// or the uploaded ids (tokens). False when Tokenize failed.
bool Client::WindowHashes(JobInfo& job) {
  std::vector<int32_t> ids;
  const size_t need = static_cast<size_t>(job.window * job.eval_windows);
  if (job.dataset >= 0 && datasets_[job.dataset].tokens) {
    const std::string bytes = datasets_[job.dataset].Bytes();
    for (size_t i = 0; i < need; ++i) ids.push_back(static_cast<uint8_t>(bytes[4 * i]));
  } else {
    const std::string text = job.dataset >= 0 ? datasets_[job.dataset].Bytes() : shared_->eval_text;
    v1::TokenizeRequest req;
    req.set_model(job.models[0]);
    // Byte-level: the first `need` ids are the ids of the first `need` bytes.
    req.set_text(text.substr(0, need));
    if (!TokenizeCall(req, false, &ids)) return false;
  }
  for (int64_t w = 0; w < job.eval_windows; ++w) {
    job.hashes.push_back(WindowHash(ids, w * job.window, job.window));
  }
  return true;
}

}  // namespace fca::soak
