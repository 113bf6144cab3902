// The MPI transport of a job (dist/job_transport.hpp): Open MPI from Debian, or any MPI-3 library.
// A build without MPI (RLPARITY_HAVE_MPI unset) runs every job as one process.
#include <cstdlib>
#include <string>

#include "dist/job_transport.hpp"
#include "rlparity/util/error.hpp"

#ifdef RLPARITY_HAVE_MPI
// The C API only: without these, mpi.h from C++ pulls in the deprecated C++ bindings (libmpi_cxx).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <array>
#include <climits>
#include <list>
#endif

namespace rlp {

#ifdef RLPARITY_HAVE_MPI
namespace {

// A launcher sets the rank in the environment: Open MPI's mpirun (OMPI_COMM_WORLD_*), PMIx and PMI
// launchers (srun --mpi=pmix, MPICH's hydra), Slurm's srun with more than one task. Without one,
// MPI_Init is not called at all: a plain `rlparity replay` never starts MPI's runtime.
bool started_by_launcher() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(var) != nullptr) return true;
  const char* tasks = std::getenv("SLURM_NTASKS");
  return std::getenv("SLURM_PROCID") != nullptr && tasks != nullptr && std::atoi(tasks) > 1;
}

constexpr int kNoteTag = 7;

class MpiTransport final : public JobTransport {
 public:
  MpiTransport() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);  // MPI calls: main thread only
    MPI_Comm_dup(MPI_COMM_WORLD, &world_);
    MPI_Comm_rank(world_, &rank_);
    MPI_Comm_size(world_, &size_);
    MPI_Comm_split_type(world_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_);
    MPI_Comm_rank(node_, &local_rank_);
    MPI_Comm_size(node_, &local_size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }

  std::vector<std::string> all_gather(const std::string& mine) override {
    const auto n = static_cast<std::size_t>(size_);
    std::vector<long long> sizes(n);
    const long long my_size = static_cast<long long>(mine.size());
    MPI_Allgather(&my_size, 1, MPI_LONG_LONG, sizes.data(), 1, MPI_LONG_LONG, world_);
    std::vector<std::string> parts(n);
    for (std::size_t r = 0; r < n; ++r) parts[r].resize(static_cast<std::size_t>(sizes[r]));
    // MPI counts are ints: rounds of at most `chunk` bytes a rank keep the sum of a round under 2^31.
    const long long chunk = std::max<long long>(1, (INT_MAX - 1) / size_);
    const long long longest = *std::max_element(sizes.begin(), sizes.end());
    std::vector<int> counts(n), displs(n);
    std::string round;
    for (long long at = 0; at < longest; at += chunk) {
      int total = 0;
      for (std::size_t r = 0; r < n; ++r) {
        counts[r] = static_cast<int>(std::clamp<long long>(sizes[r] - at, 0, chunk));
        displs[r] = total;
        total += counts[r];
      }
      round.resize(static_cast<std::size_t>(total));
      const int my_count = counts[static_cast<std::size_t>(rank_)];
      MPI_Allgatherv(my_count > 0 ? mine.data() + at : nullptr, my_count, MPI_BYTE, round.data(),
                     counts.data(), displs.data(), MPI_BYTE, world_);
      for (std::size_t r = 0; r < n; ++r)
        std::copy_n(round.data() + displs[r], counts[r], parts[r].data() + at);
    }
    return parts;
  }

  void note_to(int rank, int64_t kind, int64_t value) override {
    reap();
    Pending& p = pending_.emplace_back();
    p.message = {kind, value};
    MPI_Isend(p.message.data(), 2, MPI_INT64_T, rank, kNoteTag, world_, &p.request);
  }

  std::optional<JobNote> poll_note() override {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kNoteTag, world_, &flag, &st);
    if (!flag) return std::nullopt;
    std::array<int64_t, 2> m{};
    MPI_Recv(m.data(), 2, MPI_INT64_T, st.MPI_SOURCE, kNoteTag, world_, MPI_STATUS_IGNORE);
    return JobNote{st.MPI_SOURCE, m[0], m[1]};
  }

  void shutdown() override {
    if (finalized_) return;
    finalized_ = true;
    reap();
    // Notes nobody will read (a stop sent to a rank that had finished) must not hold MPI_Finalize.
    for (Pending& p : pending_) MPI_Request_free(&p.request);
    MPI_Comm_free(&node_);
    MPI_Comm_free(&world_);
    MPI_Finalize();
  }

 private:
  struct Pending {
    std::array<int64_t, 2> message{};
    MPI_Request request = MPI_REQUEST_NULL;
  };
  void reap() {
    pending_.remove_if([](Pending& p) {
      int done = 0;
      MPI_Test(&p.request, &done, MPI_STATUS_IGNORE);
      return done != 0;
    });
  }

  MPI_Comm world_ = MPI_COMM_NULL, node_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::list<Pending> pending_;  // a list: an Isend's buffer must not move
  bool finalized_ = false;
};

}  // namespace

std::unique_ptr<JobTransport> make_mpi_transport() {
  if (!started_by_launcher()) return nullptr;
  return std::make_unique<MpiTransport>();
}
#else
// Started by a launcher as one of several ranks, a build without MPI would replay everything in
// every rank and race to write the same file: refuse instead.
std::unique_ptr<JobTransport> make_mpi_transport() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && std::atoi(v) > 1)
      RLP_THROW_INPUT(
          "started as one of {} processes ({}={}), but this rlparity was built without MPI "
          "(install libopenmpi-dev and rebuild; docs/scale-out.md)",
          v, var, v);
  }
  return nullptr;
}
#endif

}  // namespace rlp
