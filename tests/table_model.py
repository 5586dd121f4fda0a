"""What a table must hold after a sequence of writes, whoever wrote them: the tests' model of Hudi's
write semantics (README, Semantics), independent of both implementations.

A record is a dict of data columns keyed by its record key `id`; `ts` is its ordering value and
`_hoodie_is_deleted` marks a delete. Per write:
- upsert: the batch is first deduplicated by key (under event time the largest `ts`; the
  generators never give one key twice with the same `ts`, which Hudi leaves undefined), then each
  record merges with the stored one: under event time a smaller `ts` loses (the stored row stays,
  in its partition), otherwise the record wins; a winning `_hoodie_is_deleted` record removes the
  key; under a global index a winning record for another partition moves the key there.
- insert and bulk insert: the generators give only keys not stored, once each, so they add rows.
- delete: the keys are removed whatever their ordering value.
The model also keeps the state after every completed write, for time travel and restores.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Row = dict[str, object]


@dataclass
class TableModel:
    """The rows of a table, and its history by instant."""

    event_time: bool = True
    rows: dict[str, Row] = field(default_factory=dict)
    # (instant time, the time from which readers see it, the rows after it): readers of version 6
    # see a write from its instant time on, those of version 8 and later from its completion time
    history: list[tuple[str, str, dict[str, Row]]] = field(default_factory=list)

    def upsert(self, records: list[Row]) -> None:
        for record in self._deduplicated(records):
            stored = self.rows.get(str(record["id"]))
            if stored is not None and self.event_time and _ts(record) < _ts(stored):
                continue
            if record.get("_hoodie_is_deleted"):
                self.rows.pop(str(record["id"]), None)
            else:
                self.rows[str(record["id"])] = record

    def insert(self, records: list[Row]) -> None:
        for record in records:
            assert record["id"] not in self.rows, f"the generator inserts new keys only: {record['id']}"
            if not record.get("_hoodie_is_deleted"):
                self.rows[str(record["id"])] = record

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            self.rows.pop(key, None)

    def _deduplicated(self, records: list[Row]) -> list[Row]:
        latest: dict[str, Row] = {}
        for record in records:
            key = str(record["id"])
            if key not in latest or not self.event_time or _ts(record) > _ts(latest[key]):
                latest[key] = record
        return list(latest.values())

    def committed(self, instant: str, visible: str) -> None:
        """The write `instant` completed, seen by readers from `visible` on: remember its rows."""
        self.history.append((instant, visible, dict(self.rows)))

    def as_of(self, time: str) -> dict[str, Row]:
        """The rows a reader sees as of `time`: those of the last write visible then."""
        state: dict[str, Row] = {}
        for _, visible, rows in self.history:
            if visible <= time:
                state = rows
        return state

    def restore(self, instant: str) -> None:
        """The table went back to the write `instant`: later writes are gone."""
        self.history = [h for h in self.history if h[0] <= instant]
        self.rows = dict(self.history[-1][2]) if self.history else {}


def _ts(record: Row) -> int:
    return int(record["ts"])  # type: ignore[call-overload]
