// backends.h: internal to src/dist: the factories behind make_world(). Not for users of
// the communicator (they call make_world()).
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace zt::dist {

std::unique_ptr<Communicator> make_local_world(double timeout_s);
std::unique_ptr<Communicator> make_mpi_world(double timeout_s);

}  // namespace zt::dist
