# SPDX-License-Identifier: Apache-2.0
"""The PEP 517 build backend of `pip install .`: it drives the project's CMake and packs the wheel.

CMake builds the Python module (kareus._kareus, for the interpreter running pip), the `kareus`
program and the clock watcher; the wheel holds the package (the module, the pure-Python files,
kareus.torch, the type stubs), the GPU and model presets in kareus/data, and the program, which
the `kareus` command on PATH runs (kareus.__main__).

The wheel is written with the standard library (zipfile, hashlib), so the build needs nothing
from the Python package index: no setuptools, no wheel package, no network. It needs what the
project's build needs (scripts/setup.sh installs it: CMake, a C++20 compiler, python3-dev,
pybind11-dev and the libraries CMakeLists.txt looks for).

Settings (environment, or pip's --config-settings KEY=VALUE):
  KAREUS_WHEEL_BUILD_DIR  the CMake build folder (default: build-wheel/<interpreter tag> in the
                          checkout, kept between builds so a rebuild compiles only changes);
                          an existing configured build (e.g. the test suite's) is reused when it
                          was configured for this interpreter
  KAREUS_WHEEL_JOBS       parallel compile jobs (default: the CPU count)
"""
import base64
import csv
import hashlib
import io
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

NAME = "kareus"
ENTRY_POINTS = "[console_scripts]\nkareus = kareus.__main__:main\n"
SOURCE = pathlib.Path(__file__).resolve().parents[2]


def _version():
    """The project's version, from CMakeLists.txt's project() line (one place to change it)."""
    for line in (SOURCE / "CMakeLists.txt").read_text().splitlines():
        if line.startswith("project(kareus VERSION "):
            return line.split()[2]
    raise RuntimeError("CMakeLists.txt has no `project(kareus VERSION x.y.z ...)` line")


def _setting(config_settings, key, default=None):
    if config_settings and config_settings.get(key):
        return config_settings[key]
    return os.environ.get(key) or default


def _tag():
    """This interpreter's wheel tag, e.g. cp311-cp311-linux_x86_64 (PEP 425)."""
    impl = sys.implementation.name
    if impl != "cpython":
        raise RuntimeError(f"kareus builds for CPython; this is {impl}")
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{python}-{python}-{platform}"


def _metadata():
    readme = (SOURCE / "README.md").read_text(encoding="utf-8")
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {_version()}\n"
            "Summary: Kareus: per-instruction GPU clocks and communication-kernel SMs that "
            "cut the energy of large-model training\n"
            "License: Apache-2.0\nRequires-Python: >=3.9\n"
            "Provides-Extra: torch\nRequires-Dist: torch; extra == \"torch\"\n"
            "Description-Content-Type: text/markdown\n\n" + readme)


def _configured_for_this_python(build_dir):
    """True when build_dir's CMake cache was configured with a Python of this version."""
    cache = build_dir / "CMakeCache.txt"
    if not cache.exists():
        return False
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    module = list((build_dir / "python" / "kareus").glob("_kareus*.so"))
    return not module or all(m.name == "_kareus" + suffix for m in module)


def _build(config_settings):
    """Configures (once) and builds the module, the program and the watcher; their folder."""
    tag = _tag()
    build_dir = pathlib.Path(_setting(config_settings, "KAREUS_WHEEL_BUILD_DIR",
                                      SOURCE / "build-wheel" / tag)).resolve()
    jobs = _setting(config_settings, "KAREUS_WHEEL_JOBS", str(os.cpu_count() or 2))
    if shutil.which("cmake") is None:
        raise RuntimeError("pip install . needs CMake (and the project's build packages): "
                           "run scripts/setup.sh, or apt-get install cmake")
    if not _configured_for_this_python(build_dir):
        if (build_dir / "CMakeCache.txt").exists():
            raise RuntimeError(f"{build_dir} was configured for another Python; remove it or "
                               "set KAREUS_WHEEL_BUILD_DIR to another folder")
        subprocess.run(["cmake", "-S", str(SOURCE), "-B", str(build_dir),
                        "-DCMAKE_BUILD_TYPE=Release", "-DKAREUS_BUILD_TESTS=OFF",
                        "-DKAREUS_BUILD_BENCHMARKS=OFF", "-DKAREUS_WITH_MPI=OFF",
                        "-DKAREUS_WITH_CUDA=OFF", f"-DPython_EXECUTABLE={sys.executable}"],
                       check=True, stdout=sys.stderr)
    subprocess.run(["cmake", "--build", str(build_dir), "--parallel", jobs, "--target",
                    "kareus_python", "kareus"], check=True, stdout=sys.stderr)
    package = build_dir / "python" / "kareus"
    if not any(package.glob("_kareus*.so")):
        raise RuntimeError(f"CMake built no Python module in {package}: the configure step "
                           "said why (python3-dev and pybind11-dev are needed)")
    return build_dir


def _wheel_files(build_dir):
    """(path in the wheel, bytes, executable) of every file of the package."""
    package = build_dir / "python" / "kareus"
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            yield (f"kareus/{path.relative_to(package).as_posix()}", path.read_bytes(),
                   os.access(path, os.X_OK))
    for path in sorted((SOURCE / "data").rglob("*")):
        if path.is_file():
            yield f"kareus/data/{path.relative_to(SOURCE / 'data').as_posix()}", path.read_bytes(), False
    yield "kareus/kareus-cli", (build_dir / "apps" / "kareus" / "kareus").read_bytes(), True


def _record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _write_wheel(wheel_directory, files):
    dist_info = f"{NAME}-{_version()}.dist-info"
    name = f"{NAME}-{_version()}-{_tag()}.whl"
    entries = list(files)
    entries.append((f"{dist_info}/METADATA", _metadata().encode(), False))
    entries.append((f"{dist_info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: kareus_build_backend"
                                           f"\nRoot-Is-Purelib: false\nTag: {_tag()}\n").encode(),
                    False))
    entries.append((f"{dist_info}/entry_points.txt", ENTRY_POINTS.encode(), False))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for path, data, _ in entries:
        writer.writerow([path, _record_hash(data), len(data)])
    writer.writerow([f"{dist_info}/RECORD", "", ""])
    entries.append((f"{dist_info}/RECORD", record.getvalue().encode(), False))
    target = pathlib.Path(wheel_directory) / name
    partial = target.with_name(target.name + ".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as wheel:
        for path, data, executable in entries:
            info = zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0))
            # A regular file's mode (installers keep the x bits only with S_IFREG set).
            info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    os.replace(partial, target)
    return name


# PEP 517 hooks.

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    """The wheel's metadata without building it (pip asks for it before build_wheel)."""
    dist_info = pathlib.Path(metadata_directory) / f"{NAME}-{_version()}.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(_metadata(), encoding="utf-8")
    (dist_info / "entry_points.txt").write_text(ENTRY_POINTS)
    return dist_info.name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _wheel_files(_build(config_settings)))


def build_sdist(sdist_directory, config_settings=None):
    """The checkout's tracked files (git ls-files), or every file outside build folders."""
    try:
        listed = subprocess.run(["git", "-C", str(SOURCE), "ls-files", "-z"], check=True,
                                capture_output=True).stdout.decode().split("\0")
        files = [f for f in listed if f and (SOURCE / f).is_file()]
    except (OSError, subprocess.CalledProcessError):
        files = [p.relative_to(SOURCE).as_posix() for p in SOURCE.rglob("*")
                 if p.is_file() and not p.relative_to(SOURCE).parts[0].startswith(("build", "."))]
    base = f"{NAME}-{_version()}"
    name = f"{base}.tar.gz"
    with tarfile.open(pathlib.Path(sdist_directory) / name, "w:gz") as sdist:
        for path in sorted(files):
            sdist.add(SOURCE / path, arcname=f"{base}/{path}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        sdist.addfile(info, io.BytesIO(data))
    return name
