# SPDX-License-Identifier: Apache-2.0
# Read-only power/clock probe of one GPU: runs steady loads of known work (bf16 GEMMs of several
# shapes, a device-to-device copy, an L2-resident fp32 elementwise loop, a GEMM at ~50 % duty
# cycle, idle) and reports, per load, the achieved rate and NVML's energy-counter power, SM/memory
# clocks and clock event reasons. Never changes clocks or power limits. Needs PyTorch and
# nvidia-ml-py (pynvml); run by scripts/device-calibration.sh, writes $OUT/power-probe.json.
import json, os, sys, threading, time

import pynvml
import torch

OUT = os.environ.get("OUT", ".")
dev = torch.device("cuda:0")
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)


def reasons_now():
    try:
        return pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
    except Exception:
        return pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)


REASON_NAMES = {
    0x1: "gpu_idle", 0x2: "app_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
    0x100: "display_clocks",
}


class Sampler:
    def __init__(self, period_s=0.01):
        self.period_s, self.rows, self.stop = period_s, [], False
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop:
            self.rows.append((time.perf_counter(),
                              pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                              pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                              pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                              reasons_now(),
                              pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)))
            time.sleep(self.period_s)


def energy_edge():
    """Waits for the next update of the energy counter; returns (time, joules)."""
    e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    while True:
        e = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        if e != e0:
            return time.perf_counter(), e / 1000.0
        time.sleep(0.0005)


def steady(name, step, work_per_step, unit, seconds=4.0, warm_s=1.5):
    """Runs `step` back to back: warm-up, then a window between two energy-counter updates."""
    t_end = time.perf_counter() + warm_s
    while time.perf_counter() < t_end:
        step()
    torch.cuda.synchronize()
    s = Sampler()
    s.t.start()
    t0, e0 = energy_edge()
    n = 0
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    start.record()
    t_end = t0 + seconds
    while time.perf_counter() < t_end:
        for _ in range(4):
            step()
        n += 4
        torch.cuda.synchronize() if n % 64 == 0 else None
    stop.record()
    torch.cuda.synchronize()
    t1, e1 = energy_edge()
    s.stop = True
    s.t.join()
    dev_s = start.elapsed_time(stop) / 1000.0
    rows = [r for r in s.rows if t0 <= r[0] <= t1]
    reasons = 0
    for r in rows:
        reasons |= r[4]
    row = {
        "load": name, "steps": n, "device_s": dev_s, "window_s": t1 - t0,
        "rate": work_per_step * n / dev_s, "rate_unit": unit,
        "power_w": (e1 - e0) / (t1 - t0),
        "nvml_power_usage_w_median": sorted(r[3] for r in rows)[len(rows) // 2] if rows else None,
        "sm_mhz_mean": sum(r[1] for r in rows) / max(1, len(rows)),
        "sm_mhz_min": min((r[1] for r in rows), default=None),
        "sm_mhz_max": max((r[1] for r in rows), default=None),
        "mem_mhz_mean": sum(r[2] for r in rows) / max(1, len(rows)),
        "temp_c_max": max((r[5] for r in rows), default=None),
        "reasons": [v for k, v in REASON_NAMES.items() if reasons & k],
        "samples": len(rows),
    }
    print(f"{name:28s} {row['rate']:10.1f} {unit:8s} {row['power_w']:7.1f} W  "
          f"SM {row['sm_mhz_mean']:6.0f} MHz ({row['sm_mhz_min']}-{row['sm_mhz_max']})  "
          f"mem {row['mem_mhz_mean']:5.0f}  {row['temp_c_max']} C  {','.join(row['reasons'])}",
          flush=True)
    return row


def idle(seconds=6.0):
    torch.cuda.synchronize()
    time.sleep(2.0)
    s = Sampler(0.05)
    s.t.start()
    t0, e0 = energy_edge()
    time.sleep(seconds)
    t1, e1 = energy_edge()
    s.stop = True
    s.t.join()
    rows = [r for r in s.rows if t0 <= r[0] <= t1]
    row = {"load": "idle (context held)", "window_s": t1 - t0, "power_w": (e1 - e0) / (t1 - t0),
           "sm_mhz_mean": sum(r[1] for r in rows) / max(1, len(rows)),
           "sm_mhz_max": max((r[1] for r in rows), default=None),
           "mem_mhz_mean": sum(r[2] for r in rows) / max(1, len(rows))}
    print(f"{row['load']:28s} {'':19s} {row['power_w']:7.1f} W  SM {row['sm_mhz_mean']:6.0f} MHz "
          f"(max {row['sm_mhz_max']})", flush=True)
    return row


def main():
    def safe(fn):
        try:
            return fn()
        except Exception as e:  # an NVML query this driver lacks: say so, go on
            return f"unavailable: {e}"
    info = {
        "name": safe(lambda: pynvml.nvmlDeviceGetName(h)),
        "driver": safe(pynvml.nvmlSystemGetDriverVersion),
        "enforced_power_limit_w": safe(lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0),
        "power_limit_constraints_w": safe(lambda: [x / 1000.0 for x in pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h)]),
        "default_power_limit_w": safe(lambda: pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000.0),
        "max_sm_mhz": safe(lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)),
        "max_mem_mhz": safe(lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM)),
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
        "torch": torch.__version__,
    }
    print(json.dumps(info), flush=True)
    rows = [idle()]
    g = torch.Generator(device=dev).manual_seed(1)

    def gemm_load(m, n, k, label=None):
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16, generator=g)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16, generator=g)
        c = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        return steady(label or f"gemm bf16 {m}x{n}x{k}", lambda: torch.matmul(a, b, out=c),
                      2.0 * m * n * k / 1e12, "TFLOP/s")

    rows.append(gemm_load(8192, 8192, 8192))
    rows.append(idle(3.0))
    rows.append(gemm_load(8192, 3072, 1024))       # the 3B shard's fc2-like shape
    rows.append(gemm_load(16384, 16384, 2048))
    rows.append(gemm_load(1024, 1024, 65536, "gemm bf16 1024x1024x65536 (few tiles)"))
    rows.append(idle(3.0))
    # Device-to-device copy: 2 x 4 GiB of traffic per step.
    x = torch.empty(1 << 31, device=dev, dtype=torch.float16)
    y = torch.empty_like(x)
    x.normal_()
    rows.append(steady("copy d2d 4 GiB", lambda: y.copy_(x), 2.0 * x.numel() * 2 / 1e9, "GB/s"))
    del x, y
    # L2-resident fp32 elementwise FMA (32 MiB): CUDA cores + L2, little HBM.
    z = torch.randn(8 << 20, device=dev, dtype=torch.float32, generator=g)
    rows.append(steady("fma fp32 L2-resident 32 MiB", lambda: z.mul_(1.0000001).add_(1e-7),
                       2.0 * z.numel() / 1e12, "TFLOP/s"))
    del z
    rows.append(idle(3.0))
    # GEMM at ~50 % duty cycle: one 8192^3 GEMM then a device-side sleep of about as long.
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16, generator=g)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16, generator=g)
    c = torch.empty_like(a)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(20):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    gemm_s = (time.perf_counter() - t) / 20
    cycles = int(gemm_s * 1.98e9)

    def duty():
        torch.matmul(a, b, out=c)
        torch.cuda._sleep(cycles)
    rows.append(steady("gemm 8192^3 + equal sleep", duty, 2.0 * 8192 ** 3 / 1e12, "TFLOP/s"))
    rows.append(idle(4.0))
    with open(os.path.join(OUT, "power-probe.json"), "w") as f:
        json.dump({"device": info, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
