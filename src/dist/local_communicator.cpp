// local_communicator.cpp: the size-1 communicator used when ztrain runs without an MPI
// launcher. Collectives short-circuit (a copy where input and output differ) and still
// count calls and bytes, so the serial path runs the parallel code and reports the same
// counters (with zero bus bytes). Sends to self are buffered in a mailbox so a receive
// posted before or after the matching send completes, as with MPI.
// It deliberately is not an emulation of several ranks in one process.
#include <chrono>
#include <cstring>
#include <deque>
#include <vector>

#include "core/error.h"
#include "dist/backends.h"

namespace zt::dist {
namespace {

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::string name, double timeout_s) : Communicator(std::move(name), timeout_s) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    if (color < 0) return nullptr;
    auto c = std::make_unique<LocalCommunicator>(name.empty() ? this->name() + "/split" : name, timeout());
    return c;
  }

 protected:
  Request start(const CommOp& op) override {
    auto req = make_request(op);
    if (op.kind == Collective::send) {
      send_self(op, req);
    } else if (op.kind == Collective::recv) {
      recv_self(op, req);
    } else {
      auto t0 = std::chrono::steady_clock::now();
      execute_single_rank(op);
      record(op, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      complete_request(*req);
    }
    return Request(req);
  }

 private:
  struct Message {
    int tag;
    std::vector<char> data;
  };
  struct PendingRecv {
    CommOp op;
    std::shared_ptr<detail::RequestState> req;
  };

  static std::string size_error(const CommOp& recv, size_t sent) {
    return str_cat("recv of ", recv.count, " bytes (tag ", recv.tag, ") matched a send of ", sent,
                   " bytes; a receive must name the exact size sent");
  }

  void send_self(const CommOp& op, const std::shared_ptr<detail::RequestState>& req) {
    const char* src = static_cast<const char*>(op.in);
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if (it->op.tag != op.tag) continue;
      if (it->op.count == op.count) {
        if (op.count) std::memcpy(it->op.out, src, op.count);
        record(it->op, 0);
        complete_request(*it->req);
      } else {
        complete_request(*it->req, size_error(it->op, op.count));
      }
      pending_.erase(it);
      record(op, 0);
      complete_request(*req);
      return;
    }
    // Buffered, like MPI's eager protocol: the send completes at once.
    mailbox_.push_back({op.tag, std::vector<char>(src, src + op.count)});
    record(op, 0);
    complete_request(*req);
  }

  void recv_self(const CommOp& op, const std::shared_ptr<detail::RequestState>& req) {
    for (auto it = mailbox_.begin(); it != mailbox_.end(); ++it) {
      if (it->tag != op.tag) continue;
      if (it->data.size() == op.count) {
        if (op.count) std::memcpy(op.out, it->data.data(), op.count);
        record(op, 0);
        complete_request(*req);
      } else {
        complete_request(*req, size_error(op, it->data.size()));
      }
      mailbox_.erase(it);
      return;
    }
    request_set_cannot_block(*req);
    pending_.push_back({op, req});
  }

  std::deque<Message> mailbox_;
  std::deque<PendingRecv> pending_;
};

}  // namespace

std::unique_ptr<Communicator> make_local_world(double timeout_s) {
  return std::make_unique<LocalCommunicator>("world", timeout_s);
}

}  // namespace zt::dist
