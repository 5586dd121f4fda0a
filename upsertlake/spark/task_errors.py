"""Errors a Spark task raises, raised again on the driver as themselves.

PySpark hands the driver a task's exception as a `PythonException` that holds only its text. So a
task function wrapped by `reraised_named` carries an upsertlake error (bad input found while
preparing the batch) or an OSError (a partition path taken by a file) in that text, pickled, and
`raised_by_task` unpickles it: the caller gets the very error the in-process engine raises.
"""

from __future__ import annotations

import base64
import functools
import pickle
from collections.abc import Callable, Iterator
from typing import TypeVar, cast

from upsertlake.errors import UpsertlakeError

T = TypeVar("T")
_MARK = "upsertlake-task-error:"
_END = ":end"


class TaskError(RuntimeError):
    """An upsertlake error or OSError of a task, its readable text and the pickled original."""


def reraised_named(task: Callable[..., Iterator[T]]) -> Callable[..., Iterator[T]]:
    """Wrap a task function (a generator, as `mapInArrow` takes) so that the errors a caller
    handles reach the driver whole."""

    @functools.wraps(task)
    def wrapper(*args: object) -> Iterator[T]:
        try:
            yield from task(*args)
        except (UpsertlakeError, OSError) as exc:
            pickled = base64.b64encode(pickle.dumps(exc)).decode()
            raise TaskError(f"{type(exc).__name__}: {exc} [{_MARK}{pickled}{_END}]") from exc

    return wrapper


def raised_by_task(exc: BaseException) -> BaseException:
    """The error a task wrapped by `reraised_named` raised, if `exc` carries one; else `exc`."""
    text = str(exc)
    start = text.rfind(_MARK)
    end = text.find(_END, start)
    if start < 0 or end < 0:
        return exc
    try:
        return cast(BaseException, pickle.loads(base64.b64decode(text[start + len(_MARK):end])))
    except (ValueError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return exc
