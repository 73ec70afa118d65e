// mpi_progress.cpp: see mpi_progress.h.
#include "dist/mpi_progress.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <time.h>

#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace zt::dist {
namespace {

// Rank 0's segment name and host name, broadcast to the others.
struct Announce {
  char name[64] = {};
  char host[256] = {};
};

}  // namespace

ProgressTable::ProgressTable(MPI_Comm comm, int rank, int size) : rank_(rank), size_(size), world_rank_(size) {
  MPI_Group g, wg;
  MPI_Comm_group(comm, &g);
  MPI_Comm_group(MPI_COMM_WORLD, &wg);
  std::vector<int> mine(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) mine[size_t(i)] = i;
  MPI_Group_translate_ranks(g, size, mine.data(), wg, world_rank_.data());
  MPI_Group_free(&g);
  MPI_Group_free(&wg);
  if (size <= 1) return;
  static std::atomic<int> serial{0};
  bytes_ = sizeof(Slot) * size_t(size);
  Announce a;
  ::gethostname(a.host, sizeof a.host - 1);
  int fd = -1;
  if (rank == 0) {
    std::snprintf(a.name, sizeof a.name, "/ztrain-progress-%d-%d", int(::getpid()), serial++);
    fd = ::shm_open(a.name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0 && ::ftruncate(fd, off_t(bytes_)) != 0) {
      ::shm_unlink(a.name);
      ::close(fd);
      fd = -1;
    }
    if (fd < 0) a.name[0] = 0;  // no table: messages say so
  }
  char my_host[256] = {};
  std::memcpy(my_host, a.host, sizeof my_host);
  MPI_Bcast(&a, sizeof a, MPI_BYTE, 0, comm);
  if (a.name[0] && rank != 0 && std::strcmp(a.host, my_host) == 0) fd = ::shm_open(a.name, O_RDWR, 0600);
  if (fd >= 0 && a.name[0]) {
    void* m = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m != MAP_FAILED) slots_ = static_cast<Slot*>(m);
  }
  if (fd >= 0) ::close(fd);
  // Rank 0 marks every slot absent before anyone attaches (the barrier orders it), then each
  // attached rank claims its slot; after the barrier nobody needs the name any more.
  if (rank == 0 && slots_)
    for (int i = 0; i < size; ++i) slots_[i].entered.store(kAbsent);
  MPI_Barrier(comm);
  if (slots_) {
    slots_[rank].entered.store(0);
    heartbeat();
  }
  MPI_Barrier(comm);
  if (rank == 0 && a.name[0]) ::shm_unlink(a.name);
}

ProgressTable::~ProgressTable() {
  if (slots_) ::munmap(slots_, bytes_);
}

namespace {
int64_t now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}
}  // namespace

void ProgressTable::entered(uint64_t n) {
  if (!slots_) return;
  slots_[rank_].entered.store(n, std::memory_order_relaxed);
  heartbeat();
}

void ProgressTable::heartbeat() {
  if (slots_) slots_[rank_].beat_ns.store(now_ns(), std::memory_order_relaxed);
}

std::string ProgressTable::describe_missing(uint64_t n) const {
  if (!slots_) return "which rank is missing is unknown (no shared-memory progress table)";
  std::string missing, unknown;
  const int64_t now = now_ns();
  auto add = [&](const std::string& s) { missing += (missing.empty() ? "" : "; ") + s; };
  for (int r = 0; r < size_; ++r) {
    const uint64_t v = slots_[r].entered.load(std::memory_order_relaxed);
    const double idle = double(now - slots_[r].beat_ns.load(std::memory_order_relaxed)) * 1e-9;
    const int w = world_rank_[size_t(r)];
    if (v == kAbsent)
      unknown += (unknown.empty() ? "" : ", ") + std::to_string(w);
    else if (v < n)
      add(str_cat("rank ", w, " has not arrived (it has entered ", v, " collectives here, this is #", n, ")"));
    else if (r != rank_ && idle > 1.0)  // waiting ranks poll at least every millisecond
      add(str_cat("rank ", w, " entered it but has not polled for ", int(idle), " s (stopped?)"));
  }
  if (missing.empty()) missing = "every rank on this host has entered it and is polling";
  if (!unknown.empty()) missing += "; ranks " + unknown + " are on other hosts (progress unknown)";
  return missing;
}

}  // namespace zt::dist
