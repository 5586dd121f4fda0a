"""Apache Hudi's own HFile writer and reader as a reference: hudi-io 1.2.1 (the newest release)
and its two runtime dependencies, fetched from Maven Central by Maven (tests/hudi_reference), run
through HudiHFileWrite.java and HudiHFileRead.java (compiled once per test session); the reader
also on the class path of the Hudi 1.1.1 and 0.15.0 Spark bundles the Spark reference uses, and
HBase's reader as Hudi 0.15 opens metadata-table files (HBaseHFileRead.java, on the 0.15.0 bundle
with PySpark's Hadoop jars). Like
the Spark reference, it is not skipped: without Java or Maven the tests that need it fail, saying
why."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from hudi_reference.environment import HUDI_0_15, HUDI_1_1, ReferenceUnavailable, bundle_jar, maven_jar

HERE = Path(__file__).resolve().parent / "hfile"  # the Java programs it compiles
ARTIFACTS = [  # hudi-io's runtime dependencies for HFileWriterImpl / HFileReaderImpl with GZ
    "org.apache.hudi:hudi-io:1.2.1",
    "com.google.protobuf:protobuf-java:3.25.5",
    "io.airlift:aircompressor:2.0.3",
]


@dataclass
class Dump:
    """What Hudi's reader read from a file."""

    entries: int
    found: int = -1  # entries a seek to their own key found (each distinct key once)
    pairs: list[tuple[bytes, bytes]] = field(default_factory=list)
    info: dict[str, bytes] = field(default_factory=dict)
    meta: dict[str, bytes] = field(default_factory=dict)


def _unhex(text: str) -> bytes:
    return b"" if text == "-" else bytes.fromhex(text)


def _hex(data: bytes) -> str:
    return data.hex() if data else "-"


class HudiHFile:
    """The compiled reference, in `workdir`."""

    def __init__(self, workdir: Path) -> None:
        missing = [tool for tool in ("java", "javac") if shutil.which(tool) is None]
        if missing:
            raise ReferenceUnavailable(f"Apache Hudi's HFile reference needs {' and '.join(missing)} on PATH")
        self.workdir = workdir
        self.hudi_io = [str(maven_jar(coordinate, "Apache Hudi's HFile reference")) for coordinate in ARTIFACTS]
        self._compile(self.hudi_io, "HudiHFileWrite.java", "HudiHFileRead.java")
        self._hbase_compiled = False

    def _compile(self, jars: list[str], *sources: str) -> None:
        done = subprocess.run(["javac", "-nowarn", "-d", str(self.workdir), "-cp", os.pathsep.join(jars),
                               *(str(HERE / source) for source in sources)],
                              check=False, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise ReferenceUnavailable(f"compiling the HFile reference {', '.join(sources)} failed:\n{done.stderr}")

    def _hbase(self) -> list[str]:
        """Hudi 0.15.0's Spark bundle (HBase's reader, shaded) and PySpark's Hadoop jars."""
        jars = [str(bundle_jar(HUDI_0_15)), str(Path(pyspark.__file__).parent / "jars" / "*")]
        if not self._hbase_compiled:
            self._compile(jars, "HBaseHFileRead.java")
            self._hbase_compiled = True
        return jars

    def _java(self, jars: list[str], *args: str) -> str:
        result = subprocess.run(["java", "-cp", os.pathsep.join([*jars, str(self.workdir)]), *args], check=False,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def write(self, cases: dict[str, Case]) -> dict[str, bytes]:
        """The file Hudi's writer writes for each case (one JVM for them all)."""
        specs = []
        for name, case in cases.items():
            spec = self.workdir / f"{name}.spec"
            lines = [f"block_size {case.block_size}", f"codec {'GZIP' if case.codec == 'GZ' else 'NONE'}",
                     f"create_time {case.create_time}"]
            lines += [f"info {k} {_hex(v)}" for k, v in case.file_info.items()]
            lines += [f"meta {k} {_hex(v)}" for k, v in case.meta_blocks.items()]
            lines += [f"kv {_hex(k.encode())} {_hex(v)}" for k, v in case.entries]
            spec.write_text("\n".join(lines) + "\n", encoding="utf-8")
            specs.append(spec)
        self._java(self.hudi_io, "HudiHFileWrite", *map(str, specs))
        return {name: Path(f"{spec}.hfile").read_bytes() for name, spec in zip(cases, specs, strict=True)}

    def read(self, data: bytes, info: list[str], meta: list[str], release: str = "1.2.1") -> Dump:
        """What Hudi's reader of `release` (1.2.1: hudi-io; 1.1.1 and 0.15.0: their Spark bundles;
        "hbase": HBase's reader as Hudi 0.15 opens metadata-table files) reads from `data`: the
        entries, how many a seek to their key finds, the file info entries and meta blocks named."""
        main = "HBaseHFileRead" if release == "hbase" else "HudiHFileRead"
        jars = {"1.2.1": lambda: self.hudi_io, "1.1.1": lambda: [str(bundle_jar(HUDI_1_1))],
                "0.15.0": lambda: [str(bundle_jar(HUDI_0_15))], "hbase": self._hbase}[release]()
        path = self.workdir / "read.hfile"
        path.write_bytes(data)
        dump = Dump(entries=-1)
        names = [f"info:{name}" for name in info] + [f"meta:{name}" for name in meta]
        for line in self._java(jars, main, str(path), *names).splitlines():
            kind, *rest = line.split(" ")
            if kind not in ("entries", "found", "kv", "info", "meta"):
                continue  # a log line of Hadoop's
            if kind == "entries":
                dump.entries = int(rest[0])
            elif kind == "found":
                dump.found = int(rest[0])
            elif kind == "kv":
                dump.pairs.append((_unhex(rest[0]), _unhex(rest[1])))
            else:
                getattr(dump, kind)[rest[0]] = _unhex(rest[1])
        return dump


@dataclass
class Case:
    """The inputs of one file: sorted (str key, value) entries and the writer's settings."""

    entries: list[tuple[str, bytes]]
    block_size: int = 1024 * 1024
    codec: str = "NONE"
    create_time: int = 1_700_000_000_000
    file_info: dict[str, bytes] = field(default_factory=dict)
    meta_blocks: dict[str, bytes] = field(default_factory=dict)
