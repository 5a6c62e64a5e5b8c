// SPDX-License-Identifier: Apache-2.0
// GPU tests of the CUDA device layer: kernels, GEMM and attention layouts against the CPU, a
// one-rank NCCL communicator with minCTAs = maxCTAs on the second stream, and the backend's
// measurement of a partition on one GPU. Every test reports SKIPPED (GTEST_SKIP, and CTest's
// skip rule) when no usable GPU is present: they never pass without running.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kareus/measure/cuda_backend.h"
#include "kareus/workload/workload.h"
#include "measure/cuda/cuda_libraries.h"
#include "measure/cuda/cuda_ops.h"
#include "measure/cuda/gpu_backend.h"
#include "measure/cuda/kernels.h"
#include "measure/cuda/program.h"

namespace kareus::measure {
namespace {

using internal::KernelKind;
using internal::KernelSpec;
using internal::MemoryPattern;
namespace k = internal::kernels;

const std::string& GpuUnavailable() {
  static const std::string reason = [] {
    try {
      CheckCudaBackendAvailable({});
      return std::string();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  }();
  return reason;
}

#define REQUIRE_GPU()                                                                     \
  do {                                                                                    \
    if (!GpuUnavailable().empty()) GTEST_SKIP() << "no usable GPU: " << GpuUnavailable(); \
  } while (0)

uint16_t ToBf16(float f) {  // round to nearest even
  uint32_t bits = 0;
  std::memcpy(&bits, &f, 4);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}
float FromBf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f = 0.0f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Host tensors in bf16 with float views; device copies in one arena.
struct Tensor {
  std::vector<uint16_t> bits;
  std::vector<float> Values() const {
    std::vector<float> v(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) v[i] = FromBf16(bits[i]);
    return v;
  }
};

Tensor Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  Tensor t;
  t.bits.resize(n);
  for (auto& b : t.bits) b = ToBf16(u(rng));
  return t;
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    internal::CudaCheck(cudaMalloc(&ptr_, bytes), "cudaMalloc", 0);
    internal::CudaCheck(cudaMemset(ptr_, 0, bytes), "cudaMemset", 0);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  char* get() const { return static_cast<char*>(ptr_); }
  void Put(size_t offset, const Tensor& t) const {
    internal::CudaCheck(
        cudaMemcpy(get() + offset, t.bits.data(), t.bits.size() * 2, cudaMemcpyHostToDevice),
        "copy", 0);
  }
  Tensor Get(size_t offset, size_t n) const {
    Tensor t;
    t.bits.resize(n);
    internal::CudaCheck(cudaDeviceSynchronize(), "sync", 0);
    internal::CudaCheck(cudaMemcpy(t.bits.data(), get() + offset, n * 2, cudaMemcpyDeviceToHost),
                        "copy", 0);
    return t;
  }

 private:
  void* ptr_ = nullptr;
};

// Max |a - b| relative to max |b| (bf16 outputs: about 3 significant digits).
double RelError(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0.0, scale = 1e-6;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(double(got[i]) - double(want[i])));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return err / scale;
}

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!GpuUnavailable().empty()) return;
    internal::CudaCheck(cudaSetDevice(0), "cudaSetDevice", 0);
  }
};

TEST_F(CudaDeviceTest, MemoryKernelsMatchTheCpu) {
  REQUIRE_GPU();
  const int64_t rows = 4, cols = 1024, n = rows * cols;
  const Tensor x = Random(n, 1), y = Random(n, 2), w = Random(cols, 3), z = Random(n, 4);
  const size_t t = n * 2;
  DeviceBuffer buf(8 * t + n);
  buf.Put(0, x);
  buf.Put(t, y);
  buf.Put(2 * t, w);
  buf.Put(3 * t, z);
  auto ptr = [&](size_t i) { return reinterpret_cast<k::Bf16*>(buf.get() + i * t); };
  const auto xv = x.Values(), yv = y.Values(), wv = w.Values(), zv = z.Values();

  // RMSNorm and its backward (dy = z).
  ASSERT_EQ(k::RmsNorm(ptr(0), ptr(2), ptr(4), rows, cols, nullptr), cudaSuccess);
  ASSERT_EQ(k::RmsNormBackward(ptr(0), ptr(2), ptr(3), ptr(5), rows, cols, nullptr), cudaSuccess);
  std::vector<float> norm(n), dnorm(n);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0, dot = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      ss += xv[r * cols + c] * xv[r * cols + c];
      dot += wv[c] * zv[r * cols + c] * xv[r * cols + c];
    }
    const double inv = 1.0 / std::sqrt(ss / cols + 1e-5);
    for (int64_t c = 0; c < cols; ++c) {
      norm[r * cols + c] = float(xv[r * cols + c] * inv * wv[c]);
      dnorm[r * cols + c] =
          float(inv * wv[c] * zv[r * cols + c] - xv[r * cols + c] * dot * inv * inv * inv / cols);
    }
  }
  EXPECT_LT(RelError(buf.Get(4 * t, n).Values(), norm), 1e-2);
  EXPECT_LT(RelError(buf.Get(5 * t, n).Values(), dnorm), 1e-2);

  // SwiGLU (gate = x, up = y) and its backward (dy = z).
  ASSERT_EQ(k::Swiglu(ptr(0), ptr(1), ptr(4), n, nullptr), cudaSuccess);
  ASSERT_EQ(k::SwigluBackward(ptr(3), ptr(0), ptr(1), ptr(5), ptr(6), n, nullptr), cudaSuccess);
  std::vector<float> swiglu(n), dgate(n), dup(n);
  for (int64_t i = 0; i < n; ++i) {
    const double s = 1.0 / (1.0 + std::exp(-xv[i]));
    swiglu[i] = float(xv[i] * s * yv[i]);
    dup[i] = float(zv[i] * xv[i] * s);
    dgate[i] = float(zv[i] * yv[i] * s * (1.0 + xv[i] * (1.0 - s)));
  }
  EXPECT_LT(RelError(buf.Get(4 * t, n).Values(), swiglu), 1e-2);
  EXPECT_LT(RelError(buf.Get(5 * t, n).Values(), dgate), 1e-2);
  EXPECT_LT(RelError(buf.Get(6 * t, n).Values(), dup), 1e-2);

  // Add, copy, dropout-add (with its written mask) and its backward.
  ASSERT_EQ(k::Add(ptr(0), ptr(1), ptr(4), n, nullptr), cudaSuccess);
  std::vector<float> sum(n);
  for (int64_t i = 0; i < n; ++i) sum[i] = xv[i] + yv[i];
  EXPECT_LT(RelError(buf.Get(4 * t, n).Values(), sum), 1e-2);
  ASSERT_EQ(k::Copy(ptr(0), ptr(4), n, nullptr), cudaSuccess);
  EXPECT_EQ(buf.Get(4 * t, n).bits, x.bits);
  auto* mask = reinterpret_cast<uint8_t*>(buf.get() + 8 * t);
  ASSERT_EQ(k::DropoutAdd(ptr(0), ptr(1), ptr(4), mask, n, 7, nullptr), cudaSuccess);
  ASSERT_EQ(k::DropoutBackward(ptr(3), mask, ptr(5), n, nullptr), cudaSuccess);
  std::vector<uint8_t> m(n);
  ASSERT_EQ(cudaMemcpy(m.data(), mask, n, cudaMemcpyDeviceToHost), cudaSuccess);
  int kept = 0;
  std::vector<float> dropped(n), ddropped(n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_LE(m[i], 1);
    kept += m[i];
    dropped[i] = yv[i] + (m[i] ? xv[i] / 0.9f : 0.0f);
    ddropped[i] = m[i] ? zv[i] / 0.9f : 0.0f;
  }
  EXPECT_NEAR(kept / double(n), 0.9, 0.03);
  EXPECT_LT(RelError(buf.Get(4 * t, n).Values(), dropped), 1e-2);
  EXPECT_LT(RelError(buf.Get(5 * t, n).Values(), ddropped), 1e-2);

  // RoPE in place over rows of 128.
  const int64_t d = 128, rope_rows = n / d;
  buf.Put(4 * t, x);
  ASSERT_EQ(k::Rope(ptr(4), rope_rows, d, nullptr), cudaSuccess);
  std::vector<float> rope(n);
  for (int64_t r = 0; r < rope_rows; ++r) {
    for (int64_t i = 0; i < d / 2; ++i) {
      const double angle = double(r % 8192) * std::pow(10000.0, -2.0 * i / d);
      const double u = xv[r * d + i], v = xv[r * d + i + d / 2];
      rope[r * d + i] = float(u * std::cos(angle) - v * std::sin(angle));
      rope[r * d + i + d / 2] = float(v * std::cos(angle) + u * std::sin(angle));
    }
  }
  EXPECT_LT(RelError(buf.Get(4 * t, n).Values(), rope), 2e-2);
  EXPECT_EQ(k::Copy(ptr(0), ptr(4), 12, nullptr), cudaErrorInvalidValue);  // not a multiple of 8
}

// The reference attention of cuda_ops.h's layout: [batch, kv_heads, heads/kv_heads, q, d].
struct AttentionRef {
  std::vector<float> o, dq, dk, dv;
};

AttentionRef CpuAttention(const internal::AttentionShape& a, const std::vector<float>& q,
                          const std::vector<float>& kk, const std::vector<float>& v,
                          const std::vector<float>& dout) {
  const int64_t group = a.heads / a.kv_heads, rows = group * a.q_len, d = a.head_dim, kv = a.kv_len;
  const double scale = 1.0 / std::sqrt(double(d));
  AttentionRef ref;
  ref.o.assign(q.size(), 0.0f);
  ref.dq.assign(q.size(), 0.0f);
  ref.dk.assign(kk.size(), 0.0f);
  ref.dv.assign(v.size(), 0.0f);
  for (int64_t b = 0; b < a.batch * a.kv_heads; ++b) {
    const float* Q = q.data() + b * rows * d;
    const float* K = kk.data() + b * kv * d;
    const float* V = v.data() + b * kv * d;
    const float* dO = dout.data() + b * rows * d;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = r % a.q_len;
      const int64_t limit = ((2 * i + 1) * kv) / (2 * a.q_len);
      std::vector<double> p(kv, 0.0), dp(kv, 0.0);
      double mx = -1e300, sum = 0.0;
      for (int64_t j = 0; j <= limit && j < kv; ++j) {
        double s = 0.0;
        for (int64_t e = 0; e < d; ++e) s += Q[r * d + e] * K[j * d + e];
        p[j] = s * scale;
        mx = std::max(mx, p[j]);
      }
      for (int64_t j = 0; j <= limit && j < kv; ++j) sum += (p[j] = std::exp(p[j] - mx));
      for (int64_t j = 0; j < kv; ++j) p[j] = j <= limit ? p[j] / sum : 0.0;
      double dot = 0.0;
      for (int64_t j = 0; j < kv; ++j) {
        for (int64_t e = 0; e < d; ++e) dp[j] += dO[r * d + e] * V[j * d + e];
        dot += p[j] * dp[j];
      }
      for (int64_t e = 0; e < d; ++e) {
        double o = 0.0, g = 0.0;
        for (int64_t j = 0; j < kv; ++j) {
          o += p[j] * V[j * d + e];
          g += p[j] * (dp[j] - dot) * K[j * d + e];
        }
        ref.o[b * rows * d + r * d + e] = float(o);
        ref.dq[b * rows * d + r * d + e] = float(g * scale);
      }
      for (int64_t j = 0; j < kv; ++j) {
        const double ds = p[j] * (dp[j] - dot);
        for (int64_t e = 0; e < d; ++e) {
          ref.dv[b * kv * d + j * d + e] += float(p[j] * dO[r * d + e]);
          ref.dk[b * kv * d + j * d + e] += float(ds * Q[r * d + e] * scale);
        }
      }
    }
  }
  return ref;
}

TEST_F(CudaDeviceTest, GemmMatchesTheCpu) {
  REQUIRE_GPU();
  cublasLtHandle_t lt = nullptr;
  internal::LtCheck(internal::CublasLt().Create(&lt), "create");
  KernelSpec spec;
  spec.kind = KernelKind::kGemm;
  spec.m = 96, spec.n = 64, spec.k = 128;
  const auto prepared = internal::PrepareKernel(spec, lt);
  DeviceBuffer arena(prepared->bytes), workspace(internal::kWorkspaceBytes);
  const Tensor x = Random(spec.m * spec.k, 11), w = Random(spec.n * spec.k, 12);
  arena.Put(prepared->offsets[0], x);
  arena.Put(prepared->offsets[1], w);
  internal::LaunchKernel(*prepared, arena.get(), lt, workspace.get(), 1, nullptr, 0);
  const auto xv = x.Values(), wv = w.Values();
  std::vector<float> want(spec.m * spec.n);
  for (int64_t i = 0; i < spec.m; ++i) {
    for (int64_t j = 0; j < spec.n; ++j) {
      double s = 0.0;
      for (int64_t e = 0; e < spec.k; ++e) s += xv[i * spec.k + e] * wv[j * spec.k + e];
      want[i * spec.n + j] = float(s);
    }
  }
  EXPECT_LT(RelError(arena.Get(prepared->offsets[2], want.size()).Values(), want), 1e-2);
  internal::CublasLt().Destroy(lt);
}

void CheckAttention(const internal::AttentionShape& shape) {
  cublasLtHandle_t lt = nullptr;
  internal::LtCheck(internal::CublasLt().Create(&lt), "create");
  KernelSpec spec;
  spec.kind = KernelKind::kAttention;
  spec.attention = shape;
  spec.name = "attention";
  const size_t nq = shape.batch * shape.heads * shape.q_len * shape.head_dim;
  const size_t nkv = shape.batch * shape.kv_heads * shape.kv_len * shape.head_dim;
  const Tensor q = Random(nq, 21), kk = Random(nkv, 22), v = Random(nkv, 23), dout = Random(nq, 24);
  const AttentionRef ref = CpuAttention(shape, q.Values(), kk.Values(), v.Values(), dout.Values());
  for (bool backward : {false, true}) {
    spec.attention.backward = backward;
    const auto prepared = internal::PrepareKernel(spec, lt);
    DeviceBuffer arena(prepared->bytes), workspace(internal::kWorkspaceBytes);
    arena.Put(prepared->offsets[0], q);
    arena.Put(prepared->offsets[1], kk);
    arena.Put(prepared->offsets[2], v);
    if (backward) arena.Put(prepared->offsets[3], dout);
    internal::LaunchKernel(*prepared, arena.get(), lt, workspace.get(), 1, nullptr, 0);
    if (!backward) {
      EXPECT_LT(RelError(arena.Get(prepared->offsets[4], nq).Values(), ref.o), 3e-2) << "O";
    } else {
      EXPECT_LT(RelError(arena.Get(prepared->offsets[6], nq).Values(), ref.dq), 5e-2) << "dQ";
      EXPECT_LT(RelError(arena.Get(prepared->offsets[7], nkv).Values(), ref.dk), 5e-2) << "dK";
      EXPECT_LT(RelError(arena.Get(prepared->offsets[8], nkv).Values(), ref.dv), 3e-2) << "dV";
    }
  }
  internal::CublasLt().Destroy(lt);
}

TEST_F(CudaDeviceTest, AttentionMatchesTheCpu) {
  REQUIRE_GPU();
  // GQA (4 heads in 2 groups), causal; then CP-like: half the queries against all keys.
  CheckAttention(
      {.batch = 2, .heads = 4, .kv_heads = 2, .head_dim = 32, .q_len = 64, .kv_len = 64});
  CheckAttention(
      {.batch = 1, .heads = 2, .kv_heads = 1, .head_dim = 64, .q_len = 32, .kv_len = 64});
}

TEST_F(CudaDeviceTest, OneRankCommunicatorRunsOnTheSecondStream) {
  REQUIRE_GPU();
  auto system = internal::OpenCudaSystem();
  auto rank = system->OpenRank(0);
  const internal::CommKey key{internal::GroupKind::kTensor, 4};
  const int comm = rank->CreateCommunicator(key, system->NewCommId(), 1, 0);
  const int fallback =
      rank->CreateCommunicator({internal::GroupKind::kTensor, 0}, system->NewCommId(), 1, 0);
  EXPECT_NE(comm, fallback);
  KernelSpec gemm;
  gemm.kind = KernelKind::kGemm;
  gemm.m = 4096, gemm.n = 4096, gemm.k = 1024;
  internal::ProgramBuilder builder(
      [&](const internal::CommKey& k) { return k.ctas == 4 ? comm : fallback; });
  builder.AddPartition({gemm, gemm}, internal::CollectiveSpec{.bytes = 64 << 20, .group_size = 1},
                       4, 1);
  const internal::Program program = builder.Finish();
  rank->Prepare(program);
  rank->BeginTiming();
  rank->Enqueue(program, 20);
  const double seconds = rank->EndTiming(120.0);
  EXPECT_GT(seconds, 0.0);
  // Two 4096 x 4096 x 1024 GEMMs per run: at most ~1 PFLOP/s.
  EXPECT_GT(seconds / 20, 2 * 2.0 * 4096 * 4096 * 1024 / 1.2e15);
}

workload::WorkloadModel TinyModel() {
  const std::string yaml =
      "name: tiny\nmodel: llama3.2-3b\ngpu: H200-SXM\nparallelism: {tp: 8, cp: 1, pp: 2, dp: 1}\n"
      "microbatch_size: 4\nsequence_length: 2048\nmicrobatches: 4\nrecompute: full\n";
  return workload::BuildWorkloadModel(workload::WorkloadFromYaml(yaml, "tiny"));
}

CudaBackendOptions Quick() {
  CudaBackendOptions o;
  o.warmup_runs = 3;
  o.calibration_runs = 10;
  o.window_s = 0.5;
  o.min_counter_periods = 3;
  o.cooldown_s = 0.0;
  o.quiet = true;
  return o;
}

TEST_F(CudaDeviceTest, BackendMeasuresAPartitionOnOneGpu) {
  REQUIRE_GPU();
  const auto model = TinyModel();
  internal::GpuBackend backend(model, Quick(), internal::OpenCudaSystem());
  const auto [period, idle_w] = backend.CounterOf(0);
  EXPECT_GT(period, 0.0);
  EXPECT_LE(period, 1.0);
  EXPECT_GT(idle_w, 5.0);
  workload::PartitionType type = model.Type("fwd_attn");
  type.collective.group_size = 1;  // a one-rank communicator on this one GPU
  const int clock = backend.ClockLevelMhz();
  const auto samples =
      backend.MeasureAll(type, {{.freq_mhz = clock, .sms = 6, .slot = type.launch_slots.front()},
                                {.freq_mhz = clock, .sms = 30, .slot = type.launch_slots.back()}});
  ASSERT_EQ(samples.size(), 2u);
  for (const Sample& s : samples) {
    EXPECT_GT(s.time_s, 1e-6);
    EXPECT_LT(s.time_s, 1.0);
    const double watts = s.energy_j / s.time_s;
    EXPECT_GT(watts, 30.0);
    EXPECT_LT(watts, 1500.0);
    EXPECT_GT(s.realized_freq_mhz, 100.0);
    EXPECT_EQ(s.gpus, 1);
  }
  EXPECT_THROW(backend.MeasureAll(
                   type, {{.freq_mhz = clock - 15, .sms = 6, .slot = type.launch_slots.front()}}),
               InputError);
  EXPECT_NE(backend.Description().find("cuda("), std::string::npos);
}

}  // namespace
}  // namespace kareus::measure
