"""The amqpd pytest plugin as a user meets it: test files run by pytest (pytester) with the plugin loaded the way
an installed amqpd loads it, and what those runs leave behind checked afterwards."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from amqpd.testing import BrokerProcess, ManagementClient

pytest_plugins = ["pytester"]

PLUGIN = "amqpd.testing.pytest_plugin"
REFERENCE = "amqp://guest:guest@127.0.0.1:5672/%2F"
REFERENCE_MANAGEMENT = "http://127.0.0.1:15672"


def _registered() -> bool:
    return any(ep.name == "amqpd" and ep.value == PLUGIN for ep in entry_points(group="pytest11"))


# Installed amqpd (pip install -e .) registers the plugin itself; a checkout on PYTHONPATH is loaded with -p.
LOAD = [] if _registered() else ["-p", PLUGIN]


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess(*LOAD, "-p", "no:cacheprovider", *args)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


def _broker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "amqpd-broker"]


ISOLATION = """
import pika, pytest
from amqpd.testing import BrokerProcess, ManagementClient

def channel(url):
    connection = pika.BlockingConnection(pika.URLParameters(url))
    return connection, connection.channel()

def test_a_leaves_messages_a_consumer_and_an_unacked_delivery(amqp_url):
    connection, ch = channel(amqp_url)
    ch.queue_declare("jobs")
    for n in range(3):
        ch.basic_publish("", "jobs", b"left by a %d" % n)
    ch.basic_get("jobs")  # unacked, connection left open
    ch.basic_consume("jobs", lambda *a: None)

def test_b_declares_the_same_queue_and_finds_it_empty(amqp_url):
    connection, ch = channel(amqp_url)
    assert ch.queue_declare("jobs").method.message_count == 0
    assert ch.queue_declare("jobs", passive=True).method.consumer_count == 0
    connection.close()

def test_c_sees_no_vhost_but_its_own(amqp_url, amqpd_broker):
    admin = ManagementClient(amqpd_broker.management_url)
    vhosts = {v["name"] for v in admin.request("GET", "/vhosts")}
    users = {u["name"] for u in admin.request("GET", "/users")}
    own = amqp_url.rsplit("/", 1)[1]
    assert vhosts == {"/", own}
    assert users == {"guest", own}

def test_d_the_tests_user_may_open_no_other_vhost(amqp_url):
    connection, ch = channel(amqp_url)  # its own, yes
    connection.close()
    with pytest.raises(pika.exceptions.AMQPConnectionError, match="NOT_ALLOWED"):
        channel(amqp_url.rsplit("/", 1)[0] + "/%2F")
"""


def test_each_test_gets_a_vhost_of_its_own_and_leaves_nothing_behind(pytester: pytest.Pytester) -> None:
    # the broker in a thread (the default): each test's vhost is made by calling the broker, and the management
    # API starts when test_c asks for it
    pytester.makepyfile(ISOLATION)
    _run(pytester).assert_outcomes(passed=4)


def test_the_session_broker_works_in_a_subprocess_too(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(ISOLATION)
    _run(pytester, "--amqpd-mode=process").assert_outcomes(passed=4)


RECORD = """
import json, os, pika, pytest
from amqpd.testing.process import BrokerProcess

@pytest.mark.parametrize("n", range({count}))
def test_record(n, amqpd_broker, amqp_url):
    pika.BlockingConnection(pika.URLParameters(amqp_url)).close()
    pid = amqpd_broker.proc.pid if isinstance(amqpd_broker, BrokerProcess) else None
    http = (amqpd_broker.management_url, amqpd_broker.metrics_url)
    ports = [amqpd_broker.port] + [int(u.rsplit(":", 1)[1]) for u in http]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join({out!r}, f"{{worker}}-{{n}}.json"), "w") as f:
        json.dump({{"worker": worker, "ports": ports, "pid": pid, "url": amqpd_broker.url}}, f)
"""


def _records(out: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_no_thread_process_or_port_is_left_after_the_session(pytester: pytest.Pytester, mode: str) -> None:
    out = pytester.mkdir("records")
    pytester.makepyfile(RECORD.format(count=2, out=str(out)))
    _run(pytester, f"--amqpd-mode={mode}").assert_outcomes(passed=2)
    (record, _) = _records(out)
    assert not _broker_threads()
    assert [port for port in record["ports"] if _listening(port)] == []  # type: ignore[attr-defined]
    if mode == "process":
        with pytest.raises(ProcessLookupError):
            os.kill(record["pid"], 0)  # type: ignore[arg-type]


def _amqpd_children() -> list[int]:
    """The live `python -m amqpd` processes started by this process (pytester runs pytest in it)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[1]) == os.getpid() and b"amqpd" in cmdline[1:3]:
            found.append(int(stat.parent.name))
    return found


def test_a_broker_launched_during_collection_but_never_used_is_stopped(pytester: pytest.Pytester) -> None:
    # the broker boots while pytest collects, as soon as a test that needs it is collected; -k then deselects it
    pytester.makepyfile("def test_with_broker(amqpd_broker): pass\ndef test_without(): pass")
    before = _amqpd_children()
    _run(pytester, "--amqpd-mode=process", "-k", "without").assert_outcomes(passed=1, deselected=1)
    assert _amqpd_children() == before


def test_with_xdist_each_worker_has_its_own_broker(pytester: pytest.Pytester) -> None:
    out = pytester.mkdir("records")
    pytester.makepyfile(RECORD.format(count=6, out=str(out)))
    _run(pytester, "-n", "2").assert_outcomes(passed=6)
    records = _records(out)
    by_worker: dict[object, set[object]] = {}
    for r in records:
        by_worker.setdefault(r["worker"], set()).add(r["url"])
    assert sorted(by_worker) == ["gw0", "gw1"]
    assert all(len(urls) == 1 for urls in by_worker.values())  # one broker per worker, for all its tests
    assert by_worker["gw0"] != by_worker["gw1"]


def test_keep_leaves_the_broker_running_and_says_how_to_reach_it(pytester: pytest.Pytester) -> None:
    out = pytester.mkdir("records")
    pytester.makepyfile(RECORD.format(count=1, out=str(out)))
    result = _run(pytester, "--amqpd-keep")
    result.assert_outcomes(passed=1)
    (record,) = _records(out)
    try:
        result.stdout.fnmatch_lines(
            [
                "*amqpd left running (--amqpd-keep)*",
                f"AMQP:*{record['url']}",
                "test vhost: amqp://*",
                "stop it with: kill *",
            ]
        )
        assert _listening(record["ports"][0])  # type: ignore[index]
    finally:
        os.kill(record["pid"], signal.SIGKILL)  # type: ignore[arg-type]


def test_keep_under_xdist_lists_every_workers_broker(pytester: pytest.Pytester) -> None:
    out = pytester.mkdir("records")
    pytester.makepyfile(RECORD.format(count=4, out=str(out)))
    result = _run(pytester, "-n", "2", "--amqpd-keep")
    records = _records(out)
    brokers = {r["worker"]: r for r in records}
    try:
        result.assert_outcomes(passed=4)
        assert sorted(brokers) == ["gw0", "gw1"]
        lines = ["*amqpd left running (--amqpd-keep)*"]
        for worker in ("gw0", "gw1"):
            lines += [f"pytest-xdist worker {worker}:", f"AMQP:*{brokers[worker]['url']}"]
            lines += ["test vhost: amqp://*", f"stop it with: kill {brokers[worker]['pid']}"]
        result.stdout.fnmatch_lines(lines)
        assert all(_listening(r["ports"][0]) for r in brokers.values())  # type: ignore[index]
    finally:
        for r in brokers.values():
            os.kill(r["pid"], signal.SIGKILL)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_a_broker_that_cannot_start_fails_its_tests_with_the_reason_in_one_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    missing = pytester.path / "no-such-definitions.json"
    monkeypatch.setenv("AMQPD_LOAD_DEFINITIONS", str(missing))
    pytester.makepyfile(
        """
        def test_first(amqp_url): pass
        def test_second(amqpd_broker): pass
        def test_without_broker(): pass
        """
    )
    result = _run(pytester, f"--amqpd-mode={mode}")
    result.assert_outcomes(passed=1, errors=2)
    reason = f"amqpd did not start: *{missing}*"
    result.stdout.fnmatch_lines(["*ERROR at setup of test_first*", reason, "*ERROR at setup of test_second*", reason])
    assert "Traceback" not in result.stdout.str() and "During handling" not in result.stdout.str()
    assert not _broker_threads()


def test_a_broker_that_exits_at_start_fails_the_first_test_with_its_own_line_and_exit_status(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the exit is noticed when it happens: a broker still waited for would fail with "not listening after 30 s"
    monkeypatch.setenv("AMQPD_FRAME_MAX", "1")
    pytester.makepyfile("def test_first(amqp_url): pass\ndef test_second(amqpd_broker): pass")
    result = _run(pytester, "--amqpd-mode=process")
    result.assert_outcomes(errors=2)
    reason = (
        "amqpd did not start: configuration error: AMQPD_FRAME_MAX: frame_max: expected an integer 4096..2147483647, "
        'got "1" (exit status 78)'
    )
    result.stdout.fnmatch_lines(["*ERROR at setup of test_first*", reason, "*ERROR at setup of test_second*", reason])


def test_broker_process_reports_an_exit_before_listening_in_one_line(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "data"
    not_a_dir.write_text("a file where the data dir should be")
    with pytest.raises(RuntimeError) as raised:
        BrokerProcess(data_dir=str(not_a_dir)).start(timeout=60)
    assert str(raised.value) == (
        f"amqpd did not start: configuration error: --data-dir: data_dir: expected a directory amqpd can write, got "
        f'"{not_a_dir}" (a file) (exit status 78)'
    )


def test_a_broker_subprocess_keeps_its_bytecode_where_the_environment_writes_none(tmp_path: Path) -> None:
    # with PYTHONDONTWRITEBYTECODE every start would compile amqpd again: its bytecode goes to amqpd's own cache
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": "", "XDG_CACHE_HOME": str(tmp_path)}
    with BrokerProcess(extra_args=["--in-memory"], env=env):
        pass
    assert len(list((tmp_path / "amqpd" / "pycache").rglob("amqpd/broker/broker.cpython-*.pyc"))) == 1


def test_an_unreachable_external_broker_is_named_in_one_line(pytester: pytest.Pytester) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        pytester.makepyfile("def test_it(amqp_url): pass")
        result = _run(pytester, f"--amqpd-url=amqp://guest:guest@127.0.0.1:{port}/%2F")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"no broker at --amqpd-url 127.0.0.1:{port}: Connection refused"])


def test_the_same_tests_run_against_rabbitmq_with_a_vhost_per_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(ISOLATION.replace("def test_c", "def skipped_c"))
    admin = ManagementClient(REFERENCE_MANAGEMENT)

    def ours() -> set[str]:  # vhosts and users named after the two tests above
        names = [v["name"] for v in admin.request("GET", "/vhosts")] + [
            u["name"] for u in admin.request("GET", "/users")
        ]
        return {n for n in names if n.startswith(("test_a_leaves", "test_b_declares", "test_d_the_tests"))}

    before = ours()  # what an earlier, interrupted run may have left: not this run's doing
    result = _run(pytester, f"--amqpd-url={REFERENCE}", f"--amqpd-management-url={REFERENCE_MANAGEMENT}")
    result.assert_outcomes(passed=3)
    assert ours() - before == set()
    assert not _broker_threads()


def test_async_tests_and_other_clients_use_amqp_url(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import aio_pika, aiormq, kombu, pytest

        @pytest.mark.asyncio
        async def test_aio_pika_under_pytest_asyncio(amqp_url):
            connection = await aio_pika.connect(amqp_url)
            async with connection:
                channel = await connection.channel()
                queue = await channel.declare_queue("q")
                await channel.default_exchange.publish(aio_pika.Message(b"hi"), routing_key="q")
                message = await queue.get(timeout=5)
                assert message.body == b"hi"

        @pytest.mark.anyio
        async def test_aiormq_under_anyio(amqp_url):
            connection = await aiormq.connect(amqp_url)
            channel = await connection.channel()
            await channel.queue_declare("q")
            await channel.basic_publish(b"hi", routing_key="q")
            got = await channel.basic_get("q", no_ack=True)
            assert got.body == b"hi"
            await connection.close()

        @pytest.fixture
        def anyio_backend():
            return "asyncio"

        def test_kombu(amqp_url):
            with kombu.Connection(amqp_url) as connection:
                queue = connection.SimpleQueue("q")
                queue.put({"n": 1})
                assert queue.get(timeout=5).payload == {"n": 1}
                queue.close()
        """
    )
    _run(pytester, "-p", "asyncio", "-p", "anyio").assert_outcomes(passed=3)


def test_celery_tasks_run_through_amqp_url(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture
        def celery_config(amqp_url):
            return {"broker_url": amqp_url, "result_backend": "rpc://"}
        """
    )
    pytester.makepyfile(
        """
        def test_a_task_runs_on_a_worker(celery_app, celery_worker):
            @celery_app.task
            def add(x, y):
                return x + y
            celery_worker.reload()
            assert add.delay(2, 3).get(timeout=20) == 5
        """
    )
    # In a process of its own: Celery's worker reconfigures logging (it disables the loggers that exist), which
    # in this process would leave later tests' caplog deaf to amqpd's loggers.
    pytester.runpytest_subprocess(*LOAD, "-p", "no:cacheprovider", "-p", "celery.contrib.pytest").assert_outcomes(
        passed=1
    )


def test_factory_brokers_have_tls_users_durable_storage_and_survive_a_kill(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import ssl, pika, pytest

        def test_tls_with_generated_certificates(amqpd_factory):
            broker = amqpd_factory(tls=True)
            context = ssl.create_default_context(cafile=str(broker.tls.ca_file))
            params = pika.URLParameters(broker.tls_url)
            params.ssl_options = pika.SSLOptions(context, "localhost")
            pika.BlockingConnection(params).close()

        def test_users_and_permissions(amqpd_factory):
            broker = amqpd_factory(users={"alice": "secret", "bob": "pw"}, permissions={"bob": {"/": ("", "", "")}})
            alice = pika.BlockingConnection(pika.URLParameters(broker.url.replace("guest:guest", "alice:secret")))
            alice.channel().queue_declare("mine")
            bob = pika.BlockingConnection(pika.URLParameters(broker.url.replace("guest:guest", "bob:pw")))
            with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="ACCESS_REFUSED"):
                bob.channel().queue_declare("his")
            with pytest.raises(pika.exceptions.ProbableAuthenticationError):
                pika.BlockingConnection(pika.URLParameters(broker.url.replace("guest:guest", "alice:wrong")))

        def test_durable_broker_keeps_confirmed_messages_across_a_kill(amqpd_factory):
            broker = amqpd_factory(durable=True)
            connection = pika.BlockingConnection(pika.URLParameters(broker.url))
            ch = connection.channel()
            ch.confirm_delivery()
            ch.queue_declare("kept", durable=True)
            ch.basic_publish("", "kept", b"m", pika.BasicProperties(delivery_mode=2))
            url = broker.url
            broker.restart(kill=True)
            assert broker.url == url
            ch = pika.BlockingConnection(pika.URLParameters(url)).channel()
            assert ch.queue_declare("kept", passive=True).method.message_count == 1

        def test_an_in_memory_broker_forgets_on_restart(amqpd_factory):
            broker = amqpd_factory(settings={"max_queue_name_length": 20})
            ch = pika.BlockingConnection(pika.URLParameters(broker.url)).channel()
            ch.queue_declare("q", durable=True)
            with pytest.raises(pika.exceptions.ChannelClosedByBroker):
                ch.queue_declare("q" * 21)
            broker.restart()
            ch = pika.BlockingConnection(pika.URLParameters(broker.url)).channel()
            with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="NOT_FOUND"):
                ch.queue_declare("q", passive=True)
        """
    )
    _run(pytester).assert_outcomes(passed=4)


def test_installing_amqpd_registers_the_plugin_and_no_amqpd_turns_it_off(pytester: pytest.Pytester) -> None:
    assert _registered(), "amqpd's pytest11 entry point is not installed: pip install -e . (pyproject.toml has it)"
    pytester.makepyfile("def test_it(amqp_url): pass")
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:amqpd")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'amqp_url' not found*"])
