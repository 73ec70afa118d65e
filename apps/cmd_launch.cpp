// cmd_launch.cpp: `ztrain launch`, the mpirun launcher and, with --max_restarts or --nnodes,
// the elastic agent (torchrun's flag names). Without them it execs mpirun and is gone. As an
// agent it stays: it runs mpirun as a child (in its own process group), turns SIGTERM / SIGINT /
// SIGUSR1 into SIGUSR1 for it (the ranks save and exit 0: graceful preemption), and when the job fails (a rank died, a
// host went away: OpenMPI then ends every rank) it starts it again from the newest checkpoint, up to --max_restarts
// times. With a hostfile it first asks every host to run `true` through mpirun's own launch path; the hosts that
// answer, at least the --nnodes minimum, run the next attempt, and the gradient accumulation is recomputed so the
// global batch stays the same (ranks' shards of model and optimizer state are resharded by the checkpoint reader). The
// ranks see TORCHELASTIC_RESTART_COUNT / TORCHELASTIC_MAX_RESTARTS as under torchrun.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "checkpoint/flash_snapshot.h"
#include "checkpoint/run_folder.h"
#include "commands.h"
#include "core/error.h"
#include "core/file_io.h"
#include "flags.h"

namespace zt::app {
namespace {
namespace fs = std::filesystem;

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string self_exe() {
  std::vector<char> p(4096);
  ssize_t n = readlink("/proc/self/exe", p.data(), p.size() - 1);
  ZT_CHECK(n > 0, "launch: cannot find this program's path (/proc/self/exe)");
  return std::string(p.data(), size_t(n));
}

// The value of --name in a command (either "--name v" or "--name=v"); "" when absent.
std::string flag_value(const Args& cmd, const std::string& name) {
  for (size_t i = 0; i < cmd.size(); ++i) {
    if (cmd[i] == "--" + name && i + 1 < cmd.size()) return cmd[i + 1];
    if (cmd[i].rfind("--" + name + "=", 0) == 0) return cmd[i].substr(name.size() + 3);
  }
  return "";
}

// The command without --name (and its value when it takes one).
Args drop_flag(const Args& cmd, const std::string& name, bool has_value) {
  Args out;
  for (size_t i = 0; i < cmd.size(); ++i) {
    if (cmd[i] == "--" + name) {
      if (has_value) ++i;
      continue;
    }
    if (cmd[i].rfind("--" + name + "=", 0) == 0) continue;
    out.push_back(cmd[i]);
  }
  return out;
}

int int_flag(const Args& cmd, const std::string& name, int def) {
  const std::string v = flag_value(cmd, name);
  if (v.empty()) return def;
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  ZT_CHECK(end && *end == 0 && x > 0, "launch: --", name, " ", v, " in the command is not a positive integer");
  return int(x);
}

struct Host {
  std::string name;
  int slots = 0;  // 0: not given
};

// OpenMPI hostfile lines: "host [slots=N] ...", # comments.
std::vector<Host> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  ZT_CHECK(in.good(), "launch: cannot read --hostfile ", path);
  std::vector<Host> hosts;
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream ls(line);
    Host h;
    if (!(ls >> h.name)) continue;
    for (std::string w; ls >> w;)
      if (w.rfind("slots=", 0) == 0) h.slots = std::atoi(w.c_str() + 6);
    hosts.push_back(h);
  }
  ZT_CHECK(!hosts.empty(), "launch: --hostfile ", path, " names no host");
  return hosts;
}

// A complete checkpoint-N folder in the run's output folder (the trainer's "latest" finds it).
// Something a restart can resume from: a checkpoint-N folder (a cheap scan; the trainer verifies
// it), or with --flash_checkpoint this run's complete snapshot of rank 0 in shared memory (a job
// that failed before its first persist sealed a folder).
bool has_checkpoint(const std::string& output_dir, bool flash) {
  std::error_code ec;
  if (output_dir.empty() || !fs::is_directory(output_dir, ec)) return false;
  if (flash) {
    const std::string run_id = run_record_read(output_dir).run_id;
    if (!run_id.empty() && FlashSnapshot::complete_step(FlashSnapshot::path_for(output_dir, run_id, 0)) >= 0) return true;
  }
  for (const auto& e : fs::directory_iterator(output_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("checkpoint-", 0) == 0 && n.find('.') == std::string::npos) return true;
  }
  return false;
}

std::atomic<int> g_signal{0};
std::atomic<pid_t> g_child{0};
// SIGTERM / SIGINT / SIGUSR1 reach the job as SIGUSR1: Open MPI's mpirun forwards SIGUSR1 to
// every rank and waits for them (the ranks save and exit 0), while on SIGTERM or SIGINT it
// kills the ranks about a second later, too soon to save (docs/fault-tolerance.md). A second
// signal is forwarded the same way and makes the ranks exit at once.
void forward_signal(int sig) {
  g_signal = sig;
  if (pid_t c = g_child.load()) kill(c, SIGUSR1);
}

// Runs argv (with env set) as a child and waits; forwards termination signals to it.
// Returns the exit status (128 + signal when it was killed).
int run_child(const std::vector<std::string>& argv, double timeout_s = 0) {
  std::vector<char*> cargv;
  std::vector<std::string> copy = argv;
  for (auto& a : copy) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const pid_t pid = fork();
  ZT_CHECK(pid >= 0, "launch: fork failed (", std::strerror(errno), ")");
  if (pid == 0) {
    // Its own process group, so a terminal's Ctrl-C reaches the agent only (which turns it into
    // a graceful stop); and if the agent dies, mpirun gets SIGTERM and ends the job rather than
    // running on unwatched (a scheduler then restarts the agent, which resumes).
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() == 1) _exit(1);  // the agent died before prctl took effect
    execvp(cargv[0], cargv.data());
    std::fprintf(stderr, "ztrain: error: launch: cannot run %s (%s); install OpenMPI (apt-get install openmpi-bin)\n",
                 cargv[0], std::strerror(errno));
    _exit(127);
  }
  g_child = pid;
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, timeout_s > 0 ? WNOHANG : 0);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) break;
    if (timeout_s > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      g_child = 0;
      return 124;
    }
    if (timeout_s > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  g_child = 0;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct Launch {
  int nproc = 1;
  std::string mpirun_args;
  // The agent: when a rank fails, mpirun kills the others at once (Open MPI waits 1 s between its
  // SIGTERM and SIGKILL by default, odls_base_sigkill_timeout): a second less per restart, and
  // the survivors of a failed job have nothing to save.
  bool fast_abort = false;
  std::vector<std::pair<std::string, std::string>> env;

  // mpirun's argv for `command` on `hosts` (a hostfile written for them), or on this host.
  std::vector<std::string> argv(const Args& command, const std::string& hostfile, long cores) const {
    std::vector<std::string> a = {"mpirun"};
    if (hostfile.empty()) {
      a.insert(a.end(), {"-np", std::to_string(nproc)});
      if (nproc > cores) a.push_back("--oversubscribe");
    } else {
      a.insert(a.end(), {"--hostfile", hostfile, "--map-by", "ppr:" + std::to_string(nproc) + ":node"});
    }
    a.insert(a.end(), {"--bind-to", "none"});
    if (fast_abort) a.insert(a.end(), {"--mca", "odls_base_sigkill_timeout", "0"});
    for (auto& [k, v] : env)
      if (k.rfind("OMPI_", 0) != 0) a.insert(a.end(), {"-x", k});
    for (const char* k : {"ZT_COMM_TIMEOUT_S", "ZT_TEST_FAIL_AT", "TORCHELASTIC_RESTART_COUNT",
                          "ZT_TEST_SLOW_GEMM_RANK", "ZT_TEST_SLOW_LINK_RANK", "ZT_TEST_SLOW_RANK"})
      if (std::getenv(k)) a.insert(a.end(), {"-x", k});
    for (size_t b = mpirun_args.find_first_not_of(' '); b != std::string::npos;) {
      size_t e = std::min(mpirun_args.find(' ', b), mpirun_args.size());
      a.push_back(mpirun_args.substr(b, e - b));
      b = mpirun_args.find_first_not_of(' ', e);
    }
    a.insert(a.end(), command.begin(), command.end());
    return a;
  }
};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ' ';
    s += shell_quote(v[i]);
  }
  return s;
}

}  // namespace

int cmd_launch(const Args& all) {
  auto sep = std::find(all.begin(), all.end(), std::string("--"));
  Args args(all.begin(), sep), command(sep == all.end() ? sep : sep + 1, all.end());
  Launch L;
  std::string hostfile, master_addr, nnodes;
  int max_restarts = 0;
  bool dry_run = false, health_check = false;
  FlagSet f("launch");
  f.add("nproc_per_node", &L.nproc, "ranks per host (1)", range::closed(1, 4096));
  f.add("hostfile", &hostfile, "OpenMPI hostfile for several hosts (\"host slots=N\" lines); ranks = N per host");
  f.add("master_addr", &master_addr,
        "accepted for torchrun users and exported as ZT_MASTER_ADDR; mpirun's own "
        "wire-up needs no rendezvous address");
  f.add("mpirun_args", &L.mpirun_args, "extra arguments for mpirun, space-separated (e.g. \"--mca btl self,vader\")");
  f.add("max_restarts", &max_restarts,
        "elastic agent: restart a failed job from its newest checkpoint up to this many times (0)",
        range::closed(0, 1000000));
  f.add("nnodes", &nnodes,
        "MIN:MAX hosts (torchrun's form; or N): with --hostfile, a restart runs on the hosts that answer "
        "if there are at least MIN");
  f.add("dry_run", &dry_run, "print the mpirun command without running it");
  f.add("health_check", &health_check,
        "before the command (and each restart), run `ztrain health-check` on the same ranks and stop if it "
        "names a slow or broken rank");
  if (wants_help(args, f.help() + "\nusage: ztrain launch --nproc_per_node N [flags] -- <command> [its flags]\n"
                                  "e.g.   ztrain launch --nproc_per_node 2 -- train --model_config_path c.json ...\n"
                                  "OMP_NUM_THREADS is forwarded (default: cores / N per rank), ranks are not bound "
                                  "to cores (--bind-to none: ztrain's OpenMP threads place themselves), and "
                                  "--oversubscribe is added when N exceeds the cores. With --max_restarts or "
                                  "--nnodes, launch stays as an elastic agent (docs/fault-tolerance.md).\n"))
    return 0;
  f.parse(args);
  ZT_CHECK(!command.empty(),
           "launch: nothing to run; put the ztrain command after --, e.g. ztrain launch "
           "--nproc_per_node 2 -- train --model_config_path config.json ...");
  ZT_CHECK(command[0] != "launch", "launch: the command after -- cannot be launch itself");
  const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  std::vector<Host> hosts = hostfile.empty() ? std::vector<Host>{{"localhost", 0}} : read_hostfile(hostfile);
  int min_nodes = int(hosts.size()), max_nodes = int(hosts.size());
  if (!nnodes.empty()) {
    const size_t c = nnodes.find(':');
    min_nodes = std::atoi(nnodes.substr(0, c).c_str());
    max_nodes = c == std::string::npos ? min_nodes : std::atoi(nnodes.substr(c + 1).c_str());
    ZT_CHECK(min_nodes >= 1 && min_nodes <= max_nodes, "launch: --nnodes ", nnodes,
             " is not N or MIN:MAX with 1 <= MIN <= MAX");
    ZT_CHECK(int(hosts.size()) >= min_nodes, "launch: --nnodes ", nnodes, " needs at least ", min_nodes, " hosts but ",
             hostfile.empty() ? std::string("no --hostfile gives one host")
                              : "--hostfile names " + std::to_string(hosts.size()));
    if (int(hosts.size()) > max_nodes) hosts.resize(size_t(max_nodes));
  }
  const bool agent = max_restarts > 0 || !nnodes.empty();
  ZT_CHECK(!agent || command[0] == "train", "launch: --max_restarts / --nnodes restart `train` jobs; the command is ",
           command[0]);

  const char* omp = std::getenv("OMP_NUM_THREADS");
  L.env.push_back({"OMP_NUM_THREADS", omp && *omp ? omp : std::to_string(std::max(1L, cores / L.nproc))});
  if (geteuid() == 0) {
    // mpirun refuses to run as root (containers, CI) unless both are set.
    L.env.push_back({"OMPI_ALLOW_RUN_AS_ROOT", "1"});
    L.env.push_back({"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"});
  }
  if (!master_addr.empty()) L.env.push_back({"ZT_MASTER_ADDR", master_addr});
  Args cmd = command;
  cmd.insert(cmd.begin(), self_exe());

  auto print_line = [&](const std::vector<std::string>& argv) {
    std::string line;
    for (auto& [k, v] : L.env) line += k + "=" + shell_quote(v) + " ";
    std::printf("launch: %s\n", (line + join(argv)).c_str());
    std::fflush(stdout);
  };
  // --health_check: the same mpirun line running `ztrain health-check` (exit 1 names a rank).
  auto checked = [&](const std::string& hf) {
    if (!health_check) return 0;
    const std::vector<std::string> argv = L.argv({self_exe(), "health-check"}, hf, cores);
    print_line(argv);
    if (dry_run) return 0;
    const int rc = run_child(argv);
    if (rc != 0) std::printf("launch: the health check failed (exit %d); not starting the job\n", rc);
    std::fflush(stdout);
    return rc;
  };
  if (!agent) {
    for (auto& [k, v] : L.env) setenv(k.c_str(), v.c_str(), 1);
    if (const int rc = checked(hostfile)) return rc;
    const std::vector<std::string> argv = L.argv(cmd, hostfile, cores);
    print_line(argv);
    if (dry_run) return 0;
    std::vector<char*> cargv;
    std::vector<std::string> copy = argv;
    for (auto& a : copy) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execvp("mpirun", cargv.data());
    throw Error(str_cat("launch: cannot run mpirun (", std::strerror(errno),
                        "); install OpenMPI (apt-get install openmpi-bin) or put mpirun on PATH"));
  }

  // ---- The elastic agent.
  L.fast_abort = true;
  // The global batch the job was started with; restarts on fewer hosts keep it by raising
  // the gradient accumulation (refused when it does not divide).
  const int micro = int_flag(command, "per_device_train_batch_size", 8);
  const int accum0 = int_flag(command, "gradient_accumulation_steps", 1);
  const int model_ranks = int_flag(command, "tensor-model-parallel-size", 1) *
                          int_flag(command, "pipeline-model-parallel-size", 1) *
                          int_flag(command, "context-parallel-size", 1);
  const int world0 = L.nproc * int(hosts.size());
  ZT_CHECK(world0 % model_ranks == 0, "launch: ", world0,
           " ranks are not a multiple of tensor x pipeline x context = ", model_ranks);
  const int64_t global = int64_t(micro) * accum0 * (world0 / model_ranks);
  const std::string output_dir = flag_value(command, "output_dir");
  ZT_CHECK(!output_dir.empty(), "launch: the agent restarts from the run's checkpoints; give train an --output_dir");
  L.env.push_back({"TORCHELASTIC_MAX_RESTARTS", std::to_string(max_restarts)});
  for (auto& [k, v] : L.env) setenv(k.c_str(), v.c_str(), 1);
  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGTERM, SIGINT, SIGUSR1}) sigaction(s, &sa, nullptr);

  const std::string hosts_path = output_dir + ".launch-hosts";
  int rc = 0;
  for (int attempt = 0; attempt <= max_restarts; ++attempt) {
    Args run = cmd;
    std::string hf;
    int accum = accum0;
    if (attempt > 0) {
      // Which hosts answer? Each is asked to run `true` through mpirun (10 s at most).
      std::vector<Host> alive;
      if (hostfile.empty()) {
        alive = hosts;
      } else {
        for (const Host& h : hosts) {
          std::vector<std::string> probe = {"mpirun", "--host", h.name + ":1", "-np", "1"};
          for (size_t b = L.mpirun_args.find_first_not_of(' '); b != std::string::npos;) {
            size_t e = std::min(L.mpirun_args.find(' ', b), L.mpirun_args.size());
            probe.push_back(L.mpirun_args.substr(b, e - b));
            b = L.mpirun_args.find_first_not_of(' ', e);
          }
          probe.push_back("true");
          if (run_child(probe, 10.0) == 0) alive.push_back(h);
        }
      }
      if (int(alive.size()) < min_nodes) {
        std::printf("launch: %zu of %zu hosts answer, fewer than --nnodes minimum %d; giving up\n", alive.size(),
                    hosts.size(), min_nodes);
        return rc ? rc : 1;
      }
      const int dp = L.nproc * int(alive.size()) / model_ranks;
      if (global % (int64_t(micro) * dp) != 0) {
        std::printf(
            "launch: the global batch %lld does not split over %d data-parallel ranks of micro-batch %d; "
            "giving up\n",
            static_cast<long long>(global), dp, micro);
        return rc ? rc : 1;
      }
      accum = int(global / (int64_t(micro) * dp));
      if (!hostfile.empty()) {
        std::string hosts;
        for (const Host& h : alive) hosts += h.name + (h.slots ? " slots=" + std::to_string(h.slots) : "") + "\n";
        write_file_atomic(hosts_path, hosts);
        hf = hosts_path;
      }
      run = drop_flag(drop_flag(drop_flag(run, "resume_from_checkpoint", true), "overwrite_output_dir", false),
                      "gradient_accumulation_steps", true);
      run.insert(run.end(), {"--gradient_accumulation_steps", std::to_string(accum)});
      const bool flash = std::any_of(command.begin(), command.end(), [](const std::string& a) {
        return a == "--flash_checkpoint" || a == "--flash_checkpoint=true";
      });
      const bool saved = has_checkpoint(output_dir, flash);
      if (saved)
        run.insert(run.end(), {"--resume_from_checkpoint", "latest"});
      else
        run.push_back("--overwrite_output_dir");
      std::printf(
          "launch: restart %d of %d: %d ranks on %zu host(s), gradient accumulation %d (global batch %lld), "
          "%s\n",
          attempt, max_restarts, L.nproc * int(alive.size()), alive.size(), accum, static_cast<long long>(global),
          saved ? "resuming from the newest checkpoint" : "no checkpoint yet: from the start");
    } else if (!hostfile.empty()) {
      hf = hostfile;
    }
    setenv("TORCHELASTIC_RESTART_COUNT", std::to_string(attempt).c_str(), 1);
    if (const int hc = checked(hf)) return hc;
    const std::vector<std::string> argv = L.argv(run, hf, cores);
    print_line(argv);
    if (dry_run) return 0;
    rc = run_child(argv);
    if (rc == 0) return 0;
    if (g_signal) {  // preempted: the ranks saved (or were stopped twice); no restart
      std::printf("launch: stopped by signal %d; the job exited %d\n", g_signal.load(), rc);
      return rc;
    }
    std::printf("launch: the job failed (exit %d) at attempt %d\n", rc, attempt);
    std::fflush(stdout);
  }
  std::printf("launch: giving up after %d restart(s)\n", max_restarts);
  return rc;
}

}  // namespace zt::app
