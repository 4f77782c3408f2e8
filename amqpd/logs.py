"""Where the broker's log goes and how it reads: stderr or log_file (reopened on SIGUSR1, for logrotate),
text or JSON lines, one level for everything and one per category (config.LOG_CATEGORIES). uvicorn has no
handler of its own: its records come through ours, and its start-up chatter is below the mgmt category's
default level."""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Any

from amqpd.config import LOG_CATEGORIES, Settings

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Records' attributes that are not the caller's `extra` fields (those go into a JSON line as they are).
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, category (the logger), message, and the
    record's structured fields (a connection's peer, user, vhost...) when the caller gave them."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class ReopenableFileHandler(logging.FileHandler):
    """A log file that SIGUSR1 reopens: after logrotate has moved it away, writing goes on in a new file."""

    def reopen(self) -> None:
        self.acquire()
        try:
            if self.stream is not None:
                self.stream.close()
            self.stream = self._open()
        finally:
            self.release()


_installed: list[logging.Handler] = []  # the handler configure() installed: SIGUSR1 reopens it


def configure(settings: Settings) -> logging.Handler:
    """Installs the one handler every record goes through."""
    handler: logging.Handler
    if settings.log_file:
        handler = ReopenableFileHandler(settings.log_file, encoding="utf-8")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if settings.log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.log_level)
    for name in ("amqpd", "store"):
        logging.getLogger(name).setLevel(settings.log_level)
    # uvicorn's lines ("Started server process", "Uvicorn running on") say what ours already say, once per
    # HTTP listener: below WARNING only when the mgmt category asks for it.
    logging.getLogger("uvicorn").setLevel(settings.log_levels.get("mgmt", "WARNING"))
    logging.getLogger("uvicorn.access").disabled = True  # request lines: the API's own access log is not ours
    for category, level in settings.log_levels.items():
        for name in LOG_CATEGORIES[category]:
            logging.getLogger(name).setLevel(level)
    _installed[:] = [handler]
    return handler


def reopen() -> None:
    for handler in _installed:
        if isinstance(handler, ReopenableFileHandler):
            handler.reopen()


def announce(line: str) -> None:
    """A listener's line: on stdout (scripts and amqpd.testing wait for it), and in the log when the log is a
    file (on a terminal stdout and stderr share the screen: once is enough)."""
    print(line, flush=True)
    if any(isinstance(h, ReopenableFileHandler) for h in _installed):
        logging.getLogger("amqpd").info("%s", line)
