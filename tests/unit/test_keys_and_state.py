"""The key store and the deployment state store (SQLite), including across two independent opens of the same
database, which is what several server processes do."""

from __future__ import annotations

import json

import pytest

from memroute.cli import main
from memroute.deployment.keys import hash_secret, parse_scopes
from memroute.deployment.state import SqliteStateStore
from memroute.errors import AuthenticationError, ConflictError, NotFoundError, ValidationError


@pytest.fixture
def stores(tmp_path):
    one, two = SqliteStateStore(tmp_path / "state.db"), SqliteStateStore(tmp_path / "state.db")
    yield one, two
    one.close()
    two.close()


def test_secret_is_shown_once_and_stored_only_as_its_hash(stores, tmp_path):
    one, _ = stores
    key, secret = one.keys.create("app", scopes="read,write")
    assert secret.startswith("mr_") and len(secret) > 40
    raw = (tmp_path / "state.db").read_bytes() + (tmp_path / "state.db-wal").read_bytes()
    assert secret.encode() not in raw and hash_secret(secret).encode() in raw
    assert key.tenant == key.id and key.scopes == {"read", "write"}


def test_a_key_revoked_in_one_process_fails_at_once_in_the_other(stores):
    one, two = stores
    key, secret = one.keys.create("app", scopes="read", tenant="t1")
    assert two.keys.authenticate(secret).tenant == "t1"
    one.keys.revoke(key.id)
    with pytest.raises(AuthenticationError, match="revoked"):
        two.keys.authenticate(secret)
    assert one.keys.revoke(key.id).revoked  # idempotent


def test_rotate_keeps_name_scopes_and_tenant(stores):
    one, two = stores
    key, secret = one.keys.create("app", scopes="admin")
    new, new_secret = one.keys.rotate(key.id)
    assert (new.name, new.scopes, new.tenant) == (key.name, key.scopes, key.tenant) and new.id != key.id
    assert two.keys.authenticate(new_secret).id == new.id
    with pytest.raises(AuthenticationError):
        two.keys.authenticate(secret)
    with pytest.raises(ConflictError):
        one.keys.rotate(key.id)
    with pytest.raises(NotFoundError):
        one.keys.rotate("key_nope")


@pytest.mark.parametrize("secret", [None, "", "Bearer x", "mr_" + "x" * 43, "x" * 500])
def test_bad_secrets_are_authentication_errors(stores, secret):
    with pytest.raises(AuthenticationError):
        stores[0].keys.authenticate(secret)


def test_last_used_is_recorded_once_per_throttle_window(stores):
    one, two = stores
    key, secret = one.keys.create("app", scopes="read")
    assert one.keys.get(key.id).last_used_at is None
    one.keys.authenticate(secret)
    first = two.keys.get(key.id).last_used_at
    assert first is not None
    one.keys.authenticate(secret)
    assert two.keys.get(key.id).last_used_at == first  # throttled: no write per request


@pytest.mark.parametrize("scopes", ["", "root", "read,sudo", ()])
def test_scopes_are_validated(scopes):
    with pytest.raises(ValidationError):
        parse_scopes(scopes)
    assert parse_scopes("admin") == {"admin", "read", "write"}


@pytest.mark.parametrize("name, tenant", [("", None), ("a\nb", None), ("ok", ""), ("ok", "x" * 300)])
def test_key_names_and_tenants_are_validated(stores, name, tenant):
    with pytest.raises(ValidationError):
        stores[0].keys.create(name, scopes="read", tenant=tenant)


def test_values_and_leases_are_shared(stores):
    one, two = stores
    one.put_value("settings", "memory", {"max_tokens": 5})
    assert two.get_value("settings", "memory") == {"max_tokens": 5}
    assert two.get_value("settings", "nothing") is None
    assert one.try_lease("prune", "host:1", 60)
    assert not two.try_lease("prune", "host:2", 60)
    assert one.try_lease("prune", "host:1", 60)  # renewal
    one.release_lease("prune", "host:1")
    assert two.try_lease("prune", "host:2", 60)
    assert one.try_lease("expired", "a", -1) and two.try_lease("expired", "b", 60)  # an expired lease is free


def test_service_runtime_memory_settings_are_strict_and_shared(tmp_path):
    import memroute

    with memroute.open(data_dir=str(tmp_path / "d")) as first, memroute.open(data_dir=str(tmp_path / "d")) as second:
        assert first.update_memory_settings({"maxTokens": 300, "strategy": "semantic"}).max_tokens == 300
        assert second.memory_settings().strategy == "semantic"
        for bad in ({"maxTokens": 20000}, {"maxTokens": True}, {"maxTokens": "3"}, {"bogus": 1},
                    {"strategy": "psychic"}, {"retentionDays": -1},
                    {"deleteAfterDays": 36_501}):
            with pytest.raises(ValidationError):
                first.update_memory_settings(bad)
        assert second.memory_settings().max_tokens == 300


def test_cli_keys_commands(tmp_path, capsys):
    main(["keys", "create", "--name", "ops", "--admin", "--json"])
    created = json.loads(capsys.readouterr().out)
    assert created["secret"].startswith("mr_") and "admin" in created["key"]["scopes"]
    main(["keys", "create", "--name", "app", "--scope", "read", "--tenant", "shop"])
    out = capsys.readouterr().out
    assert "tenant=shop" in out and "secret: mr_" in out
    main(["keys", "list", "--json"])
    listed = json.loads(capsys.readouterr().out)
    assert [k["name"] for k in listed] == ["ops", "app"] and "secret" not in json.dumps(listed)
    main(["keys", "rotate", created["key"]["id"], "--json"])
    rotated = json.loads(capsys.readouterr().out)
    assert rotated["key"]["tenant"] == created["key"]["tenant"]
    main(["keys", "revoke", rotated["key"]["id"]])
    assert "revoked" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["keys", "revoke", "key_nope"])
    assert "no API key" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["keys", "create", "--name", "x", "--scope", "root"])
    assert "unknown scope" in capsys.readouterr().err
