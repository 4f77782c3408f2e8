"""The management API's errors as RabbitMQ answers them: status, `error` and `reason`."""

from __future__ import annotations

from starlette.responses import JSONResponse, Response

from amqpd import errors


class HTTPError(Exception):
    def __init__(self, status: int, error: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.error, self.reason = status, error, reason


class LoginFailed(HTTPError):
    """Wrong credentials (not missing ones): answered after the configured delay, logged and counted."""

    def __init__(self, user: str) -> None:
        super().__init__(401, "not_authorized", "Login failed")
        self.user = user


def not_found() -> HTTPError:
    return HTTPError(404, "Object Not Found", "Not Found")


def bad_request(reason: str) -> HTTPError:
    return HTTPError(400, "bad_request", reason)


def from_amqp(exc: errors.AMQPError) -> HTTPError:
    """A broker refusal as RabbitMQ's API reports it."""
    if exc.code == errors.NOT_FOUND:
        return HTTPError(404, "not_found", exc.text)
    if exc.code == errors.ACCESS_REFUSED:
        return HTTPError(401, "not_authorised", "Access refused.")
    return bad_request(exc.text)


def error_response(exc: HTTPError, from_script: bool = False) -> JSONResponse:
    """from_script: the web UI asked (X-Requested-With), which handles 401 itself; without the challenge
    header the browser does not open its own login dialog over the page."""
    challenge = exc.status == 401 and not from_script
    headers = {"WWW-Authenticate": 'Basic realm="RabbitMQ Management"'} if challenge else None
    return JSONResponse({"error": exc.error, "reason": exc.reason}, status_code=exc.status, headers=headers)


class NoContent(Response):
    def __init__(self, status: int = 204, headers: dict[str, str] | None = None) -> None:
        super().__init__(status_code=status, headers=headers)
