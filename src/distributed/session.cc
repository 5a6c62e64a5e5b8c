// SPDX-License-Identifier: Apache-2.0
#include "kareus/distributed/session.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>

#include "distributed/link.h"
#include "distributed/protocol.h"
#include "kareus/common/error.h"

#ifdef KAREUS_HAVE_MPI
#include <mpi.h>
#endif

namespace kareus::distributed {
namespace {

// An integer from the environment, or `fallback` when unset; a malformed value is an
// EnvironmentError naming the variable.
int EnvInt(const char* name, int fallback, bool* found = nullptr) {
  const char* text = std::getenv(name);
  if (found != nullptr) *found = text != nullptr;
  if (text == nullptr) return fallback;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 0 || value > 1 << 24) {
    throw EnvironmentError(std::string(name) + " = " + text + ": not a rank count or index");
  }
  return static_cast<int>(value);
}

std::string HostName() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

}  // namespace

Launch DetectLaunch() {
  Launch launch;
  bool ompi = false, pmix = false, pmi = false;
  launch.size = EnvInt("OMPI_COMM_WORLD_SIZE", 1, &ompi);
  if (ompi) {
    launch.launched = true;
    launch.rank = EnvInt("OMPI_COMM_WORLD_RANK", 0);
    launch.local_rank = EnvInt("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    launch.local_size = EnvInt("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
    return launch;
  }
  const int pmix_rank = EnvInt("PMIX_RANK", 0, &pmix);
  const int pmi_rank = EnvInt("PMI_RANK", 0, &pmi);
  if (pmix || pmi) {
    launch.launched = true;
    launch.rank = pmix ? pmix_rank : pmi_rank;
    launch.size = EnvInt("PMI_SIZE", 0);  // 0: unknown until MPI says
    launch.local_rank = EnvInt("MPI_LOCALRANKID", 0);
    launch.local_size = EnvInt("MPI_LOCALNRANKS", 1);
  }
  return launch;
}

bool BuiltWithMpi() { return internal::HaveMpi(); }

std::unique_ptr<Session> Session::Single() {
  std::unique_ptr<Session> session(new Session());
  session->host_ = HostName();
  return session;
}

std::unique_ptr<Session> Session::Open() {
  std::unique_ptr<Session> session = Single();
  const Launch launch = DetectLaunch();
  if (!launch.launched) return session;
#ifdef KAREUS_HAVE_MPI
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    throw EnvironmentError("MPI_Init_thread failed (launched by mpirun with " +
                           std::to_string(launch.size) + " ranks)");
  }
  session->mpi_ = true;
  session->launch_ = launch;
  MPI_Comm_rank(MPI_COMM_WORLD, &session->launch_.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &session->launch_.size);
  if (provided < MPI_THREAD_FUNNELED) {
    // Rank 0 measures on a thread of its own that never calls MPI: FUNNELED is enough.
    throw EnvironmentError("the MPI library offers thread level " + std::to_string(provided) +
                           " below MPI_THREAD_FUNNELED");
  }
  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  if (MPI_Get_processor_name(name, &length) == MPI_SUCCESS) session->host_.assign(name, length);
#else
  if (launch.size > 1) {
    throw EnvironmentError("launched by mpirun with " + std::to_string(launch.size) +
                           " ranks, but this kareus was built without MPI (KAREUS_WITH_MPI=OFF "
                           "or libopenmpi-dev missing): every rank would write the same store; "
                           "rebuild with MPI or run one process");
  }
  session->launch_ = launch;
#endif
  return session;
}

Session::~Session() {
#ifdef KAREUS_HAVE_MPI
  if (!mpi_) return;
  if (planner() && !workers_stopped_ && size() > 1) {
    // The planner never started (an input error on rank 0): stop every rank, which sent its
    // ready message and waits, and drain until each says bye, so MPI_Finalize never hangs.
    try {
      for (int r = 1; r < size(); ++r) {
        MPI_Send(nullptr, 0, MPI_BYTE, r, internal::kStop, MPI_COMM_WORLD);
      }
      std::set<int> byes;
      internal::Backoff backoff;
      while (static_cast<int>(byes.size()) < size() - 1) {
        int flag = 0;
        MPI_Status status;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &status);
        if (!flag) {
          backoff.Wait();
          continue;
        }
        backoff.Reset();
        int count = 0;
        MPI_Get_count(&status, MPI_BYTE, &count);
        std::string body(static_cast<std::size_t>(count), '\0');
        MPI_Recv(body.data(), count, MPI_BYTE, status.MPI_SOURCE, status.MPI_TAG, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
        if (status.MPI_TAG == internal::kBye) byes.insert(status.MPI_SOURCE);
      }
    } catch (...) {
    }
  }
  MPI_Finalize();
#endif
}

std::string Session::Describe() const {
  return "rank " + std::to_string(rank()) + " (host " + host_ + ", pid " +
         std::to_string(static_cast<long long>(getpid())) + ")";
}

std::vector<int> OwnedGpus(const Launch& launch, int gpus_per_node, int group_gpus) {
  if (group_gpus < 1 || gpus_per_node < 1) {
    throw EnvironmentError("rank " + std::to_string(launch.rank) + ": a GPU group of " +
                           std::to_string(group_gpus) + " on a node of " +
                           std::to_string(gpus_per_node) + " GPUs");
  }
  const int needed = launch.local_size * group_gpus;
  if (needed > gpus_per_node) {
    throw EnvironmentError(
        "rank " + std::to_string(launch.rank) + " (local rank " +
        std::to_string(launch.local_rank) + " of " + std::to_string(launch.local_size) +
        " on its node) needs GPUs " + std::to_string(launch.local_rank * group_gpus) + ".." +
        std::to_string((launch.local_rank + 1) * group_gpus - 1) + ", but " +
        std::to_string(launch.local_size) + " ranks x " + std::to_string(group_gpus) +
        " GPUs exceed the node's " + std::to_string(gpus_per_node) + ": launch at most " +
        std::to_string(gpus_per_node / group_gpus) + " ranks per node (mpirun --map-by ppr:" +
        std::to_string(gpus_per_node / group_gpus) + ":node)");
  }
  std::vector<int> gpus;
  for (int g = 0; g < group_gpus; ++g) gpus.push_back(launch.local_rank * group_gpus + g);
  return gpus;
}

std::vector<int> RankDevices(const Launch& launch, const std::vector<int>& node_devices,
                             int group_gpus) {
  if (!launch.launched || launch.size == 1) return node_devices;
  if (node_devices.empty()) {
    return OwnedGpus(launch, launch.local_size * std::max(group_gpus, 1), group_gpus);
  }
  const int listed = static_cast<int>(node_devices.size());
  if (group_gpus < 1 || launch.local_size * group_gpus > listed) {
    throw EnvironmentError(
        "rank " + std::to_string(launch.rank) + " (local rank " +
        std::to_string(launch.local_rank) + " of " + std::to_string(launch.local_size) +
        " on its node): --devices lists " + std::to_string(listed) + " GPUs, but " +
        std::to_string(launch.local_size) + " ranks x " + std::to_string(group_gpus) +
        " GPUs per measurement need " + std::to_string(launch.local_size * group_gpus) +
        " (under mpirun --devices lists the node's GPUs, each rank takes its own " +
        std::to_string(group_gpus) + "): list more or launch fewer ranks per node");
  }
  return {node_devices.begin() + launch.local_rank * group_gpus,
          node_devices.begin() + (launch.local_rank + 1) * group_gpus};
}

}  // namespace kareus::distributed
