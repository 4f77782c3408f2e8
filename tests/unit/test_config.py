"""Settings from the config file, the environment and flags, as far as the store: the retention bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from amqpd import cli, config
from amqpd.server.listener import _open_store
from store.retention import RetentionPolicy

DAY_MS = 86_400_000


@pytest.mark.parametrize(
    ("text", "ms"),
    [("7d", 7 * DAY_MS), ("12h", 43_200_000), ("30m", 1_800_000), ("45s", 45_000), ("500ms", 500), ("250", 250)],
)
def test_retention_age_accepts_units_and_plain_milliseconds(text: str, ms: int) -> None:
    assert config.parse_duration_ms(text) == ms


@pytest.mark.parametrize(
    ("text", "size"), [("10GiB", 10 << 30), ("512MiB", 512 << 20), ("1GB", 10**9), ("4kb", 4000), ("4096", 4096)]
)
def test_retention_size_accepts_units_and_plain_bytes(text: str, size: int) -> None:
    assert config.parse_size(text) == size


@pytest.mark.parametrize("text", ["", "7w", "-1d", "0", "1.5h", "ten"])
def test_a_bad_retention_age_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        config.parse_duration_ms(text)


def test_retention_flags_reach_the_settings() -> None:
    args = cli.parse_args(["--retention-max-age", "7d", "--retention-max-bytes", "10GiB"])
    settings = cli.settings_from_args(args)
    assert settings.retention_max_age_ms == 7 * DAY_MS
    assert settings.retention_max_bytes == 10 << 30


def test_retention_is_off_by_default() -> None:
    settings = cli.settings_from_args(cli.parse_args([]))
    assert settings.retention_max_age_ms is None and settings.retention_max_bytes is None


def test_a_bad_retention_flag_is_a_config_error_naming_the_flag() -> None:
    with pytest.raises(config.ConfigError, match="--retention-max-bytes: retention_max_bytes: expected a size"):
        cli.settings_from_args(cli.parse_args(["--retention-max-bytes", "lots"]))


def test_retention_from_the_config_file_and_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "amqpd.toml"
    path.write_text('[amqpd]\nretention-max-age-ms = "12h"\nretention_max_bytes = 1048576\n')
    settings = config.load(str(path))
    assert (settings.retention_max_age_ms, settings.retention_max_bytes) == (43_200_000, 1 << 20)
    monkeypatch.setenv("AMQPD_RETENTION_MAX_AGE_MS", "30m")
    monkeypatch.setenv("AMQPD_RETENTION_MAX_BYTES", "2MiB")
    settings = config.load(str(path))
    assert (settings.retention_max_age_ms, settings.retention_max_bytes) == (1_800_000, 2 << 20)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_broker_opens_its_store_with_the_retention_settings(tmp_path: Path) -> None:
    settings = config.Settings(data_dir=str(tmp_path), retention_max_age_ms=DAY_MS, retention_max_bytes=1 << 30)
    store, _ = await _open_store(settings)
    try:
        assert store._retention == RetentionPolicy(max_age_ms=DAY_MS, max_bytes=1 << 30)
    finally:
        await store.close()


# -- listen addresses (issue 10: clients that resolve localhost to ::1) ------------------------------------


def test_both_loopbacks_are_listened_on_by_default() -> None:
    assert cli.settings_from_args(cli.parse_args([])).host == ["127.0.0.1", "::1"]


def test_host_may_be_given_several_times() -> None:
    args = cli.parse_args(["--host", "0.0.0.0", "--host", "::"])
    assert cli.settings_from_args(args).host == ["0.0.0.0", "::"]


def test_hosts_from_the_config_file_and_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "amqpd.toml"
    path.write_text('[amqpd]\nhost = "10.0.0.1"\n')
    assert config.load(str(path)).host == ["10.0.0.1"]
    path.write_text('[amqpd]\nhost = ["10.0.0.1", "::1"]\n')
    assert config.load(str(path)).host == ["10.0.0.1", "::1"]
    monkeypatch.setenv("AMQPD_HOST", "127.0.0.1, ::1")
    assert config.load().host == ["127.0.0.1", "::1"]


def test_the_example_config_file_lists_the_default_hosts() -> None:
    example = Path(__file__).resolve().parents[2] / "conf" / "amqpd.toml"
    assert config.load(str(example)).host == config.Settings().host


# -- one declaration per setting (issue 25) -------------------------------------------------------------------


def test_every_setting_is_documented_with_its_type_default_and_environment_variable() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line for line in page.splitlines() if line.startswith("| `")}
    for name, spec in config.SPECS.items():
        assert name in rows, f"{name} is not in docs/configuration.md"
        assert f"`{spec.env}`" in rows[name]


def test_list_and_table_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMQPD_LOOPBACK_USERS", "guest, admin")
    monkeypatch.setenv("AMQPD_VHOSTS", "")
    monkeypatch.setenv("AMQPD_USERS", "admin=s3cret,ops=pw=with=equals")
    monkeypatch.setenv("AMQPD_LOG_LEVELS", "connection=debug,mgmt=Warning")
    s = config.load()
    assert (s.loopback_users, s.vhosts) == (["guest", "admin"], [])
    assert s.users == {"admin": "s3cret", "ops": "pw=with=equals"}
    assert s.log_levels == {"connection": "DEBUG", "mgmt": "WARNING"}


@pytest.mark.parametrize(("text", "users"), [("[]", []), ('["guest", "admin"]', ["guest", "admin"]), ("", [])])
def test_a_list_from_the_environment_may_be_written_as_in_toml(
    text: str, users: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's AMQPD_LOOPBACK_USERS='[]' (silently ignored before) lifts the rule."""
    monkeypatch.setenv("AMQPD_LOOPBACK_USERS", text)
    assert config.load().loopback_users == users


def test_a_list_from_the_environment_that_is_not_toml_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMQPD_LOOPBACK_USERS", "[guest")
    with pytest.raises(
        config.ConfigError, match='AMQPD_LOOPBACK_USERS: loopback_users: expected a list of strings, got "\\[guest"'
    ):
        config.load()


@pytest.mark.parametrize(("text", "value"), [("yes", True), ("0", False), ("ON", True), ("false", False)])
def test_booleans_from_the_environment(text: str, value: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMQPD_TLS_VERIFY_PEER", text)
    assert config.load().tls_verify_peer is value


def test_a_file_value_is_not_coerced(tmp_path: Path) -> None:
    """TOML has types: a string where an integer is expected is a mistake, not a number to parse."""
    path = tmp_path / "amqpd.toml"
    path.write_text('port = "5672"\n')
    with pytest.raises(config.ConfigError) as refused:
        config.load(str(path))
    assert str(refused.value) == f'{path}:1: port: expected an integer 0..65535, got "5672"'


def test_write_buffer_low_above_high_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMQPD_WRITE_BUFFER_LOW", "2000")
    monkeypatch.setenv("AMQPD_WRITE_BUFFER_HIGH", "1000")
    with pytest.raises(config.ConfigError, match="AMQPD_WRITE_BUFFER_LOW: write_buffer_low: expected at most"):
        config.load()
