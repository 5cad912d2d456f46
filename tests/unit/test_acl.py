"""The ACL SETUSER lines, without Redis (tests/integration/test_acl.py runs them)."""

from __future__ import annotations

import hashlib

import pytest
from click.testing import CliRunner

from taskq.cli import main
from taskq.errors import ConfigError
from taskq.ops.acl import ROLES, setuser_args


@pytest.mark.parametrize("role", list(ROLES))
def test_every_line_starts_from_nothing(role: str) -> None:
    args = setuser_args(role, ["tasks"])
    assert args[:6] == ["ACL", "SETUSER", f"taskq-{role}", "reset", "on", "resetchannels"]
    assert "-@all" in args and not any(a.startswith((">", "#", "&", "+@")) for a in args)


def test_the_producer_gets_its_keys_and_commands_only() -> None:
    args = setuser_args("producer", ["tasks"])
    keys = {a for a in args if a.startswith("~")}
    assert "~tasks:*" not in keys and "~tasks:deadletter" not in keys
    assert {"~tasks:normal", "~tasks:schedule", "~tasks:job:*", "~tasks:unique:*"} <= keys
    for refused in ("+xrange", "+xdel", "+xreadgroup", "+flushall", "+del", "+keys"):
        assert refused not in args


def test_queue_names_are_literal_patterns_and_several_queues_add_up() -> None:
    args = setuser_args("operator", ["a*b", "{c}", "a*b"], user="w")
    assert [a for a in args if a.startswith("~")] == ["~a\\*b:*", "~{c}:*"]
    assert args[2] == "w"


def test_a_worker_reads_the_pauses_and_writes_every_other_key() -> None:
    args = setuser_args("worker", ["a*b"])
    assert "%R~a\\*b:paused" in args and "~a\\*b:paused" not in args
    assert {"~a\\*b:high", "~a\\*b:held:*", "~a\\*b:cancelled"} <= set(args)
    assert not any(a.endswith(":*") and a.count(":") == 1 for a in args)  # no "~<queue>:*"


def test_only_a_hash_of_the_password_is_written() -> None:
    args = setuser_args("operator", ["tasks"], password="s3cret")
    assert "#" + hashlib.sha256(b"s3cret").hexdigest() in args
    assert not any("s3cret" in a for a in args)


@pytest.mark.parametrize(
    ("role", "queues", "user"),
    [("admin", ["tasks"], None), ("worker", [], None), ("worker", ['a"b'], None),
     ("worker", ["tasks"], "two words")],
)  # fmt: skip
def test_what_cannot_be_written_is_refused(role: str, queues: list[str], user: str | None) -> None:
    with pytest.raises(ConfigError):
        setuser_args(role, queues, user=user)


def test_the_cli_reads_the_password_from_the_environment_only() -> None:
    runner = CliRunner()
    ok = runner.invoke(
        main,
        ["acl", "print", "-Q", "a,b", "--role", "operator", "--password-env", "PW"],
        env={"PW": "pw"},
    )
    assert ok.exit_code == 0 and ok.stdout.count("\n") == 1
    assert "~a:* ~b:*" in ok.stdout and "#" + hashlib.sha256(b"pw").hexdigest() in ok.stdout
    unset = runner.invoke(
        main,
        ["acl", "print", "-Q", "a", "--role", "worker", "--password-env", "PW"],
        env={"PW": None},
    )
    assert unset.exit_code == 2 and "$PW is unset or empty" in unset.output
    bare = runner.invoke(main, ["acl", "print", "-Q", "a", "--role", "producer"])
    assert bare.exit_code == 0 and "nobody can log in as taskq-producer" in bare.stderr
