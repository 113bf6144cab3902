#include "rlparity/dist/job.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "dist/job_transport.hpp"
#include "rlparity/util/exit_codes.hpp"
#include "rlparity/util/interrupt.hpp"

namespace rlp {
namespace {

// Every collective carries a status first, so that a failed rank's fail() matches whichever
// collective the others are in: ok, failed (its own error), or stopped (because another rank failed).
enum Status : char { kOk = 0, kFailed = 1, kStopped = 2 };
constexpr std::size_t kHeader = 1 + sizeof(int32_t);

std::string encode(Status status, int exit_code, const std::string& payload) {
  std::string s(kHeader, '\0');
  s[0] = static_cast<char>(status);
  const auto code = static_cast<int32_t>(exit_code);
  std::memcpy(s.data() + 1, &code, sizeof code);
  return s + payload;
}

// Thrown on a rank whose step stops because another rank failed.
struct StoppedByOtherRank {};

struct Failure {
  Status status = kFailed;
  int exit_code = kExitError;
  std::string message;
};

// The current exception as a failure of this rank, with the exit code the CLI would give it alone.
Failure current_failure() {
  try {
    throw;
  } catch (const StoppedByOtherRank&) {
    return {kStopped, kExitError, "stopped: another rank failed"};
  } catch (const JobFailure& e) {
    return {kFailed, e.exit_code(), e.what()};
  } catch (const Error& e) {
    const int sig = interrupt_signal();
    return {kFailed, sig != 0 ? exit_code_for_signal(sig) : kExitError, e.what()};
  } catch (const std::exception& e) {
    return {kFailed, kExitInternal, fmt::format("internal error: {}", e.what())};
  }
}

}  // namespace

Job& Job::current() {
  static Job job(make_mpi_transport());
  return job;
}

Job::Job(std::unique_ptr<JobTransport> transport) : transport_(std::move(transport)) {
  if (!transport_) return;
  rank_ = transport_->rank();
  size_ = transport_->size();
  local_rank_ = transport_->local_rank();
  local_size_ = transport_->local_size();
}

Job::~Job() = default;

int Job::rank() const { return rank_; }
int Job::size() const { return size_; }
int Job::local_rank() const { return local_rank_; }
int Job::local_size() const { return local_size_; }

std::vector<std::string> Job::exchange(bool failed, int exit_code, const std::string& payload) {
  // `failed` with an exit code of -1 marks a rank stopped by another's failure (run_step).
  const Status status = !failed ? kOk : exit_code < 0 ? kStopped : kFailed;
  std::vector<std::string> parts = transport_->all_gather(encode(status, exit_code, payload));
  // The reason is the lowest rank that failed on its own; a stopped rank only follows it.
  for (const Status wanted : {kFailed, kStopped}) {
    for (const std::string& p : parts) {
      if (p.size() < kHeader)
        throw JobFailure("internal error: a rank sent a malformed message", kExitInternal);
      if (static_cast<Status>(p[0]) != wanted) continue;
      int32_t code = 0;
      std::memcpy(&code, p.data() + 1, sizeof code);
      throw JobFailure(p.substr(kHeader), code < 0 ? kExitError : code);
    }
  }
  for (std::string& p : parts) p.erase(0, kHeader);
  return parts;
}

std::vector<std::string> Job::all_gather(const std::string& mine) {
  if (!transport_) return {mine};
  return exchange(false, 0, mine);
}

void Job::run_step(const std::function<void(const Report&)>& work, int64_t total,
                   const std::function<void(int64_t, int64_t)>& progress) {
  if (!transport_) {
    work([&](int64_t n) {
      if (progress) progress(n, total);
    });
    return;
  }
  std::vector<int64_t> done(static_cast<std::size_t>(size_), 0);
  int finished = 0;           // rank 0: other ranks whose work ended (done or failed)
  bool other_failed = false;  // rank 0: a failed note arrived; the others are told to stop
  auto stop_others = [&] {
    if (other_failed) return;
    other_failed = true;
    for (int r = 1; r < size_; ++r) transport_->note_to(r, JobNote::stop, 0);
  };
  // Rank 0 reads the others' notes; the others read rank 0's stop.
  auto drain = [&] {
    while (const auto note = transport_->poll_note()) {
      if (note->kind == JobNote::progress) {
        done[static_cast<std::size_t>(note->from)] = note->value;
      } else if (note->kind == JobNote::stop) {
        other_failed = true;
      } else {
        ++finished;
        if (note->kind == JobNote::failed) stop_others();
      }
    }
  };
  int64_t shown = -1;
  auto show = [&] {
    int64_t sum = 0;
    for (const int64_t d : done) sum += d;
    if (!progress || sum == shown) return;
    shown = sum;
    progress(sum, total);
  };

  Failure failure;
  bool failed = false;
  try {
    work([&](int64_t n) {
      drain();
      if (other_failed) throw StoppedByOtherRank{};
      if (rank_ == 0) {
        done[0] = n;
        show();
      } else {
        transport_->note_to(0, JobNote::progress, n);
      }
    });
  } catch (...) {
    failure = current_failure();
    failed = true;
  }
  if (rank_ != 0) {
    transport_->note_to(0, failed ? JobNote::failed : JobNote::step_done, 0);
  } else {
    if (failed) stop_others();
    try {
      while (finished < size_ - 1) {
        const int before = finished;
        drain();
        show();
        if (finished == before) {
          check_interrupted();
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
    } catch (...) {
      if (!failed) failure = current_failure();
      failed = true;
      stop_others();
    }
  }
  if (failed && failure.status == kStopped) {
    exchange(true, -1, failure.message);
    return;
  }
  exchange(failed, failure.exit_code,
           failed ? fmt::format("rank {} of {}: {}", rank_, size_, failure.message) : "");
}

void Job::finish() {
  if (transport_) exchange(false, 0, "");
}

JobFailure Job::fail(const std::string& message, int exit_code) {
  if (!transport_) return JobFailure(message, exit_code);
  const std::string m = fmt::format("rank {} of {}: {}", rank_, size_, message);
  // Rank 0 may be waiting for this rank's step to end (run_step); this note ends its wait.
  if (rank_ != 0) transport_->note_to(0, JobNote::failed, 0);
  try {
    exchange(true, exit_code, m);
  } catch (const JobFailure& f) {
    return f;
  }
  return JobFailure(m, exit_code);
}

void Job::shutdown() {
  if (transport_) transport_->shutdown();
}

}  // namespace rlp
