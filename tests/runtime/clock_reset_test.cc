// SPDX-License-Identifier: Apache-2.0
// Every way a process that locked a clock can end, against the fake NVML and the real clock
// watcher (docs/ARCHITECTURE.md §8 "Clock reset, path by path"): a child process locks GPU 0 at
// 1410 MHz, then ends in one way; the parent (a child subreaper, so the orphaned watcher becomes
// its child) waits for the child and for the watcher, and checks the fake's call log: exactly
// one set and then exactly one reset. The paths a handler serves must have reset before the
// child was gone; the others reset after, by the watcher.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "device/clock_watcher.h"
#include "kareus/device/frequency_controller.h"
#include "kareus/device/nvml.h"
#include "runtime/runtime_test_util.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)  // clang's spelling of __SANITIZE_ADDRESS__
#define KAREUS_HAS_ASAN 1
#endif
#endif

namespace kareus::runtime {
namespace {

using testing::ClockCalls;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

enum class Timing { kBeforeDeath, kAfterDeath };

class ClockResetTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Orphans of our children (their watchers) become ours, so a test can wait for them.
    ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  }
  void SetUp() override {
    dir_ = testing::FreshTestDirWithNvmlLog("kareus_clock_reset_test", &log_);
    for (const char* name :
         {"FAKE_NVML_SET_RETURN", "FAKE_NVML_CALL_DELAY_US", "KAREUS_CLOCK_WATCHER"}) {
      unsetenv(name);
    }
  }
  void TearDown() override {
    unsetenv("FAKE_NVML_LOG");
    std::filesystem::remove_all(dir_);
  }

  static std::shared_ptr<device::Nvml> OpenNvml() {
    return device::Nvml::Open({.library_path = testing::FakeNvmlPath()});
  }

  // Forks a child that locks GPU 0 at 1410 MHz, tells the parent its watcher's pid and then
  // runs `finish`, which ends it. Returns the child's wait status once the child and its
  // watcher are both gone; `calls_at_death` gets the log as it was when the child was gone.
  int RunChild(const std::function<void(device::FrequencyController&)>& finish,
               std::vector<std::string>* calls_at_death, bool handlers = true) {
    int report[2];
    EXPECT_EQ(pipe(report), 0);
    const pid_t child = fork();
    if (child == 0) {
      close(report[0]);
      rlimit no_core{0, 0};
      setrlimit(RLIMIT_CORE, &no_core);  // SIGSEGV, SIGQUIT, SIGABRT: no core files
      auto nvml = OpenNvml();
      auto* controller =
          new device::FrequencyController(nvml, {.gpu = 0, .install_signal_handlers = handlers});
      controller->RequestClock(1410);
      controller->WaitIdle();
      const pid_t watcher = device::internal::ClockWatcherPid(testing::FakeNvmlPath());
      if (write(report[1], &watcher, sizeof(watcher)) != sizeof(watcher)) _exit(97);
      finish(*controller);
      _exit(98);  // `finish` must end the process
    }
    close(report[1]);
    pid_t watcher = -1;
    EXPECT_EQ(read(report[0], &watcher, sizeof(watcher)), static_cast<ssize_t>(sizeof(watcher)));
    close(report[0]);
    int status = 0;
    EXPECT_EQ(waitpid(child, &status, 0), child);
    *calls_at_death = ClockCalls(log_, 0);
    EXPECT_GT(watcher, 0);
    int watcher_status = 0;
    EXPECT_EQ(waitpid(watcher, &watcher_status, 0), watcher) << "the watcher was not our orphan";
    EXPECT_TRUE(WIFEXITED(watcher_status) && WEXITSTATUS(watcher_status) == 0)
        << "watcher status " << watcher_status;
    return status;
  }

  // Runs a child ending by `finish` and checks: one set, then one reset, and (kBeforeDeath)
  // the reset was there before the child was gone.
  int ExpectReset(const std::function<void(device::FrequencyController&)>& finish, Timing timing,
                  bool handlers = true) {
    std::vector<std::string> at_death;
    const int status = RunChild(finish, &at_death, handlers);
    EXPECT_THAT(ClockCalls(log_, 0), ElementsAre("set 1410", "reset"));
    if (timing == Timing::kBeforeDeath) {
      EXPECT_THAT(at_death, ElementsAre("set 1410", "reset")) << "reset only after death";
    }
    return status;
  }

  std::filesystem::path dir_;
  std::filesystem::path log_;
};

TEST_F(ClockResetTest, SigkillIsResetByTheWatcher) {
  const int status =
      ExpectReset([](device::FrequencyController&) { raise(SIGKILL); }, Timing::kAfterDeath);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

TEST_F(ClockResetTest, SegmentationFaultIsResetByTheWatcher) {
  const int status = ExpectReset(
      [](device::FrequencyController&) {
        // A real fault, through a null pointer the compiler cannot see.
        volatile int* pointer = reinterpret_cast<volatile int*>(std::getenv("KAREUS_NO_SUCH_VAR"));
        *pointer = 1;
      },
      Timing::kAfterDeath);
#if defined(__SANITIZE_ADDRESS__) || defined(KAREUS_HAS_ASAN)
  // AddressSanitizer takes the fault, reports it and exits with 1.
  EXPECT_TRUE((WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) ||
              (WIFEXITED(status) && WEXITSTATUS(status) != 0))
      << status;
#else
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) << status;
#endif
}

TEST_F(ClockResetTest, AbortIsResetByTheWatcher) {
  const int status =
      ExpectReset([](device::FrequencyController&) { std::abort(); }, Timing::kAfterDeath);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) << status;
}

TEST_F(ClockResetTest, UnderscoreExitIsResetByTheWatcher) {
  const int status =
      ExpectReset([](device::FrequencyController&) { _exit(5); }, Timing::kAfterDeath);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 5) << status;
}

TEST_F(ClockResetTest, ExitResetsBeforeTheProcessEnds) {
  const int status =
      ExpectReset([](device::FrequencyController&) { std::exit(4); }, Timing::kBeforeDeath);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 4) << status;
}

TEST_F(ClockResetTest, UncaughtExceptionResetsBeforeTheProcessEnds) {
  const int status = ExpectReset(
      [](device::FrequencyController&) {
        std::thread([] { throw std::runtime_error("uncaught"); }).join();  // std::terminate
      },
      Timing::kBeforeDeath);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) << status;
}

class HandledSignalTest : public ClockResetTest, public ::testing::WithParamInterface<int> {};

TEST_P(HandledSignalTest, ResetsBeforeTheProcessEndsByTheSignal) {
  const int signal_number = GetParam();
  const int status =
      ExpectReset([signal_number](device::FrequencyController&) { raise(signal_number); },
                  Timing::kBeforeDeath);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == signal_number)
      << "the default action must follow the reset: " << status;
}

std::string SignalName(const ::testing::TestParamInfo<int>& info) {
  switch (info.param) {
    case SIGINT:
      return "Sigint";
    case SIGTERM:
      return "Sigterm";
    case SIGHUP:
      return "Sighup";
    case SIGQUIT:
      return "Sigquit";
    default:
      return "Signal" + std::to_string(info.param);
  }
}

INSTANTIATE_TEST_SUITE_P(Handled, HandledSignalTest,
                         ::testing::Values(SIGINT, SIGTERM, SIGHUP, SIGQUIT), SignalName);

TEST_F(ClockResetTest, SigtermWithoutOurHandlersIsResetByTheWatcher) {
  const int status =
      ExpectReset([](device::FrequencyController&) { raise(SIGTERM); }, Timing::kAfterDeath,
                  /*handlers=*/false);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
}

void ExitSeven(int) { _exit(7); }

TEST_F(ClockResetTest, ApplicationHandlerInstalledLaterIsCoveredByTheWatcher) {
  const int status = ExpectReset(
      [](device::FrequencyController&) {
        std::signal(SIGTERM, ExitSeven);  // replaces ours; it ends the process its own way
        raise(SIGTERM);
      },
      Timing::kAfterDeath);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 7) << status;
}

TEST_F(ClockResetTest, ASecondControllerOfTheSameGpuKeepsItArmed) {
  std::vector<std::string> at_death;
  const int status = RunChild(
      [](device::FrequencyController&) {
        // Another controller of GPU 0 comes and goes (its reset goes through NVML in process)...
        {
          device::FrequencyController other(OpenNvml(), {.gpu = 0});
          other.RequestClock(1605);
          other.WaitIdle();
        }
        raise(SIGKILL);  // ... the first one's lock must still be undone by the watcher
      },
      &at_death);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_THAT(ClockCalls(log_, 0), ElementsAre("set 1410", "set 1605", "reset", "reset"));
}

// The defect of the handler that called NVML: a SIGTERM landing while the main thread was inside
// an NVML call blocked on NVML's lock and hung with the clock locked. With every call holding
// the fake's lock for 2 ms and the main thread calling NVML back to back, a handler that called
// NVML would hang in nearly every trial.
TEST_F(ClockResetTest, SigtermDuringAnNvmlCallNeverHangs) {
  setenv("FAKE_NVML_CALL_DELAY_US", "2000", 1);
  for (int trial = 0; trial < 12; ++trial) {
    std::filesystem::remove(log_);
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      close(ready[0]);
      auto nvml = OpenNvml();
      auto* controller = new device::FrequencyController(nvml, {.gpu = 0});
      controller->RequestClock(1410);
      controller->WaitIdle();
      const pid_t watcher = device::internal::ClockWatcherPid(testing::FakeNvmlPath());
      if (write(ready[1], &watcher, sizeof(watcher)) != sizeof(watcher)) _exit(97);
      uint64_t energy = 0;
      while (true) nvml->TotalEnergyMj(0, &energy);  // always inside (or entering) NVML
    }
    close(ready[1]);
    pid_t watcher = -1;
    ASSERT_EQ(read(ready[0], &watcher, sizeof(watcher)), static_cast<ssize_t>(sizeof(watcher)));
    close(ready[0]);
    std::this_thread::sleep_for(std::chrono::microseconds(300 * trial));
    kill(child, SIGTERM);
    int status = 0;
    pid_t done = 0;
    for (int i = 0; i < 1000 && done == 0; ++i) {  // up to 10 s
      done = waitpid(child, &status, WNOHANG);
      if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (done == 0) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      ADD_FAILURE() << "trial " << trial << ": the child hung after SIGTERM";
    }
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
    ASSERT_EQ(waitpid(watcher, &status, 0), watcher);
    EXPECT_THAT(ClockCalls(log_, 0), ElementsAre("set 1410", "reset")) << "trial " << trial;
  }
}

// A child forked after a clock was set (a DataLoader worker) owns nothing: its signals, exit,
// destructor and requests leave the parent's GPU alone, and the parent carries on.
TEST_F(ClockResetTest, ForkedChildDisarms) {
  auto nvml = OpenNvml();
  auto* controller = new device::FrequencyController(nvml, {.gpu = 0});
  controller->RequestClock(1410);
  controller->WaitIdle();
  for (int way = 0; way < 4; ++way) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      controller->RequestClock(1200);  // a no-op in the child
      controller->WaitIdle();
      if (controller->stats().requests != 0 || !controller->measure_only()) _exit(90);
      switch (way) {
        case 0:
          raise(SIGTERM);  // our handler runs, finds nothing of this process's, re-raises
          break;
        case 1:
          std::exit(0);  // exit hook: nothing to reset
        case 2:
          delete controller;  // the parent's controller: left alone
          _exit(0);
        default:
          raise(SIGKILL);
      }
      _exit(91);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0))
        << "way " << way << " status " << status;
  }
  EXPECT_THAT(ClockCalls(log_, 0), ElementsAre("set 1410")) << "a child reset the parent's GPU";
  // The parent's state is intact: its next request is applied, its watcher still listens.
  controller->RequestClock(1200);
  controller->WaitIdle();
  EXPECT_EQ(controller->stats().applied_mhz, 1200);
  const pid_t watcher = device::internal::ClockWatcherPid(testing::FakeNvmlPath());
  EXPECT_GT(watcher, 0);
  EXPECT_EQ(kill(watcher, 0), 0);
  delete controller;
  EXPECT_THAT(ClockCalls(log_, 0), ElementsAre("set 1410", "set 1200", "reset"));
}

TEST_F(ClockResetTest, NoClockIsLockedWithoutAWatcher) {
  setenv("KAREUS_CLOCK_WATCHER", "/nonexistent/kareus-clock-watcher", 1);
  try {
    device::FrequencyController controller(OpenNvml(), {.gpu = 0});
    FAIL() << "expected EnvironmentError";
  } catch (const EnvironmentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("KAREUS_CLOCK_WATCHER"));
  }
  EXPECT_TRUE(ClockCalls(log_, 0).empty());
}

TEST_F(ClockResetTest, AWatcherThatDiesStopsClockChangesAndResetsInProcess) {
  std::vector<std::string> warnings;
  {
    device::FrequencyController controller(
        OpenNvml(), {.gpu = 0, .warn = [&](const std::string& w) { warnings.push_back(w); }});
    controller.RequestClock(1410);
    controller.WaitIdle();
    const pid_t watcher = device::internal::ClockWatcherPid(testing::FakeNvmlPath());
    ASSERT_GT(watcher, 0);
    kill(watcher, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(watcher, &status, 0), watcher);
    controller.RequestClock(1200);
    controller.WaitIdle();
    EXPECT_TRUE(controller.measure_only());
    controller.RequestClock(1605);
    controller.WaitIdle();
  }
  EXPECT_THAT(ClockCalls(log_, 0), ElementsAre("set 1410", "reset"));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("clock watcher"));
}

}  // namespace
}  // namespace kareus::runtime
