"""With encryption on, logs carry what happened and where, never what a run holds.

An exception's text can hold tool arguments or downstream answers (an IBAN in a bank's error),
and Temporal's worker logs every failed activity with its traceback. `redact_logs` strips
exception text and tracebacks from log records, keeping the exception type and the step, run
and workflow ids Temporal adds to each record. A warning's text (which may quote a value) is
withheld too, once warnings go through logging (`route_warnings`).
"""

from __future__ import annotations

import logging
import warnings

WITHHELD = "details withheld: encryption is on"


class Redact(logging.Filter):
    """Replace a record's exception with its type name; the record itself is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Strip the exception text and traceback, name the exception's type."""
        if record.exc_info and record.exc_info[1] is not None:
            err = record.exc_info[1]
            kind = type(err).__name__
            if isinstance(getattr(err, "type", None), str):  # an ApplicationError names its cause
                kind = f"{kind} {err.type}"  # type: ignore[attr-defined]
            record.msg = f"{record.getMessage()} [{kind}; {WITHHELD}]"
            record.args = None
            record.exc_info = None
            record.exc_text = None
            record.stack_info = None
        return True


_REDACT = Redact()


def redacting() -> bool:
    """Whether `redact_logs` was installed: what a run holds stays out of this process's logs."""
    return _installed


_installed = False


def route_warnings() -> None:
    """Send `warnings` through logging (`py.warnings`), its handlers and filters, not stderr."""
    logging.captureWarnings(True)


def _withheld_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: object = None,
    line: str | None = None,
) -> None:
    logging.getLogger("py.warnings").warning(
        "%s at %s:%d [%s]", category.__name__, filename, lineno, WITHHELD
    )


def redact_logs() -> None:
    """Install the filter on every handler of the root logger and the last-resort one.

    Warnings go through logging too, each by its category and place only.
    """
    global _installed
    _installed = True
    route_warnings()
    warnings.showwarning = _withheld_warning
    handlers = [*logging.getLogger().handlers]
    if logging.lastResort is not None:
        handlers.append(logging.lastResort)
    for handler in handlers:
        if _REDACT not in handler.filters:
            handler.addFilter(_REDACT)
