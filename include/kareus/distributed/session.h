// SPDX-License-Identifier: Apache-2.0
// Where this process stands in an MPI job (`mpirun -np N kareus ...`): rank, size, host, and
// which GPUs of its node it owns. The same binary runs without mpirun as a single process and
// then never touches MPI.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace kareus::distributed {

// What the launcher told this process through its environment (Open MPI's
// OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}; PMIx's PMIX_RANK; PMI's PMI_RANK/PMI_SIZE).
struct Launch {
  bool launched = false;  // started by mpirun (or another PMI launcher), even with one rank
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // among the ranks of this node
  int local_size = 1;
};
Launch DetectLaunch();

// True when this build can join an MPI job (KAREUS_WITH_MPI and Open MPI found at build time).
bool BuiltWithMpi();

class Session {
 public:
  // Joins the MPI job when launched by mpirun (MPI_Init_thread, FUNNELED: only the main thread
  // calls MPI); otherwise a single-process session. EnvironmentError when mpirun started several
  // ranks of a build without MPI (they would all write the same store).
  static std::unique_ptr<Session> Open();
  // A session of one process that never touches MPI (tests, library callers).
  static std::unique_ptr<Session> Single();
  ~Session();  // rank 0 stops any rank still serving; every rank then calls MPI_Finalize
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  bool distributed() const { return mpi_; }  // under mpirun: the planner and executors run
  int rank() const { return launch_.rank; }
  int size() const { return launch_.size; }
  bool planner() const { return launch_.rank == 0; }
  const Launch& launch() const { return launch_; }
  const std::string& host() const { return host_; }
  // "rank 2 (host node07, pid 4242)": how errors name a rank.
  std::string Describe() const;

  // Rank 0: marks the other ranks as stopped (the planner stopped them in order).
  void MarkWorkersStopped() { workers_stopped_ = true; }

 private:
  Session() = default;
  Launch launch_;
  std::string host_;
  bool mpi_ = false;
  bool workers_stopped_ = false;
};

// The GPUs of its node a rank owns, for a backend on real GPUs: ranks of one node take
// consecutive groups of `group_gpus` devices by local rank (local rank L owns devices
// L*group_gpus .. (L+1)*group_gpus-1), so no GPU is ever measured by two ranks.
// EnvironmentError naming the rank when the node's ranks need more GPUs than it has.
// Launch one rank per group: mpirun -np NODES*(GPUS_PER_NODE/GROUP) --map-by ppr:K:node.
std::vector<int> OwnedGpus(const Launch& launch, int gpus_per_node, int group_gpus);

// The CUDA device ordinals a rank measures on (`--backend cuda --devices`). One process (no
// launcher, or a job of one rank): `node_devices` as given (empty: the backend's 0, 1, ...).
// Under mpirun: `node_devices` lists the GPUs of each node the ranks share (empty: 0, 1, 2, ...)
// and local rank L takes entries L*group_gpus .. (L+1)*group_gpus-1 of it, so no GPU is
// measured by two ranks; EnvironmentError naming the rank when the list is too short.
std::vector<int> RankDevices(const Launch& launch, const std::vector<int>& node_devices,
                             int group_gpus);

}  // namespace kareus::distributed
