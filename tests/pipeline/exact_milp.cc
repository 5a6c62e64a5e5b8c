// SPDX-License-Identifier: Apache-2.0
#include "pipeline/exact_milp.h"

#include <glpk.h>

#include <algorithm>
#include <vector>

namespace kareus::pipeline::testing {

namespace {

// Builds the program (binary x unless `relax`) into `lp`; returns the first x column per node.
std::vector<int> Build(glp_prob* lp, const Problem& problem, const schedule::Dag& dag,
                       double deadline_s, double p_static_w, const std::map<int, int>& fixed,
                       bool relax) {
  const int n = static_cast<int>(dag.nodes.size());
  auto gpus = [&](int stage) {
    return problem.gpus_per_stage.empty() ? 1 : problem.gpus_per_stage[stage];
  };
  auto options = [&](int v) -> const std::vector<Alternative>& {
    const auto& inst = dag.nodes[v];
    return inst.kind == schedule::Direction::kForward ? problem.forward_options[inst.stage]
                                                      : problem.backward_options[inst.stage];
  };
  int gpus_total = 0;
  for (int s = 0; s < problem.num_stages; ++s) gpus_total += gpus(s);

  glp_set_obj_dir(lp, GLP_MIN);
  // Columns (1-based): x_vj, then S_v, then C.
  std::vector<int> first_x(n);
  int cols = 0;
  for (int v = 0; v < n; ++v) {
    first_x[v] = cols + 1;
    cols += static_cast<int>(options(v).size());
  }
  const int first_s = cols + 1;
  const int c_col = first_s + n;
  glp_add_cols(lp, c_col);
  for (int v = 0; v < n; ++v) {
    const auto& list = options(v);
    const int g = gpus(dag.nodes[v].stage);
    for (int j = 0; j < static_cast<int>(list.size()); ++j) {
      const int col = first_x[v] + j;
      if (relax) {
        glp_set_col_bnds(lp, col, GLP_DB, 0.0, 1.0);
      } else {
        glp_set_col_kind(lp, col, GLP_BV);
      }
      glp_set_obj_coef(lp, col, g * (list[j].energy_j - p_static_w * list[j].time_s));
      const auto it = fixed.find(v);
      if (it != fixed.end()) glp_set_col_bnds(lp, col, GLP_FX, it->second == j ? 1.0 : 0.0, 0.0);
    }
    glp_set_col_bnds(lp, first_s + v, GLP_DB, 0.0, deadline_s);
  }
  glp_set_col_bnds(lp, c_col, GLP_DB, 0.0, deadline_s);
  glp_set_obj_coef(lp, c_col, p_static_w * gpus_total);

  std::vector<int> ia{0};
  std::vector<int> ja{0};
  std::vector<double> ar{0.0};
  int row = 0;
  auto add = [&](int col, double value) {
    ia.push_back(row);
    ja.push_back(col);
    ar.push_back(value);
  };
  auto finish_terms = [&](int v, double sign) {  // sign * (S_v + sum_j t_vj x_vj)
    add(first_s + v, sign);
    const auto& list = options(v);
    for (int j = 0; j < static_cast<int>(list.size()); ++j)
      add(first_x[v] + j, sign * list[j].time_s);
  };
  for (int v = 0; v < n; ++v) {  // one option each
    row = glp_add_rows(lp, 1);
    glp_set_row_bnds(lp, row, GLP_FX, 1.0, 1.0);
    for (int j = 0; j < static_cast<int>(options(v).size()); ++j) add(first_x[v] + j, 1.0);
  }
  for (const schedule::DagEdge& e : dag.edges) {  // S_to - finish_from >= lag
    row = glp_add_rows(lp, 1);
    glp_set_row_bnds(lp, row, GLP_LO, e.cross_stage ? problem.p2p_time_s : 0.0, 0.0);
    add(first_s + e.to, 1.0);
    finish_terms(e.from, -1.0);
  }
  for (int v = 0; v < n; ++v) {  // C - finish_v >= 0
    row = glp_add_rows(lp, 1);
    glp_set_row_bnds(lp, row, GLP_LO, 0.0, 0.0);
    add(c_col, 1.0);
    finish_terms(v, -1.0);
  }
  glp_load_matrix(lp, static_cast<int>(ia.size()) - 1, ia.data(), ja.data(), ar.data());
  return first_x;
}

}  // namespace

MilpAnswer MinEnergyMilp(const Problem& problem, const schedule::Dag& dag, double deadline_s,
                         double p_static_w, const std::map<int, int>& fixed, double time_limit_s) {
  auto options = [&](int v) -> const std::vector<Alternative>& {
    const auto& inst = dag.nodes[v];
    return inst.kind == schedule::Direction::kForward ? problem.forward_options[inst.stage]
                                                      : problem.backward_options[inst.stage];
  };
  const int n = static_cast<int>(dag.nodes.size());
  glp_prob* lp = glp_create_prob();
  const std::vector<int> first_x = Build(lp, problem, dag, deadline_s, p_static_w, fixed, false);

  glp_iocp parm;
  glp_init_iocp(&parm);
  parm.presolve = GLP_ON;
  parm.msg_lev = GLP_MSG_OFF;
  parm.mip_gap = 0.0;
  parm.tm_lim = static_cast<int>(time_limit_s * 1000);
  glp_term_out(GLP_OFF);
  MilpAnswer answer;
  if (glp_intopt(lp, &parm) == 0 && glp_mip_status(lp) == GLP_OPT) {
    answer.optimal = true;
    answer.energy_j = glp_mip_obj_val(lp);
    for (int v = 0; v < n; ++v) {
      int best = 0;
      for (int j = 1; j < static_cast<int>(options(v).size()); ++j) {
        if (glp_mip_col_val(lp, first_x[v] + j) > glp_mip_col_val(lp, first_x[v] + best)) best = j;
      }
      answer.choice.push_back(best);
    }
  }
  glp_delete_prob(lp);
  return answer;
}

namespace {

// The linear relaxation by GLPK's simplex; with `edge_duals`, the precedence rows' duals too.
std::optional<double> SolveLp(const Problem& problem, const schedule::Dag& dag, double deadline_s,
                              double p_static_w, std::vector<double>* edge_duals) {
  glp_prob* lp = glp_create_prob();
  Build(lp, problem, dag, deadline_s, p_static_w, {}, true);
  glp_smcp parm;
  glp_init_smcp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  glp_term_out(GLP_OFF);
  std::optional<double> answer;
  if (glp_simplex(lp, &parm) == 0 && glp_get_status(lp) == GLP_OPT) {
    answer = glp_get_obj_val(lp);
    if (edge_duals != nullptr) {
      // Rows: one per node (its options sum to one), then one per edge in dag.edges' order.
      const int first_edge_row = static_cast<int>(dag.nodes.size()) + 1;
      for (std::size_t e = 0; e < dag.edges.size(); ++e) {
        edge_duals->push_back(
            std::max(0.0, glp_get_row_dual(lp, first_edge_row + static_cast<int>(e))));
      }
    }
  }
  glp_delete_prob(lp);
  return answer;
}

}  // namespace

std::optional<double> MinEnergyLp(const Problem& problem, const schedule::Dag& dag,
                                  double deadline_s, double p_static_w) {
  return SolveLp(problem, dag, deadline_s, p_static_w, nullptr);
}

std::vector<double> MinEnergyLpEdgeDuals(const Problem& problem, const schedule::Dag& dag,
                                         double deadline_s, double p_static_w) {
  std::vector<double> duals;
  SolveLp(problem, dag, deadline_s, p_static_w, &duals);
  return duals;
}

}  // namespace kareus::pipeline::testing
