// SPDX-License-Identifier: Apache-2.0
// kareus._kareus: the runtime (frequency controller, plan executor, energy monitor) for Python
// training loops. Names follow Zeus where Zeus has one (begin_window/end_window,
// on_step_begin/on_instruction_begin), so Zeus/Perseus users can switch with few edits.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "kareus/common/io.h"
#include "kareus/device/frequency_controller.h"
#include "kareus/device/nvml.h"
#include "kareus/measure/emulator_backend.h"
#include "kareus/methods/run.h"
#include "kareus/plan/check.h"
#include "kareus/plan/perseus.h"
#include "kareus/plan/plan_file.h"
#include "kareus/runtime/energy_monitor.h"
#include "kareus/runtime/plan_executor.h"
#include "kareus/schedule/schedule.h"
#include "kareus/workload/program.h"
#include "kareus/workload/workload.h"

namespace py = pybind11;
namespace rt = kareus::runtime;
namespace device = kareus::device;
namespace plan = kareus::plan;
namespace schedule = kareus::schedule;

namespace {

// One NVML session per process, shared by every controller and monitor (closed with the last).
std::shared_ptr<device::Nvml> SharedNvml() {
  static std::mutex mutex;
  static std::weak_ptr<device::Nvml> cache;
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<device::Nvml> nvml = cache.lock();
  if (!nvml) {
    nvml = device::Nvml::Open();
    cache = nvml;
  }
  return nvml;
}

py::dict KnobsDict(const plan::PartitionKnobs& knobs) {
  py::dict d;
  d["type"] = knobs.type;
  d["sms"] = knobs.sms;
  d["slot"] = knobs.slot;
  return d;
}

py::dict InstructionDict(const plan::PlannedInstruction& instruction) {
  py::dict d;
  d["kind"] = schedule::ToString(instruction.kind);
  d["chunk"] = instruction.chunk;
  d["microbatch"] = instruction.microbatch;
  d["freq_mhz"] = instruction.freq_mhz;
  d["mode"] = schedule::ToString(instruction.mode);
  py::list partitions;
  for (const auto& knobs : instruction.partitions) partitions.append(KnobsDict(knobs));
  d["partitions"] = partitions;
  d["time_s"] = instruction.time_s;
  d["energy_j"] = instruction.energy_j;
  if (instruction.gradient_sync) {
    py::dict sync;
    sync["sms"] = instruction.gradient_sync->sms;
    sync["overlapped"] = instruction.gradient_sync->overlapped;
    d["gradient_sync"] = sync;
  }
  return d;
}

// The job's pipeline, as far as the caller gives it, must be the plan's: a plan for another
// stage count, microbatch count or schedule is refused before any clock is touched, naming both.
void CheckPlanMatchesJob(const plan::Plan& plan, const std::filesystem::path& plan_path,
                         std::optional<int> num_stages, std::optional<int> num_microbatches,
                         const std::optional<std::string>& schedule_name) {
  const int plan_stages = static_cast<int>(plan.stages.size());
  std::optional<schedule::ScheduleKind> job_schedule;
  if (schedule_name) job_schedule = schedule::ScheduleKindFromString(*schedule_name);
  if ((!num_stages || *num_stages == plan_stages) &&
      (!num_microbatches || *num_microbatches == plan.num_microbatches) &&
      (!job_schedule || *job_schedule == plan.schedule)) {
    return;
  }
  std::string job;
  if (num_stages) job += std::to_string(*num_stages) + " pipeline stages";
  if (num_microbatches) {
    job += (job.empty() ? "" : " x ") + std::to_string(*num_microbatches) + " microbatches";
  }
  if (job_schedule) {
    const std::string name = schedule::ToString(*job_schedule);
    job += job.empty() ? "the " + name + " schedule" : " (" + name + ")";
  }
  throw kareus::InputError(
      plan_path.string() + ": the plan does not match this job: the plan is for " +
      std::to_string(plan_stages) + " pipeline stages x " + std::to_string(plan.num_microbatches) +
      " microbatches (" + schedule::ToString(plan.schedule) + "), the job runs " + job +
      " (make the plan from a workload with parallelism.pp = the job's pipeline stages and "
      "microbatches = the job's microbatches per iteration, for the job's schedule)");
}

// A JSON value as the Python object json.loads makes of it.
py::object ToPython(const kareus::Json& value) {
  return py::module_::import("json").attr("loads")(kareus::DumpJson(value));
}

// `workload`: a workload file's path, or its mapping as a dict (what the YAML file holds).
kareus::workload::Workload LoadWorkloadArgument(const py::object& workload) {
  namespace kw = kareus::workload;
  if (py::isinstance<py::dict>(workload)) {
    const std::string text = py::str(py::module_::import("json").attr("dumps")(workload));
    return kw::WorkloadFromYaml(text, "workload");
  }
  return kw::LoadWorkloadFile(
      py::str(py::module_::import("os").attr("fspath")(workload)).cast<std::string>());
}

py::dict CostDict(const kareus::pipeline::Evaluation& e) {
  py::dict d;
  d["time_s"] = e.time_s;
  d["energy_j"] = e.energy_j;
  d["static_energy_j"] = e.static_energy_j;
  return d;
}

py::list PathList(const std::vector<std::filesystem::path>& paths) {
  py::list list;
  for (const auto& path : paths) list.append(path.string());
  return list;
}

schedule::ScheduleKind ScheduleArgument(const std::string& text) {
  try {
    return schedule::ScheduleKindFromString(text);
  } catch (const kareus::InputError&) {
    kareus::ThrowInput("schedule", text, "must be 1f1b or gpipe");
  }
}

// ZeusMonitor's Measurement shape: time, gpu_energy {index: J}, total_energy.
struct Measurement {
  double time_s = 0.0;
  std::map<int, double> gpu_energy_j;
  double total_energy_j = 0.0;
  bool power_integrated = false;
};

// A chosen frontier point as Python sees it (swap_to_frontier, swap_to_power_budget,
// pick_plan): its index, time, energy and plan file; the caller adds what else it knows.
py::dict ChosenPointDict(int point_index, const plan::FrontierPoint& point,
                         const std::filesystem::path& plan_path) {
  py::dict d;
  d["point_index"] = point_index;
  d["time_s"] = point.time_s;
  d["energy_j"] = point.energy_j;
  d["plan_path"] = plan_path.string();
  return d;
}

}  // namespace

PYBIND11_MODULE(_kareus, m) {
  m.doc() =
      "Kareus runtime: apply a Kareus plan (GPU clock per pipeline instruction, comm "
      "knobs per partition) in a training job, and measure GPU energy.";

  static py::exception<kareus::Error> error(m, "Error", PyExc_RuntimeError);
  static py::exception<kareus::InputError> input_error(m, "InputError", PyExc_ValueError);
  static py::exception<kareus::EnvironmentError> environment_error(m, "EnvironmentError",
                                                                   PyExc_OSError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kareus::InputError& e) {
      input_error(e.what());
    } catch (const kareus::EnvironmentError& e) {
      environment_error(e.what());
    } catch (const kareus::Error& e) {
      error(e.what());
    }
  });

  m.def(
      "optimize",
      [](const py::object& workload, std::optional<std::filesystem::path> out,
         std::optional<std::vector<std::string>> methods, std::optional<double> budget_fraction,
         uint64_t seed, bool quiet) {
        namespace km = kareus::methods;
        km::RunOptions options;
        if (methods) {
          options.methods.clear();
          for (const auto& name : *methods) options.methods.push_back(km::FindMethod(name));
        }
        if (budget_fraction) options.profile.budget_fraction = *budget_fraction;
        if (const auto error = options.Validate()) {
          // Python names the arguments after the struct's fields.
          kareus::ThrowInput(
              error->field == "profile.budget_fraction" ? "budget_fraction" : error->field,
              error->value, error->rule);
        }
        options.quiet = quiet;
        const kareus::workload::Workload loaded = LoadWorkloadArgument(workload);
        std::optional<kareus::OutputFolder> folder;  // replaced as a whole at the end
        if (out) {
          folder.emplace(*out);
          options.profile.store = *out / "measurements.sqlite";
          folder->Keep(options.profile.store);
        }
        std::string summary;
        {
          py::gil_scoped_release release;  // the run is pure C++; let other threads go on
          const auto run =
              km::RunWorkload(loaded, options, kareus::measure::EmulatorBackendFactory(),
                              kareus::Context{.seed = seed, .quiet = quiet});
          if (folder) {
            km::WriteRunOutputs(run, folder->staging());
            folder->Commit();
          }
          summary = km::ToJson(run.summary).dump();
        }
        return py::module_::import("json").attr("loads")(summary);
      },
      py::arg("workload"), py::arg("out") = py::none(), py::arg("methods") = py::none(),
      py::arg("budget_fraction") = py::none(), py::arg("seed") = 1, py::arg("quiet") = true,
      "Run Kareus end to end on a workload, a file or its mapping as a dict (what `kareus run` "
      "does): every method's "
      "frontier on the built-in emulator, the comparison tables; with `out`, also plan.json, "
      "frontier.json, plans/, summary.json and report.html. Returns summary.json as a dict.");

  m.def(
      "partitions",
      [](py::object workload, py::object plan_path, py::object record, int virtual_stages,
         bool program) {
        namespace kw = kareus::workload;
        if (workload.is_none() + plan_path.is_none() + record.is_none() != 2) {
          throw kareus::InputError(
              "partitions: give one of a workload (file or dict), plan= "
              "(a plan.json whose recorded workload is used) or record= (a "
              "plan's workload record as a dict)");
        }
        kw::Workload loaded;
        if (!record.is_none()) {
          const std::string text = py::str(py::module_::import("json").attr("dumps")(record));
          loaded =
              kw::WorkloadFromRecord(kareus::ParseJson(text, "record"), virtual_stages, "record");
        } else if (!plan_path.is_none()) {
          const std::string path =
              py::str(py::module_::import("os").attr("fspath")(plan_path)).cast<std::string>();
          const plan::Plan plan = plan::ReadPlanFile(path);
          loaded = kw::WorkloadFromRecord(plan.workload, plan.virtual_stages, path + ": workload");
        } else {
          loaded = LoadWorkloadArgument(workload);
        }
        kareus::Json json;
        {
          py::gil_scoped_release release;
          json = kw::PartitionsJson(kw::BuildWorkloadModel(loaded), program);
        }
        return ToPython(json);
      },
      py::arg("workload") = py::none(), py::kw_only(), py::arg("plan") = py::none(),
      py::arg("record") = py::none(), py::arg("virtual_stages") = 1, py::arg("program") = true,
      "The partitions of a workload, as `kareus partitions --json --program` prints them: the "
      "partition types (kernels, collective, slots, SM choices) and, per pipeline unit and "
      "instruction, the kernels and partition occurrences in execution order (`program`). "
      "`workload`: a workload file or its mapping as a dict; `plan`: a plan.json, whose "
      "recorded workload is used; `record`: a plan's workload record (dict) with its "
      "`virtual_stages`.");

  m.def(
      "load_plan",
      [](const std::filesystem::path& path) {
        return ToPython(plan::ToJson(plan::ReadCheckedPlanFile(path)));
      },
      py::arg("plan_path"),
      "A plan.json, validated as export and the runtime read it (its shape, and that it fits "
      "the workload it records: stages, clocks, partition types, slots, SM counts; InputError "
      "naming the field and the rule), as a dict in the current format.");

  m.def(
      "sequential_job_refusal",
      [](const std::filesystem::path& path) -> py::object {
        const auto refusal = plan::SequentialJobRefusal(plan::ReadPlanFile(path), path.string());
        if (!refusal) return py::none();
        return py::str(*refusal);
      },
      py::arg("plan_path"),
      "Why a job that runs every instruction sequentially (stock Megatron-LM, Zeus) should not "
      "apply this plan (it has nanobatched instructions, planned for Kareus's execution), or "
      "None; the words `kareus export --format zeus` refuses with.");

  m.def(
      "pick_plan",
      [](const std::filesystem::path& folder, double deadline_s, double power_w) {
        const rt::PickedPlan picked = rt::PickPlan(folder, deadline_s, power_w);
        py::dict d = ChosenPointDict(picked.point_index, picked.point, picked.plan_path);
        d["meets"] = picked.meets;
        return d;
      },
      py::arg("folder"), py::arg("deadline_s") = 0.0, py::arg("power_w") = 0.0,
      "The plan of a finished run (`kareus pick`): for deadline_s, the lowest-energy plan within "
      "it (none: the fastest, meets False); for power_w (average watts per GPU), the fastest "
      "plan within it (none: the lowest-power one). Give exactly one.");

  m.def(
      "solve",
      [](const std::filesystem::path& profile, int stages, int microbatches, double static_power_w,
         const std::filesystem::path& out, double unit_time_s, int gpus_per_stage,
         const std::string& schedule_name, double deadline_s) {
        const plan::SolveProfileOptions options{.profile = profile,
                                                .num_stages = stages,
                                                .num_microbatches = microbatches,
                                                .p_static_w = static_power_w,
                                                .unit_time_s = unit_time_s,
                                                .gpus_per_stage = gpus_per_stage,
                                                .out = out,
                                                .deadline_s = deadline_s,
                                                .schedule = ScheduleArgument(schedule_name)};
        if (const auto error = options.Validate()) {
          // Python names the arguments; the struct's names differ for three of them.
          const std::map<std::string, std::string> names = {{"num_stages", "stages"},
                                                            {"num_microbatches", "microbatches"},
                                                            {"p_static_w", "static_power_w"}};
          const auto it = names.find(error->field);
          kareus::ThrowInput(it == names.end() ? error->field : it->second, error->value,
                             error->rule);
        }
        plan::SolveProfileSummary s;
        {
          py::gil_scoped_release release;
          s = plan::SolveProfile(options);
        }
        py::dict d;
        d["status"] = kareus::pipeline::ToString(s.solver.status);
        d["message"] = s.solver.message;
        d["steps"] = s.solver.steps;
        d["points"] = s.points;
        d["fastest"] = CostDict(s.fastest);
        d["lowest_energy"] = CostDict(s.cheapest);
        d["plan"] = s.files.plan.string();
        d["frontier"] = s.files.frontier.empty() ? py::object(py::none())
                                                 : py::object(py::str(s.files.frontier.string()));
        d["plans"] = PathList(s.files.plans);
        return d;
      },
      py::arg("profile"), py::kw_only(), py::arg("stages"), py::arg("microbatches"),
      py::arg("static_power_w"), py::arg("out"),
      py::arg("unit_time_s") = plan::SolveProfileOptions{}.unit_time_s,
      py::arg("gpus_per_stage") = plan::SolveProfileOptions{}.gpus_per_stage,
      py::arg("schedule") = "1f1b", py::arg("deadline_s") = 0.0,
      "Solve a Perseus profile CSV (stage,instruction,frequency,time,energy; energy per GPU) "
      "for the iteration time-energy frontier (`kareus solve`): writes plan.json, "
      "frontier.json and plans/ into `out` (with deadline_s > 0, only plan.json: the "
      "least-energy plan within it). Returns what `kareus solve --json` prints: the solver's "
      "status, the number of points, the fastest and lowest-energy iteration costs, the files.");

  m.def(
      "export",
      [](const std::filesystem::path& plan_path, const std::string& format,
         const std::filesystem::path& out, bool clocks_only) {
        const plan::ExportOptions options{.plan = plan_path,
                                          .format = plan::ExportFormatFromString(format),
                                          .out = out,
                                          .clocks_only = clocks_only};
        plan::ExportSummary s;
        {
          py::gil_scoped_release release;
          s = plan::ExportPlans(options);
        }
        return PathList(s.files);
      },
      py::arg("plan"), py::kw_only(), py::arg("format"), py::arg("out"),
      py::arg("clocks_only") = false,
      "Export a plan.json, or a folder of plan_NNNNN.json, as Zeus freqs_pipeline_%05d.py "
      "(format='zeus') or Kareus scheds_pipeline_%05d.py (format='kareus-scheds') files in "
      "`out` (`kareus export`); a nanobatched plan is refused for Zeus unless clocks_only. "
      "Returns the files written.");

  m.def("nvml_index_for_cuda_device", &device::NvmlIndexForCudaDevice, py::arg("cuda_device"),
        "NVML index of a CUDA device ordinal (e.g. LOCAL_RANK), through CUDA_VISIBLE_DEVICES.");

  py::class_<device::FrequencyController>(m, "FrequencyController",
                                          "Locks one GPU's SM clock from a setter thread; resets "
                                          "it on close, SIGINT/SIGTERM and interpreter exit.")
      .def(py::init([](int gpu, bool install_signal_handlers, bool coalesce) {
             return std::make_unique<device::FrequencyController>(
                 SharedNvml(), device::FrequencyControllerOptions{
                                   .gpu = gpu,
                                   .install_signal_handlers = install_signal_handlers,
                                   .coalesce = coalesce,
                                   .warn = nullptr});
           }),
           py::arg("gpu") = 0, py::arg("install_signal_handlers") = true,
           py::arg("coalesce") = true)
      .def("request_clock", &device::FrequencyController::RequestClock, py::arg("freq_mhz"),
           "Queue a clock (MHz); returns at once.")
      .def("request_reset", &device::FrequencyController::RequestReset,
           "Queue a return to the default clocks; returns at once.")
      .def("wait_idle", &device::FrequencyController::WaitIdle,
           py::call_guard<py::gil_scoped_release>(),
           "Block until every queued request has been applied.")
      .def("reset_clocks", &device::FrequencyController::ResetClocks,
           py::call_guard<py::gil_scoped_release>(), "Reset to the default clocks and wait.")
      .def_property_readonly("gpu", &device::FrequencyController::gpu)
      .def_property_readonly("measure_only", &device::FrequencyController::measure_only)
      .def_property_readonly("supported_clocks_mhz",
                             &device::FrequencyController::supported_clocks_mhz)
      .def_property_readonly("stats",
                             [](const device::FrequencyController& c) {
                               const device::FrequencyControllerStats s = c.stats();
                               py::dict d;
                               d["requests"] = s.requests;
                               d["unchanged"] = s.unchanged;
                               d["coalesced"] = s.coalesced;
                               d["set_calls"] = s.set_calls;
                               d["failures"] = s.failures;
                               d["applied_mhz"] = s.applied_mhz;
                               return d;
                             })
      .def(
          "__enter__",
          [](device::FrequencyController& c) -> device::FrequencyController& { return c; },
          py::return_value_policy::reference)
      .def("__exit__", [](device::FrequencyController& c, py::object, py::object, py::object) {
        py::gil_scoped_release release;
        c.ResetClocks();
        return false;
      });

  py::class_<rt::PlanExecutor>(m, "PlanExecutor",
                               "One pipeline stage of plan.json, driven by the training loop's "
                               "hooks; sets each instruction's clock and serves its knobs.")
      .def(py::init([](const std::filesystem::path& plan_path, int stage,
                       device::FrequencyController* controller, bool check_supported_clocks,
                       std::optional<int> num_stages, std::optional<int> num_microbatches,
                       std::optional<std::string> schedule_name) {
             plan::Plan plan = plan::ReadPlanFile(plan_path);
             CheckPlanMatchesJob(plan, plan_path, num_stages, num_microbatches, schedule_name);
             return std::make_unique<rt::PlanExecutor>(
                 std::move(plan),
                 rt::PlanExecutorOptions{.stage = stage,
                                         .check_supported_clocks = check_supported_clocks},
                 controller);
           }),
           py::arg("plan_path"), py::arg("stage") = 0, py::arg("controller") = nullptr,
           py::arg("check_supported_clocks") = true, py::arg("num_stages") = py::none(),
           py::arg("num_microbatches") = py::none(), py::arg("schedule") = py::none(),
           py::keep_alive<1, 4>())  // the controller lives as long as the executor
      .def("on_step_begin", &rt::PlanExecutor::OnStepBegin)
      .def("on_step_end", &rt::PlanExecutor::OnStepEnd)
      .def(
          "on_instruction_begin",
          [](rt::PlanExecutor& e, const std::string& kind, std::optional<int> chunk) {
            if (chunk) {
              e.OnInstructionBegin(kind, *chunk);
            } else {
              e.OnInstructionBegin(kind);
            }
          },
          py::arg("name"), py::arg("chunk") = py::none(),
          "Begin 'forward' or 'backward'; with interleaved 1F1B optionally the model chunk "
          "(Megatron-LM's model_chunk_id), checked against the plan.")
      .def(
          "on_instruction_end",
          [](rt::PlanExecutor& e, const std::string& kind, std::optional<int> chunk) {
            if (chunk) {
              e.OnInstructionEnd(kind, *chunk);
            } else {
              e.OnInstructionEnd(kind);
            }
          },
          py::arg("name"), py::arg("chunk") = py::none())
      .def("on_gradient_sync_begin", &rt::PlanExecutor::OnGradientSyncBegin,
           "Before the stage's data-parallel gradient sync (Megatron-LM: finalize_model_grads): "
           "applies the clock of the plan's sync tail; a no-op without one.")
      .def("on_gradient_sync_end", &rt::PlanExecutor::OnGradientSyncEnd)
      .def_property_readonly("gradient_sync",
                             [](const rt::PlanExecutor& e) -> py::object {
                               const auto sync = e.gradient_sync();
                               if (!sync) return py::none();
                               py::dict d;
                               d["sms"] = sync->sms;
                               d["overlapped"] = sync->overlapped;
                               return d;
                             })
      .def_property_readonly("stage_gradient_sync",
                             [](const rt::PlanExecutor& e) -> py::object {
                               const auto& sync = e.stage_gradient_sync();
                               if (!sync) return py::none();
                               py::dict d;
                               d["freq_mhz"] = sync->freq_mhz;
                               d["sms"] = sync->sms;
                               d["time_s"] = sync->time_s;
                               d["energy_j"] = sync->energy_j;
                               return d;
                             })
      .def_property_readonly("step", &rt::PlanExecutor::step)
      .def_property_readonly("instruction_index", &rt::PlanExecutor::instruction_index)
      .def_property_readonly("stage", &rt::PlanExecutor::stage)
      .def_property_readonly("in_step", &rt::PlanExecutor::in_step)
      .def_property_readonly("in_instruction", &rt::PlanExecutor::in_instruction)
      .def_property_readonly(
          "num_instructions",
          [](const rt::PlanExecutor& e) { return e.stage_plan().instructions.size(); })
      .def_property_readonly("method", [](const rt::PlanExecutor& e) { return e.plan().method; })
      .def_property_readonly("num_stages",
                             [](const rt::PlanExecutor& e) { return e.plan().stages.size(); })
      .def_property_readonly("num_microbatches",
                             [](const rt::PlanExecutor& e) { return e.plan().num_microbatches; })
      .def_property_readonly(
          "schedule",
          [](const rt::PlanExecutor& e) { return schedule::ToString(e.plan().schedule); })
      .def_property_readonly("current",
                             [](const rt::PlanExecutor& e) -> py::object {
                               if (!e.has_current_instruction()) return py::none();
                               return InstructionDict(e.current_instruction());
                             })
      .def(
          "knobs",
          [](const rt::PlanExecutor& e, const std::string& partition_type) -> py::object {
            const auto knobs = e.Knobs(partition_type);
            if (!knobs) return py::none();
            return py::make_tuple(knobs->sms, knobs->slot);
          },
          py::arg("partition_type"))
      .def(
          "swap_plan",
          [](rt::PlanExecutor& e, const std::filesystem::path& plan_path) {
            e.SwapPlan(plan::ReadPlanFile(plan_path));
          },
          py::arg("plan_path"))
      .def(
          "swap_to_frontier",
          [](rt::PlanExecutor& e, const std::filesystem::path& folder, double target_time_s) {
            const rt::FrontierChoice choice = e.SwapToFrontier(folder, target_time_s);
            py::dict d = ChosenPointDict(choice.point_index, choice.point, choice.plan_path);
            d["meets_target"] = choice.meets_target;
            return d;
          },
          py::arg("frontier_folder"), py::arg("target_time_s"))
      .def(
          "swap_to_power_budget",
          [](rt::PlanExecutor& e, const std::filesystem::path& folder, double budget_w_per_gpu) {
            const rt::PowerChoice choice = e.SwapToPowerBudget(folder, budget_w_per_gpu);
            py::dict d = ChosenPointDict(choice.point_index, choice.point, choice.plan_path);
            d["power_w_per_gpu"] = choice.power_w_per_gpu;
            d["fits"] = choice.fits;
            return d;
          },
          py::arg("frontier_folder"), py::arg("budget_w_per_gpu"))
      .def(
          "follow_timetable",
          [](rt::PlanExecutor& e, const std::filesystem::path& timetable, double first_iteration,
             std::optional<std::function<double()>> now,
             std::optional<std::function<void(double)>> sleep_until) {
            rt::PlanExecutor::Clock clock;
            if (now) clock.now = *now;
            if (sleep_until) {
              clock.sleep_until = *sleep_until;
            } else {  // a pause may last an hour: other Python threads run meanwhile
              clock.sleep_until = [](double until) {
                py::gil_scoped_release release;
                std::this_thread::sleep_until(std::chrono::system_clock::time_point(
                    std::chrono::duration_cast<std::chrono::system_clock::duration>(
                        std::chrono::duration<double>(until))));
              };
            }
            e.FollowTimetable(std::make_shared<const rt::TimetableFollower>(timetable),
                              first_iteration, std::move(clock));
          },
          py::arg("timetable"), py::arg("first_iteration") = 0.0, py::arg("now") = py::none(),
          py::arg("sleep_until") = py::none())
      .def_property_readonly("timetable_step",
                             [](const rt::PlanExecutor& e) -> py::object {
                               const auto& step = e.timetable_step();
                               if (!step) return py::none();
                               py::dict d;
                               d["interval"] = step->interval;
                               d["plan"] = step->plan.empty() ? py::object(py::none())
                                                              : py::str(step->plan.string());
                               d["pause_until"] = step->pause_until;
                               d["planned_iterations"] = step->planned_iterations;
                               d["behind"] = step->behind;
                               d["late"] = step->late;
                               d["done"] = step->done;
                               d["message"] = step->message;
                               return d;
                             })
      .def_property_readonly("timetable_swaps", &rt::PlanExecutor::timetable_swaps)
      .def_property_readonly("swap_pending", &rt::PlanExecutor::swap_pending);

  py::class_<Measurement>(m, "Measurement", "One energy window (ZeusMonitor's shape).")
      .def_readonly("time", &Measurement::time_s, "window length, s")
      .def_readonly("gpu_energy", &Measurement::gpu_energy_j, "{NVML index: J}")
      .def_readonly("total_energy", &Measurement::total_energy_j, "J, sum over the GPUs")
      .def_readonly("power_integrated", &Measurement::power_integrated,
                    "True if some GPU had no energy counter (power integration)")
      .def("__repr__", [](const Measurement& r) {
        return "Measurement(time=" + std::to_string(r.time_s) +
               ", total_energy=" + std::to_string(r.total_energy_j) + ")";
      });

  py::class_<rt::EnergyMonitor>(m, "EnergyMonitor",
                                "Named begin/end energy windows over chosen GPUs.")
      .def(py::init([](std::optional<std::vector<int>> gpu_indices, double power_poll_period_s) {
             return std::make_unique<rt::EnergyMonitor>(
                 SharedNvml(),
                 rt::EnergyMonitorOptions{.gpus = gpu_indices.value_or(std::vector<int>{}),
                                          .power_poll_period_s = power_poll_period_s});
           }),
           py::arg("gpu_indices") = py::none(), py::arg("power_poll_period_s") = 0.01)
      .def_property_readonly("gpu_indices", &rt::EnergyMonitor::gpus)
      .def("begin_window", &rt::EnergyMonitor::BeginWindow, py::arg("key"))
      .def(
          "end_window",
          [](rt::EnergyMonitor& monitor, const std::string& key) {
            const rt::EnergyMeasurement raw = monitor.EndWindow(key);
            Measurement result{.time_s = raw.time_s,
                               .gpu_energy_j = {},
                               .total_energy_j = raw.total_energy_j,
                               .power_integrated = raw.power_integrated};
            for (size_t i = 0; i < raw.gpu_energy_j.size(); ++i) {
              result.gpu_energy_j[monitor.gpus()[i]] = raw.gpu_energy_j[i];
            }
            return result;
          },
          py::arg("key"))
      .def("cancel_window", &rt::EnergyMonitor::CancelWindow, py::arg("key"))
      .def_property_readonly("open_windows", &rt::EnergyMonitor::open_windows);
}
