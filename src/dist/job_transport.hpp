// How the ranks of a job talk (dist/job.hpp holds the protocol on top): one collective, an
// all-gather of bytes, and small notes between ranks (progress, step done, failed to rank 0; stop
// from rank 0) that never wait for the receiver to read them.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rlp {

struct JobNote {
  enum Kind : int64_t { progress = 1, step_done = 2, failed = 3, stop = 4 };
  int from = 0;
  int64_t kind = 0;
  int64_t value = 0;
};

class JobTransport {
 public:
  virtual ~JobTransport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual std::vector<std::string> all_gather(const std::string& mine) = 0;
  virtual void note_to(int rank, int64_t kind, int64_t value) = 0;
  virtual std::optional<JobNote> poll_note() = 0;  // the next note that has arrived, if any
  virtual void shutdown() = 0;
};

// The MPI transport when this build has MPI and the process was started by an MPI launcher, else
// null (one process).
std::unique_ptr<JobTransport> make_mpi_transport();

}  // namespace rlp
