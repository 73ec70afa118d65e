// mpi_progress.h: internal to src/dist (needs <mpi.h>). A table, in POSIX shared memory, of
// how many collectives each rank of a communicator has entered and when it last polled for
// one, so a rank that times out can name the ranks holding a collective up even when they are
// stopped, hung in computation or stuck: reading the table needs nothing from them (unlike any
// MPI call, or an MPI window without shared memory, which would need the target's progress).
// Ranks on the rank-0 host of the communicator share the table; ranks on other hosts are
// reported as unknown. Creating it is collective (a broadcast and two barriers); freeing is
// local, so a failing rank never blocks in it. The segment is unlinked as soon as every local
// rank has mapped it, so nothing is left in /dev/shm even after kill -9.
#pragma once
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace zt::dist {

class ProgressTable {
 public:
  // Collective over comm. Never throws: without shared memory the table is simply absent.
  ProgressTable(MPI_Comm comm, int rank, int size);
  ~ProgressTable();
  ProgressTable(const ProgressTable&) = delete;
  ProgressTable& operator=(const ProgressTable&) = delete;
  // This rank has entered its n-th collective on the communicator (1-based; the same n on
  // every rank, as all submit the same sequence).
  void entered(uint64_t n);
  // This rank is waiting for its collective and polled just now (a stopped rank stops beating).
  void heartbeat();
  // The ranks (as world ranks) holding up collective n, e.g. "rank 1 has not arrived (it has
  // entered 11 collectives here, this is #12)" or "rank 1 entered it but has not polled for 7
  // s (stopped?)"; what is unknown says so.
  std::string describe_missing(uint64_t n) const;

 private:
  // One cache line per rank: each rank writes its own slot while it polls, and slots sharing a
  // line would bounce it between the polling ranks of a host.
  struct alignas(64) Slot {
    std::atomic<uint64_t> entered;
    std::atomic<int64_t> beat_ns;  // CLOCK_MONOTONIC, shared by the processes of a host
  };
  static constexpr uint64_t kAbsent = ~uint64_t(0);  // a rank that never mapped the table
  int rank_ = 0, size_ = 1;
  std::vector<int> world_rank_;  // comm rank -> world rank, for messages
  Slot* slots_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace zt::dist
