"""What the Apache Hudi reference needs, fetched by the tests and cached between runs.

- Hudi's Spark bundles, fetched with the ordinary Maven client into the local Maven repository
  (`~/.m2/repository`, Maven's own cache);
- a virtual environment with a PySpark that the bundles support (Hudi 1.1 supports Spark 3.3 to
  4.0, Hudi 0.15 up to 3.5; the tests' own PySpark is 4.x), under the test cache folder
  (`$UPSERTLAKE_TEST_CACHE`, default `~/.cache/upsertlake-tests`).

Setup runs under a file lock, so test runs side by side share one download. A step that fails
raises `ReferenceUnavailable` with the command's own output: the tests that need the reference fail
with that reason; none is skipped.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PYSPARK = "3.5.5"  # a Spark both bundles below support
# what the reference's interpreter holds besides PySpark: Arrow to hand rows back (PySpark 3.5 was
# built against NumPy 1)
REFERENCE_PACKAGES = (f"pyspark=={PYSPARK}", "pyarrow==17.0.0", "numpy<2")
BUNDLE = "org.apache.hudi:hudi-spark3.5-bundle_2.12:{version}"


@dataclass(frozen=True)
class HudiVersion:
    """A Hudi release the tests run, and the table versions it is the reference for."""

    version: str
    table_versions: tuple[int, ...]


HUDI_1_1 = HudiVersion("1.1.1", (8, 9))
HUDI_0_15 = HudiVersion("0.15.0", (6,))


class ReferenceUnavailable(RuntimeError):
    """The reference could not be set up (a refused download, a failed install)."""


def cache_root() -> Path:
    root = Path(os.environ.get("UPSERTLAKE_TEST_CACHE", Path.home() / ".cache" / "upsertlake-tests"))
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextmanager
def _setup_lock():
    with open(cache_root() / ".setup.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run(argv: list[str], what: str, timeout: float) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ReferenceUnavailable(f"{what}: {' '.join(argv)}: {error}") from error
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-30:]
        raise ReferenceUnavailable(f"{what} failed ({' '.join(argv)}, exit {done.returncode}):\n" + "\n".join(tail))


def maven_jar(coordinate: str, what: str) -> Path:
    """The jar of `group:artifact:version` in the local Maven repository, fetched by Maven (the
    artifact alone) when absent; `what` names it in errors."""
    group, artifact, version = coordinate.split(":")
    repository = Path(os.environ.get("UPSERTLAKE_MAVEN_REPO", Path.home() / ".m2" / "repository"))
    jar = repository / group.replace(".", "/") / artifact / version / f"{artifact}-{version}.jar"
    with _setup_lock():
        if not jar.is_file():
            _run(
                ["mvn", "-B", "-q", f"-Dmaven.repo.local={repository}", "dependency:get",
                 f"-Dartifact={coordinate}", "-Dtransitive=false"],
                f"fetching {what} {coordinate} from Maven Central",
                timeout=900,
            )
        if not jar.is_file():
            raise ReferenceUnavailable(f"Maven reported success but {jar} is missing")
    return jar


def bundle_jar(hudi: HudiVersion) -> Path:
    """Hudi's Spark bundle in the local Maven repository, fetched by Maven when absent."""
    return maven_jar(BUNDLE.format(version=hudi.version), "Apache Hudi's Spark bundle")


def reference_python() -> Path:
    """The interpreter of a virtual environment holding REFERENCE_PACKAGES, made once."""
    venv = cache_root() / ("hudi-reference-" + hashlib.sha1(" ".join(REFERENCE_PACKAGES).encode()).hexdigest()[:10])
    python = venv / "bin" / "python"
    done = venv / ".complete"
    with _setup_lock():
        if not done.is_file():
            _run(
                [sys.executable, "-m", "venv", "--clear", str(venv)],
                "creating the reference's virtual environment",
                300,
            )
            _run(
                [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *REFERENCE_PACKAGES],
                f"installing PySpark {PYSPARK} for Apache Hudi's Spark bundle",
                timeout=1800,
            )
            done.write_text("\n".join(REFERENCE_PACKAGES))
    return python
