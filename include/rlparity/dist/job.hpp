// The processes of one job: K ranks started by an MPI launcher (`mpirun -np K`, `srun`), or this
// process alone. A replay shards its sequences over the ranks (replay/sharding.hpp) and every rank
// gathers every rank's per-sequence results, so each statistic is computed from the same data in the
// global sequence order and the run file is bit-identical for any K (docs/scale-out.md).
//
// Collective calls (all_gather, run_step, finish, fail) are entered by every rank in the same order.
// Failure: a rank that fails says so at its next collective call (fail()), whichever collective the
// others are in (every collective has the same wire shape: a status, then a payload); every rank
// then throws JobFailure with the lowest failed rank's message and exit code. Rank 0 prints it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rlparity/util/error.hpp"

namespace rlp {

class JobTransport;

// A failure of some rank of the job, known to every rank (the message names the rank).
class JobFailure : public Error {
 public:
  JobFailure(const std::string& message, int exit_code) : Error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

class Job {
 public:
  // This process's job, set up on the first call: an MPI job when this build has MPI and the process
  // was started by a launcher (mpirun/mpiexec/srun set its rank in the environment), else one process.
  static Job& current();
  ~Job();

  int rank() const;
  int size() const;
  int local_rank() const;  // among the ranks on this node (which GPU a rank takes)
  int local_size() const;
  bool is_root() const { return rank() == 0; }
  bool distributed() const { return size() > 1; }

  // Every rank's bytes, in rank order, on every rank.
  std::vector<std::string> all_gather(const std::string& mine);

  // This rank's share of one step of the job: runs work(report), where report(n) says this rank has
  // done n of the job's `total` units; on rank 0, progress(done, total) sees the sum over the ranks as
  // it grows. Returns once every rank's work succeeded; when any failed, throws JobFailure on every
  // rank (one process: work's own exception propagates).
  using Report = std::function<void(int64_t units_done)>;
  void run_step(const std::function<void(const Report&)>& work, int64_t total,
                const std::function<void(int64_t done, int64_t total)>& progress = {});

  // The end of a command on every rank: returns when every rank succeeded, else throws JobFailure.
  void finish();
  // After `message` failed this rank: tells every rank and returns what each of them throws.
  JobFailure fail(const std::string& message, int exit_code);
  // Leaves MPI (before the process exits); a no-op for one process.
  void shutdown();

 private:
  explicit Job(std::unique_ptr<JobTransport> transport);
  std::vector<std::string> exchange(bool failed, int exit_code, const std::string& payload);

  std::unique_ptr<JobTransport> transport_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
};

}  // namespace rlp
