// no_mpi.cpp: the MPI half of dist/communicator.h for a build without MPI (cmake
// -DZT_WITH_MPI=OFF: the aarch64 cross build of tests/cross/aarch64.sh, or a machine without
// OpenMPI). One process only: the local communicator works as always; asking for the MPI world
// (a launch under mpirun) is an error that says how to get a build with MPI.
#include "core/error.h"
#include "dist/communicator.h"

namespace zt::dist {

std::unique_ptr<Communicator> make_mpi_world(double) {
  ZT_CHECK(false, "this ztrain was built without MPI (ZT_WITH_MPI=OFF), so it runs one process only; "
                  "install libopenmpi-dev and build again for mpirun");
  return nullptr;
}

void set_hang_handler(HangHandler) {}

bool abort_job(const std::string&, bool) { return false; }

}  // namespace zt::dist
