#!/usr/bin/env bash
# The project's test command: installs amqpd with its test, dev and spark extras, makes sure the reference
# RabbitMQ is running (the interop suite needs it), checks lint, format and types (ruff, mypy), and runs the
# whole suite (tests/ and interop/).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/unit -q`.
set -euo pipefail
cd "$(dirname "$0")/.."

PIP_ROOT_USER_ACTION=ignore python -m pip install --quiet --disable-pip-version-check -e '.[test,dev,spark]'
bash scripts/ensure-rabbitmq.sh

set +e
# Lint, format and types are checked on every run; they fail it after the tests have run and reported.
python -m ruff check . && python -m ruff format --check . && python -m mypy amqpd store
checks=$?
python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "test.sh: pytest collected no tests; that is a failure" >&2
    exit 1
fi
if [ "$rc" -eq 0 ] && [ "$checks" -ne 0 ]; then
    echo "test.sh: the tests passed but ruff or mypy did not (run: ruff format . && ruff check . && mypy amqpd store)" >&2
    exit 1
fi
exit "$rc"
