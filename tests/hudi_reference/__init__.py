"""Apache Hudi itself as the tests' reference: its Spark bundle, fetched from Maven Central by the
tests, runs in a server process of its own (see client.py and server.py)."""

from hudi_reference.client import HudiError, HudiReference
from hudi_reference.environment import HUDI_0_15, HUDI_1_1, HudiVersion, ReferenceUnavailable

__all__ = ["HUDI_0_15", "HUDI_1_1", "HudiError", "HudiReference", "HudiVersion", "ReferenceUnavailable"]
