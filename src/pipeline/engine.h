// SPDX-License-Identifier: Apache-2.0
// The solver's internal header (not installed): the Engine behind pipeline::Solve and the parts
// it is made of, each defined in its own file of src/pipeline/:
//   model.cc        specs (convex hulls of the options' effective energy), node classes,
//                   the model's adjacency; EvaluateWith
//   max_flow.cc     the activity-on-arc network, its capacities, the backward pass (critical
//                   sub-DAG) and the warm-started incremental max-flow (minimum cuts)
//   descent.cc      the convex descent along the cuts (Run), the moves, recording the points
//   realization.cc  real options: makespan, energy, repair, slack refinement, chains, chain
//                   search, one-exchange local search
//   exact_search.cc the exact dynamic program / beam (ExactAt) and the neighbourhood search
//   checks.cc       input validation (FindInputError, CheckOptions, Options::Validate)
//   solver.cc       the public entry points (Solve, Evaluate, OptionsOf, ToString)
// See solver.cc for the method.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kareus/pareto/pareto.h"
#include "kareus/pipeline/solver.h"
#include "kareus/schedule/node_classes.h"
#include "kareus/schedule/schedule.h"

namespace kareus::pipeline::internal {

using schedule::Dag;
using schedule::DagEdge;
using schedule::Direction;
using schedule::Instruction;

constexpr double kInf = std::numeric_limits<double>::infinity();
// The exact dynamic program (ExactAt) runs at the fastest point with this budget (state
// comparisons); past its budget the same search runs as a beam within the same budget.
// Problems with at most kSmallOptions node-options (sum over nodes of their real front's size)
// search every other deadline too: all at once after the descent (ExactFrontier, within
// kFrontierBudget, counting candidates and comparisons), and where that runs out, each on its
// own with kSmallBudget (then not bounded per solve: 2 stages x 2 microbatches of 18 clocks
// exhausted 5 M at 737 of 750 deadlines, 11 s; a solve-wide budget bounded that but lost the
// GLPK property test's quality, 15-30 of 240 deadlines above 0.1 %). Measured: the GLPK test's
// 40 random DAGs need at most 55 M (fastest point included; every sampled deadline exact), the
// 2 x 2 case 29 M (0.86 s, against 11 s for its 750 searches). Where it runs out (3 stages x 3
// microbatches of ~7 options: > 500 M) the searches one by one still cost 10 s, and searching
// only some of those deadlines lost up to 0.14-0.28 % at others.
constexpr int64_t kFastestBudget = 5'000'000;
constexpr int64_t kSmallOptions = 160;
constexpr int64_t kSmallBudget = 5'000'000;
constexpr int64_t kFrontierBudget = 100'000'000;
// KeepUndominated's exact mode, where the staircase does not apply (more than two dimensions),
// keeps layers of at least this many candidates in a tree (KeepUndominatedByTree), smaller ones
// by the ordered sums.
constexpr std::size_t kTreeCandidates = 4096;
// ExactFrontier gives up at a layer of more candidates than this: 40 B each, and the tree's
// 2 x (leaves, a power of two) nodes of 8 B per dimension, with a few more arrays of 8 B per
// candidate: ~0.6 GB with three dimensions. The 2 x 2 case's largest layer has 1.4 M.
constexpr std::size_t kFrontierLayerCandidates = std::size_t{1} << 22;
// The one-exchange local search (Exchange) stops after this much work: a node visit of a whole-DAG
// pass counts 1, a node visit of a trial that follows only what changed (TrialRefine: a heap
// and the node's neighbours) kTrialVisitWork. Measured: before the trials followed what changed
// the same 40 M covered 2,442 trials at the 16 x 128 benchmark's fastest point (topological
// positions 1-276, +0.036 % energy against the reference solver's unbounded search); now the
// search ends on its own there (-0.0026 %, ~0.2 s) and at 8 x 256 (+0.0008 %).
constexpr int64_t kExchangeBudget = 40'000'000;
constexpr int64_t kTrialVisitWork = 4;
// The exact search (and its beam) runs on DAGs of at most this many nodes: on larger ones it
// never finished within its budget nor improved the plan in the benchmark's cases (8 x 64,
// 16 x 128: 0.2-1 s spent for nothing).
constexpr int kExactMaxNodes = 256;
// OptimizeChain's states per layer (an evenly spread subset beyond): at most kChainStates, and
// at most kChainWork / (the chain's options, summed over its instructions), but at least
// kChainStatesMin. Measured on the at-scale example's fastest point (bench/data, 8 chains of 256
// instructions with 31-84 options): 2,048 states cost 15.5 s for 0.0032 % less energy than the
// cap's ~285 (2.1 s). The benchmark cases (20 clocks) keep 409-2,048: their frontiers are the
// same as with 2,048 except the interleaved 16 x 128 x 2 case's fastest end (its chains of 512
// instructions keep 409; +0.004 % there, the fastest point 25 s -> 6.7 s).
constexpr std::size_t kChainStates = 2048;
constexpr std::size_t kChainStatesMin = 256;
constexpr std::size_t kChainWork = std::size_t{1} << 22;
// Realized points kept before the first dominance compaction (Engine::CompactPoints).
constexpr std::size_t kFirstCompaction = 4096;
// NeighborhoodSearch: the exact search's budget on each neighbourhood.
constexpr int64_t kNeighborhoodBudget = 300'000;

// Per node class (schedule::NodeClasses): the real options' effective-energy front and its convex
// hull.
struct Spec {
  // Pareto front over (time, effective energy): time ascending, energy strictly descending.
  std::vector<double> time;
  std::vector<double> eff;
  std::vector<int> option;  // the option behind each front entry
  // Lower convex hull: vertex k at time hull_time[k] with energy hull_eff[k] (fastest first);
  // slope[k] > 0 is the cost per second of shortening along segment k (between vertex k and
  // k+1), strictly decreasing in k.
  std::vector<double> hull_time;
  std::vector<double> hull_eff;
  std::vector<double> slope;
  std::vector<double> option_time;  // every option's real time
  std::vector<double> option_eff;   // every option's effective energy (gpus * (E - P t))

  int last_vertex() const { return static_cast<int>(hull_time.size()) - 1; }
  // The cheapest front entry whose time is <= d (d >= the fastest time - tolerance).
  int Fit(double d) const {
    const auto it = std::upper_bound(time.begin(), time.end(), d);
    return it == time.begin() ? 0 : static_cast<int>(it - time.begin()) - 1;
  }
  // Convex cost at duration d.
  double Cost(double d) const {
    if (d >= hull_time.back()) return hull_eff.back();
    if (d <= hull_time.front()) return hull_eff.front();
    const auto it = std::upper_bound(hull_time.begin(), hull_time.end(), d);
    const auto k = static_cast<std::size_t>(it - hull_time.begin()) - 1;
    return hull_eff[k] - slope[k] * (d - hull_time[k]);
  }
};

// `merge_s`: option times closer than this count as equal (the cheaper one is kept, at the
// faster time, for the convex model only; the real front keeps both).
Spec BuildSpec(const std::vector<Alternative>& options, int gpus, double p_static_w,
               double merge_s);

schedule::NodeClasses ClassesOf(const Problem& problem);

// The option list of node class `cls` (schedule::NodeClasses's layout).
const std::vector<Alternative>& ClassOptions(const Problem& problem,
                                             const schedule::NodeClasses& classes, int cls);

// Time (the longest path, schedule::StartTimes) and energy of `choice`.
Evaluation EvaluateWith(const Problem& problem, const Dag& dag, const std::vector<int>& choice,
                        double p_static_w);

double SecondsSince(std::chrono::steady_clock::time_point start);

// Compressed adjacency: the neighbours of v are [start[v], start[v+1]).
struct Adjacency {
  std::vector<int> start;
  std::vector<int> node;
  std::vector<double> lag;
};

// A state of OptimizeChain's dynamic program: the chain's prefix finishing at `finish`.
struct ChainState {
  double finish;
  double energy;
  int parent;  // index in the previous layer
  int option;  // front index of the prefix's last instruction
};

// The head of one option's candidate list in OptimizeChain's merge: state `state` of the
// previous layer followed by front entry `option`.
struct ChainHead {
  double finish;
  double energy;
  int state;
  int option;
};

// Exchange's trials (Engine::TrialRefine): a Refine fixpoint's arrays -- what a slack-filling
// pass over it computes: durations, latest finishes and starts, earliest starts and finishes --
// and the trial's, equal to the fixpoint's outside `touched` (the nodes a trial pass visited).
struct TrialState {
  std::vector<double> dur, lf, ls, es, fin;            // the fixpoint
  std::vector<double> t_dur, t_lf, t_ls, t_es, t_fin;  // the trial
  std::vector<int> touched;
  std::vector<char> is_touched;
  std::vector<char> queued;
  std::vector<int> heap;  // topological positions (a min-heap forwards, a max-heap backwards)
  int64_t visits = 0;     // nodes the last TrialRefine visited, over its passes
};

// Reusable buffers of the realization's const methods (one engine per solve, one thread): owned
// by the engine, named per use (FillForward and FillBackward never run nested, so they share).
struct Scratch {
  std::vector<double> real_finish;  // RealMakespan
  // FillForward reads fill_latest (latest finishes) and writes fill_earliest (earliest
  // starts); FillBackward the other way round, so that Refine's next pass reads them as they
  // are. fill_dur: each node's duration in the plan being filled.
  std::vector<double> fill_latest;
  std::vector<double> fill_earliest;
  std::vector<double> fill_finish;        // FillForward's finishes
  std::vector<double> fill_latest_start;  // FillBackward's latest starts
  std::vector<double> fill_dur;
  TrialState trial;                                   // Exchange
  std::vector<std::vector<ChainState>> chain_layers;  // OptimizeChain
  std::vector<ChainHead> chain_heap;                  // OptimizeChain
};

// RecordPoint's rounding of each node's convex duration (NaN: none yet): the front entry that
// fits it, its convex cost and the slower end of its hull segment.
struct Rounding {
  std::vector<double> duration;
  std::vector<int> fit;
  std::vector<double> cost;
  std::vector<double> cap;
};

// The convex descent's state between its steps (Engine::Run).
struct Descent {
  bool one_deadline = false;   // Options::deadline_s > 0: one deadline, not a frontier
  double t_min = 0.0;          // the fastest plan's real time
  double start_s = 0.0;        // the descent's starting makespan (the progress callback's)
  double makespan = 0.0;       // the convex durations' current makespan
  int64_t k_next = -1;         // the next deadline to realize (t_min + k unit); -1 when none
  bool deadline_done = false;  // deadline_s mode: its deadline is realized
  // T*: where shortening starts to cost more effective energy than it saves static energy (the
  // cut's value reaches the static power of all GPUs). Below T* the relaxation's total energy
  // falls with time; a deadline above T* is bounded by the relaxation at T*.
  bool t_star_seen = false;
  double t_star = 0.0;
  double t_star_energy = kInf;
  Status status = Status::kReachedMinimumTime;
  std::string message;
};

// ExactAt's search, prepared once per call: the order in which nodes are placed, the fastest
// heads and tails, and the completion bounds.
struct ExactSearch {
  static constexpr std::size_t kCells = 2049;  // the chain knapsack's duration grid
  static constexpr int kBoundSlices = 16;      // ExactFrontier's bound, per slice of time
  double deadline = 0.0;
  std::vector<std::size_t> first;  // per node: its first allowed front index
  std::vector<std::size_t> end;    // per node: one past its last allowed front index
  std::vector<double> head;        // per node: earliest start, every node at its fastest
  std::vector<double> tail;        // per node: longest path after it, at fastest
  std::vector<int> order;          // placement order (by head, topological)
  std::vector<int> last_use;       // per node: its last successor's position in order, or -1
  std::vector<int> chain_of;       // per node: its chain, or -1
  std::vector<int> index_in_chain;
  // Per chain, per suffix start, per grid cell: least effective energy of the suffix within
  // that many cells.
  std::vector<std::vector<std::vector<double>>> table;
  std::vector<double> loose_after;  // per position: the unchained nodes' bound after it
  double grid = 0.0;                // seconds per cell
};

// One layer of ExactAt's dynamic program: the states after placing the first k nodes of the
// order.
struct ExactLayer {
  std::vector<int> open;       // instructions whose finish a state records
  std::vector<double> finish;  // states x open
  std::vector<double> makespan;
  std::vector<double> energy;
  std::vector<int> parent;
  std::vector<int> option;  // front index of the placed instruction
};

// What placing node order[k] needs from the layer before it.
struct ExactStep {
  std::vector<int> source;                         // per slot of to.open: slot in from.open, -1: v
  std::vector<std::pair<int, double>> pred_slots;  // (slot in from.open, lag)
  // Per chain with an unplaced suffix: where its last placed finish comes from (-2: none placed
  // yet; -1: the placed node itself; else a slot of from.open).
  std::vector<std::pair<std::size_t, int>> chain_sources;
};

// What an exact search's completions must beat: the least energy of the known plans that finish
// by a given time, a staircase (times ascending, energies non-increasing). ExactAt's has one
// step at -inf (its one plan, whatever the makespan); ExactFrontier's holds every realized plan.
struct Incumbents {
  std::vector<double> time;
  std::vector<double> energy;
  double fastest = -kInf;  // no plan finishes sooner (ExactFrontier: every node at its fastest)
  // The least energy of a plan with time <= t (+inf when none).
  double At(double t) const {
    const auto it = std::upper_bound(time.begin(), time.end(), t);
    return it == time.begin() ? kInf : energy[static_cast<std::size_t>(it - time.begin()) - 1];
  }
};

// A state the next layer may keep.
struct ExactCandidate {
  double energy;
  int parent;
  int option;
  double makespan;
  double finish;  // of the placed instruction
  double low;     // lower bound of every completion's total energy
};

class Engine {
 public:
  Engine(const Problem& problem, const Options& options, Dag dag)
      : problem_(problem), options_(options), dag_(std::move(dag)) {}

  Result Run();

  // The parts (declared here, defined in the part files) are public: the tests of each part
  // call them through this internal header; the state stays private (EngineProbe: tests).
  // ---- model
  const Spec& SpecOf(int v) const { return specs_[static_cast<std::size_t>(class_[v])]; }
  // BuildSpecs, BuildAdjacency, BuildArcNetwork and InitTraceState, in that order.
  void BuildModel();
  void BuildSpecs();       // node classes, specs and the tolerances
  void BuildAdjacency();   // preds_/succs_ (activity-on-node, with lags) and their arcs
  void BuildArcNetwork();  // the activity-on-arc graph and its compressed adjacency
  void InitTraceState();   // capacities and the convex trace's per-event/arc/node state

  // ---- convex trace (activity-on-arc graph; event 2v = start of node v, 2v+1 = its end)
  // An arc's capacity interval (up_, lo_): kept for every activity arc by SetCapacity after
  // each move (flat arrays: the max-flow's BFS reads them for every arc it scans).
  void SetCapacity(int v);
  // The passes run over the DAG's nodes (activity-on-node: event 2v+1 has the one in-arc v,
  // event 2v the one out-arc v), not over the events.
  double ForwardPass() { return MakespanAfter(0.0, &scratch_base_, &scratch_rate_); }
  // latest_ and critical_ (needs earliest_); returns how many arcs' criticality changed.
  int64_t BackwardPass(double makespan);
  // Augments the flow to a maximum on the critical sub-DAG; false when it is unbounded (a
  // critical path cannot be shortened). Leaves side_ = the source side of a minimum cut.
  bool MaxFlow();
  void Scan(int u);  // the BFS step of MaxFlow: marks and queues what u reaches in the residual
  // Options::check_incremental_cuts: true when side_ is exactly what a fresh BFS from the
  // source reaches in the residual critical sub-DAG (the criteria of Scan).
  bool SideMatchesFreshBfs() const;
  // The longest path after moving `delta` along the cut: fills earliest_ and returns the
  // makespan, with the base length and net rate of one longest path.
  double MakespanAfter(double delta, double* base, double* rate);
  void ApplyMove(double delta);

  // ---- descent (Run's steps)
  // Realizes the deadlines reached `delta` into the current move.
  void RealizePassed(Descent& d, double delta);
  // The current cut's nodes (shorten_, lengthen_, rate_) and the largest move along it before
  // some node reaches a hull vertex; counts the critical arcs back across the cut that are not
  // lengthened (cut_back_fixed_).
  double SelectCut();
  // Shrinks `delta` until no path off the critical sub-DAG overtakes; the makespan reached.
  double ClampMove(double makespan, double& delta);
  // One cut and move; false when the descent ends (d.status says why).
  bool DescentStep(Descent& d);
  void FinishPoints(const Descent& d);  // T*'s bound and deadline_s mode's one point
  void FillResult(const Descent& d, std::chrono::steady_clock::time_point started, Result& result);

  // ---- realization (real time, front indices per node)
  // The earliest start of v: the latest of its predecessors' finishes (finish_of(p)) plus the
  // edges' lags.
  template <typename FinishOf>
  double EarliestStart(int v, FinishOf finish_of) const {
    double start = 0.0;
    for (int i = preds_.start[v]; i < preds_.start[v + 1]; ++i) {
      start = std::max(start, finish_of(preds_.node[i]) + preds_.lag[i]);
    }
    return start;
  }
  // The latest finish of v within `deadline`: the earliest of its successors' latest starts
  // (latest_start_of(w)) less the edges' lags.
  template <typename LatestStartOf>
  double LatestFinish(int v, double deadline, LatestStartOf latest_start_of) const {
    double finish = deadline;
    for (int i = succs_.start[v]; i < succs_.start[v + 1]; ++i) {
      finish = std::min(finish, latest_start_of(succs_.node[i]) - succs_.lag[i]);
    }
    return finish;
  }
  double RealMakespan(const std::vector<int>& front_choice) const;
  // EvaluateWith of the plan (front indices), bit for bit, without rebuilding the node classes;
  // `makespan` >= 0 is its RealMakespan, known.
  Evaluation EvaluateFront(const std::vector<int>& front_choice, double makespan = -1.0) const;
  double Energy(const std::vector<int>& front_choice) const;
  // The same with the plan's makespan known (RealMakespan's value).
  double Energy(const std::vector<int>& front_choice, double makespan) const;
  // The plan's effective energy (every node's, summed in node order: Energy's and EvaluateWith's
  // arithmetic).
  double Effective(const std::vector<int>& front_choice) const;
  // Each node's real duration in the plan.
  void Durations(const std::vector<int>& front_choice, std::vector<double>& dur) const;
  // The slack refill's decision at v (FillForward, FillBackward, TrialRefine): whether the entry
  // after `option` fits `window`, and the cheapest slower entry that fits it, taken into
  // choice[v] and dur[v] (true when v moved).
  // (Defined here: the refill's inner loops call them per node.)
  bool NextFits(int v, int option, double window) const {
    const Spec& spec = SpecOf(v);
    const auto next = static_cast<std::size_t>(option) + 1;
    return next < spec.time.size() && spec.time[next] <= window + time_tol_;
  }
  bool TakeSlower(int v, double window, std::vector<int>& choice, std::vector<double>& dur) const {
    // The next slower entry does not fit: no slower one does (times ascend).
    if (!NextFits(v, choice[v], window)) return false;
    const Spec& spec = SpecOf(v);
    const int j = spec.Fit(window + time_tol_);
    if (j <= choice[v] || spec.time[static_cast<std::size_t>(j)] > window + time_tol_) return false;
    choice[v] = j;
    dur[v] = spec.time[static_cast<std::size_t>(j)];
    return true;
  }
  void Repair(std::vector<int>& choice, double deadline) const;
  // `carried`: the other pass just ran on this choice and deadline (see Scratch).
  bool FillForward(std::vector<int>& choice, double deadline, const std::vector<double>* cap,
                   bool carried = false) const;
  bool FillBackward(std::vector<int>& choice, double deadline, const std::vector<double>* cap,
                    bool carried = false) const;
  // Returns the passes it ran (each visits every node); `makespan`, when given, receives the
  // refined plan's RealMakespan (from the last pass's arrays where it changed nothing).
  int Refine(std::vector<int>& choice, double deadline, const std::vector<double>* cap,
             double* makespan = nullptr) const;
  void Exchange(std::vector<int>& choice, double deadline) const;
  // Exchange's trial arrays for `choice` (TrialState); false when `choice` is not a fixpoint of
  // Refine (some node's next slower option fits its window), so that a trial cannot follow only
  // what changed.
  bool CaptureFixpoint(const std::vector<int>& choice, double deadline, TrialState& s) const;
  // Refine(trial, deadline, nullptr, makespan) where `trial` is the captured fixpoint with node
  // v's option changed: the same passes, decisions and makespan, computed on the nodes whose
  // window or neighbours changed only (in topological order, as the passes visit them). Returns
  // the passes; `settled` false after eight rounds that all changed something (`makespan` then
  // from RealMakespan, and the trial no fixpoint).
  int TrialRefine(std::vector<int>& trial, int v, double deadline, TrialState& s, double* makespan,
                  bool* settled) const;
  // After a trial: its nodes back to the fixpoint (`trial` too, from `choice`), or the trial
  // made the new fixpoint.
  void ResetTrial(std::vector<int>& trial, const std::vector<int>& choice, TrialState& s) const;
  void AcceptTrial(TrialState& s) const;
  // Chains: the maximal paths of same-stage edges (a stage's instructions in order); empty when
  // some node has two same-stage predecessors or successors.
  void BuildChains();
  // Start times of every node for `choice`: earliest (as soon as possible) or latest (as late as
  // `deadline` allows).
  void Schedule(const std::vector<int>& choice, double deadline, bool latest,
                std::vector<double>& start) const;
  // Re-optimizes the options of one chain exactly (Pareto dynamic program over (finish time,
  // energy)) with every other node's start fixed at `start`; true when the chain's energy fell.
  bool OptimizeChain(const std::vector<int>& chain, std::vector<int>& choice,
                     const std::vector<double>& start, double deadline) const;
  // OptimizeChain on every chain, against the earliest and then the latest schedule, until no
  // chain improves (at most `rounds` sweeps).
  void ChainSearch(std::vector<int>& choice, double deadline, int rounds) const;
  void RecordPoint(double deadline, int64_t k, double offset);
  // Drops the points of raw_ another dominates (pareto::Filter's rule: among exact duplicates
  // the first realized stays), keeping the others in their order: the final filter then gives
  // what it gives on every point (dominance is transitive).
  void CompactPoints();
  // raw_'s non-dominated points (pareto::Filter), each with its index in raw_ as payload.
  std::vector<pareto::Point> RawFront() const;
  // The least-energy plan with time <= deadline by dynamic programming over a topological
  // order (branch and bound): a state is the finish times of the placed instructions that still
  // have unplaced successors, the makespan so far and the effective energy; dominated states
  // and states whose completion bound reaches `choice`'s energy are dropped. Replaces `choice`
  // when a cheaper plan exists; false (choice kept, not proven) when the state comparisons
  // exceed `budget`.
  // With `beam` > 0 the same search keeps at most `beam` states per step (those with the best
  // completion bound): a heuristic that may improve `choice` and never proves (returns false).
  // With `free_nodes` (per node, nonzero = free) the nodes not free keep their option in
  // `choice` (a neighbourhood of the plan, searched exactly; their start times still float).
  bool ExactAt(int64_t budget, double deadline, std::vector<int>& choice, std::size_t beam,
               const std::vector<char>* free_nodes = nullptr) const;
  // ExactAt's steps: the search's preparation, its completion bounds, and per layer the open
  // set, the candidates and the undominated states kept (false: past the budget).
  ExactSearch PrepareExact(double deadline, const std::vector<int>& choice,
                           const std::vector<char>* free_nodes) const;
  void BuildCompletionBounds(ExactSearch& x) const;
  // The chain's suffix from `next` placed from `free_from` on, finishing by `deadline` (at most
  // the search's).
  double ChainBound(const ExactSearch& x, std::size_t c, int next, double free_from,
                    double deadline = kInf) const;
  ExactStep PrepareStep(const ExactSearch& x, int k, const ExactLayer& from, ExactLayer& to,
                        std::vector<int>& next) const;
  void CollectCandidates(const ExactSearch& x, int k, const ExactLayer& from, const ExactStep& step,
                         const std::vector<int>& next, const Incumbents& incumbents,
                         std::vector<ExactCandidate>& candidates) const;
  // KeepUndominated's exact mode when a state has at most two dimensions to compare besides its
  // energy (its open finishes and, unless all are equal, the makespan): a staircase, O(log n)
  // per candidate instead of the kept states. False when it does not apply or past the budget
  // (then `work` > budget).
  bool KeepUndominatedByStaircase(const ExactLayer& from, const ExactStep& step,
                                  const std::vector<ExactCandidate>& candidates, int64_t budget,
                                  bool measured, int64_t& work, ExactLayer& to) const;
  // KeepUndominated's exact mode otherwise: only the kept states whose summed finishes and
  // makespan are no larger than the candidate's are compared.
  bool KeepUndominatedBySum(const ExactLayer& from, const ExactStep& step,
                            const std::vector<ExactCandidate>& candidates, int64_t budget,
                            bool measured, int64_t& work, ExactLayer& to) const;
  // The same by a segment tree over the candidates' first finishes whose nodes hold their
  // kept states' least other dimensions.
  bool KeepUndominatedByTree(const ExactLayer& from, const ExactStep& step,
                             const std::vector<ExactCandidate>& candidates, int64_t budget,
                             bool measured, int64_t& work, ExactLayer& to) const;
  // ExactAt's layers from a prepared search: false when past the budget (`work` counted as
  // KeepUndominated's `measured` says, plus, when measured, every candidate examined).
  bool RunLayers(const ExactSearch& x, const Incumbents& incumbents, std::size_t beam,
                 int64_t budget, bool measured, int64_t& work,
                 std::vector<ExactLayer>& layers) const;
  // Small problems (small_): the exact search for every realized deadline at once, one dynamic
  // program without a deadline (bounded by the slowest one) whose completions must beat the
  // realized plans that finish by their makespan bound (Incumbents); its last layer holds, for
  // every deadline, a plan at least as cheap as any other. Gives each raw_ point the cheapest
  // plan that meets its deadline (a complete state's, or a realized plan no costlier) and marks
  // it exact; false (nothing changed) when past `budget` or with no points.
  bool ExactFrontier(int64_t budget);
  // The plan of the last layer's state `s` (front indices, into `choice`).
  void TraceBack(const ExactSearch& x, const std::vector<ExactLayer>& layers, int s,
                 std::vector<int>& choice) const;
  // A realized point's plan as front indices, and back: its options, cost and exactness.
  std::vector<int> FrontChoice(const IterationPoint& point) const;
  void SetPlan(IterationPoint& point, const std::vector<int>& choice, bool exact) const;
  // The exact search at one deadline after the local searches (RecordPoint; on small problems
  // whose ExactFrontier ran out of budget, for every realized point): ExactAt, and past its
  // budget a beam, the neighbourhood search (small problems) and the local searches again.
  // True when proven optimal.
  bool SearchExactly(std::vector<int>& choice, double deadline, int64_t budget);
  // After the descent on small problems (defer_exact_): ExactFrontier, and past its budget
  // SearchExactly at every realized deadline but the fastest.
  void SearchDeferred();
  // `measured`: work counts the candidates and the comparisons made; else, per candidate, the
  // states kept so far (an upper bound of the comparisons: ExactAt's budget, whose plans the
  // faster dominance tests below leave as they were).
  bool KeepUndominated(const ExactLayer& from, const ExactStep& step,
                       std::vector<ExactCandidate>& candidates, std::size_t beam, int64_t budget,
                       bool measured, int64_t& work, ExactLayer& to) const;
  // Large-neighbourhood search: ExactAt on every pair of stages and on sliding windows of the
  // topological order, every other node fixed at its option, until no neighbourhood improves
  // (at most `rounds` sweeps); true when the plan changed.
  bool NeighborhoodSearch(std::vector<int>& choice, double deadline, int rounds) const;

 private:
  friend struct EngineProbe;  // tests only (tests/pipeline/*_test.cc)

  const Problem& problem_;
  const Options& options_;
  Dag dag_;
  int n_ = 0;
  std::vector<Spec> specs_;
  std::vector<int> class_;       // per node: index into specs_
  bool small_ = false;           // few node-options: exact search at every deadline
  bool defer_exact_ = false;     // small_, the whole frontier: searched at once (SearchDeferred)
  bool exact_frontier_ = false;  // ExactFrontier ran within its budget
  int64_t node_options_ = 0;     // sum over nodes of their real front's size
  double gpus_total_ = 0.0;
  double pg_ = 0.0;        // static power of all GPUs, W
  double time_tol_ = 0.0;  // times closer than this are equal
  double flow_tol_ = 0.0;  // residual capacities below this are zero
  Adjacency preds_;
  Adjacency succs_;
  std::vector<std::vector<int>> chains_;
  std::vector<int> chain_prev_;  // per node: its same-stage predecessor, or -1
  std::vector<int> chain_next_;  // per node: its same-stage successor, or -1

  int num_events_ = 0;
  int source_ = 0;
  int sink_ = 0;
  std::vector<int> arc_from_;
  std::vector<int> arc_to_;
  std::vector<int> arc_act_;
  std::vector<int> out_start_;
  std::vector<int> out_arcs_;
  std::vector<int> out_to_;  // arc_to_ of out_arcs_[i], beside it (the BFS's inner loop)
  std::vector<int> in_start_;
  std::vector<int> in_arcs_;
  std::vector<int> in_from_;     // arc_from_ of in_arcs_[i]
  std::vector<double> up_;       // per arc: upper capacity (cost per second of shortening)
  std::vector<double> lo_;       // per arc: lower bound (saving per second of lengthening)
  std::vector<int> pred_arc_;    // parallel to preds_: the arc of each DAG edge
  std::vector<int> succ_arc_;    // parallel to succs_
  std::vector<int> source_arc_;  // per node: its arc from the source, or -1
  std::vector<int> sink_arc_;    // per node: its arc to the sink, or -1
  std::vector<int> sink_nodes_;  // nodes with an arc to the sink, in node order
  // The realization's buffers: mutable because the const search methods reuse them between
  // calls (they carry nothing from one call to the next).
  mutable Scratch scratch_;
  double scratch_base_ = 0.0;
  double scratch_rate_ = 0.0;
  std::vector<int> event_order_;
  std::vector<double> earliest_;
  std::vector<double> latest_;
  std::vector<double> dur_;         // per node: convex duration
  std::vector<int> topo_position_;  // per node: its index in dag_.topological_order
  // MakespanAfter's values (earliest_, path_base_, path_rate_) are those of the current
  // durations for the nodes before this topological position (ApplyMove lowers it).
  std::size_t pass_from_ = 0;
  std::vector<int> pos_;  // per node: 2k = at hull vertex k, 2k+1 = inside segment k
  std::vector<double> flow_;
  std::vector<char> critical_;
  std::vector<char> side_;   // per event: on the source side of the current cut
  std::vector<int> parent_;  // BFS: arc into the event (+1), negated for a backward arc
  std::vector<int> queue_;   // the source side of the last cut, in BFS order
  // Incremental source side: a move changes the capacities of the cut's arcs only (they cross
  // the cut) and the flow not at all, so the events reached before stay reachable unless an arc
  // inside the source side leaves the critical sub-DAG (BackwardPass clears the flag) or an
  // augmentation changes the residual graph; new reach can only come through arcs whose
  // capacity changed or that joined the critical sub-DAG, whose source-side ends are in rescan_.
  bool source_side_valid_ = false;
  std::vector<int> rescan_;
  // The arcs a Scan found critical but without residual capacity (a superset of the cut's
  // critical arcs while the source side is kept), each once (in_boundary_).
  std::vector<int> boundary_;
  std::vector<char> in_boundary_;
  std::vector<int> shorten_;
  std::vector<int> lengthen_;
  std::vector<int8_t> rate_;  // per node: -1 shortened, +1 lengthened, 0 otherwise
  // Critical arcs from the sink side back to the source side that the move does not lengthen
  // (a critical path through one crosses the cut forward twice and falls off the critical
  // sub-DAG): with none, every critical path shortens by exactly the move.
  int cut_back_fixed_ = 0;
  // The least float (slack) of a non-critical arc at the last BackwardPass, less what the moves
  // since may have used of it: a move of delta with L lengthened nodes takes at most
  // (1 + L) delta from any float. While a move fits in it, no path overtakes and no arc's
  // criticality changes, so the move needs neither ClampMove's nor BackwardPass's pass.
  double float_budget_ = 0.0;
  int64_t full_passes_ = 0;
  int64_t pass_mismatches_ = 0;  // Options::check_incremental_cuts
  std::vector<double> path_base_;
  std::vector<double> path_rate_;
  double flow_value_ = 0.0;

  // The realized points, in the order realized; without Options::keep_dominated (and outside
  // deadline_s mode) the dominated ones are dropped whenever raw_ reaches compact_at_
  // (CompactPoints), so it holds at most 1.5 x the non-dominated points so far.
  std::vector<IterationPoint> raw_;
  Rounding rounding_;
  int64_t deadlines_realized_ = 0;
  std::size_t compact_at_ = kFirstCompaction;
  int64_t steps_ = 0;
  int64_t augmentations_ = 0;
  int64_t cuts_checked_ = 0;  // Options::check_incremental_cuts
  int64_t cut_mismatches_ = 0;
  int64_t critical_arcs_max_ = 0;
  double realize_wall_s_ = 0.0;
  double fastest_wall_s_ = 0.0;
  // State comparisons spent by every ExactAt of the solve (mutable: ExactAt is const).
  mutable int64_t exact_work_ = 0;
};

// `where` names the unit ("stage 1", "stage 1 chunk 0"), `kind` the list ("backward"); "" when
// the list is valid, else the error.
std::string CheckOptions(const std::vector<Alternative>& list, const std::string& where,
                         const std::string& kind, const Options& options);

// The first problem in `problem` or `options` (a message); "" when both are valid.
std::string FindInputError(const Problem& problem, const Options& options);

}  // namespace kareus::pipeline::internal
