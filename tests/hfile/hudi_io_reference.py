"""Apache Hudi's own HFile writer and reader as a reference: hudi-io 1.2.1 (the newest release)
and its two runtime dependencies, fetched from Maven Central by Maven (tests/hudi_reference), run
through HudiHFile.java (compiled once per test session). Like the Spark reference, it is not
skipped: without Java or Maven the tests that need it fail, saying why."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from hudi_reference.environment import ReferenceUnavailable, maven_jar

HERE = Path(__file__).resolve().parent
ARTIFACTS = [  # hudi-io's runtime dependencies for HFileWriterImpl / HFileReaderImpl with GZ
    "org.apache.hudi:hudi-io:1.2.1",
    "com.google.protobuf:protobuf-java:3.25.5",
    "io.airlift:aircompressor:2.0.3",
]


@dataclass
class Dump:
    """What Hudi's reader read from a file."""

    entries: int
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
        jars = [str(maven_jar(coordinate, "Apache Hudi's HFile reference")) for coordinate in ARTIFACTS]
        self.classpath = os.pathsep.join([*jars, str(workdir)])
        done = subprocess.run(["javac", "-nowarn", "-d", str(workdir), "-cp", self.classpath, str(HERE / "HudiHFile.java")],
                              check=False, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise ReferenceUnavailable(f"compiling HudiHFile.java failed:\n{done.stderr}")

    def _java(self, *args: str) -> str:
        result = subprocess.run(["java", "-cp", self.classpath, "HudiHFile", *args], check=False,
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
        self._java("write", *map(str, specs))
        return {name: Path(f"{spec}.hfile").read_bytes() for name, spec in zip(cases, specs, strict=True)}

    def read(self, data: bytes, names: list[str]) -> Dump:
        """What Hudi's reader reads from `data`: the entries, and the file info and meta blocks named."""
        path = self.workdir / "read.hfile"
        path.write_bytes(data)
        dump = Dump(entries=-1)
        for line in self._java("read", str(path), *names).splitlines():
            kind, *rest = line.split(" ")
            if kind == "entries":
                dump.entries = int(rest[0])
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
