-- A measurement store (schema version 1, src/measure/store.cc) with the identity the store
-- fuzzer opens it with; scripts/fuzz.sh turns it into seed files with the sqlite3 shell.
PRAGMA journal_mode=DELETE;
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE measurements(
  gpu TEXT NOT NULL, workload TEXT NOT NULL, partition TEXT NOT NULL,
  freq_mhz INTEGER NOT NULL, sms INTEGER NOT NULL, slot TEXT NOT NULL,
  time_s REAL NOT NULL, energy_j REAL NOT NULL, static_energy_j REAL NOT NULL,
  dynamic_energy_j REAL NOT NULL, realized_freq_mhz REAL NOT NULL, gpu_seconds REAL NOT NULL,
  noise_free INTEGER NOT NULL, measured_at TEXT NOT NULL,
  PRIMARY KEY (gpu, workload, partition, freq_mhz, sms, slot));
INSERT INTO meta VALUES ('format', 'kareus-measurement-store'), ('schema_version', '1'),
  ('gpu', 'A100-SXM4-40GB'), ('workload_signature', 'model=llama3.2-3b'),
  ('backend', 'emulator(time_noise=0.003,energy_noise=0.01)'), ('created_at', '2025-01-01T00:00:00Z');
INSERT INTO measurements VALUES
  ('A100-SXM4-40GB', 'model=llama3.2-3b', 'fwd_attn', 1410, 12, 'linear_0', 0.0021, 0.84, 0.1785, 0.6615, 1395.0, 12.0, 0, '2025-01-01T00:00:00Z'),
  ('A100-SXM4-40GB', 'model=llama3.2-3b', 'fwd_attn', 1110, 6, 'norm_0', 0.0027, 0.71, 0.2295, 0.4805, 1110.0, 12.0, 1, '2025-01-01T00:00:01Z');
