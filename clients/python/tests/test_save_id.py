"""``save(..., save_id=...)`` against a real depotd: a resent save is answered as before and applied once."""

from __future__ import annotations

import uuid
from typing import Any, Dict

import pytest

import depot
from conftest import TEST_MODEL, Daemon


def package(name: str) -> Dict[str, Any]:
    return {"entity": "Package", "tempId": "p", "values": {"name": name, "release": "1.0"}}


def count(client: depot.Client, name: str) -> int:
    result: Dict[str, Any] = client.call("store/count", {"entity": "Package", "predicate": "name == %@",
                                                         "arguments": [name]})
    return int(result["count"])


def test_a_resent_save_returns_the_first_answer_and_applies_once(client: depot.Client) -> None:
    save_id = str(uuid.uuid4())
    first = client.save(inserted=[package("resent")], save_id=save_id)
    again = client.save(inserted=[package("resent")], save_id=save_id)
    assert again == first
    assert count(client, "resent") == 1
    # The same changes under another id are another save (here, a duplicate).
    with pytest.raises(depot.UniqueConstraintError):
        client.save(inserted=[package("resent")], save_id=str(uuid.uuid4()))


def test_a_failed_save_is_not_remembered(client: depot.Client) -> None:
    blocker = client.save(inserted=[package("blocked")])["ids"]["p"]
    save_id = str(uuid.uuid4())
    with pytest.raises(depot.UniqueConstraintError):
        client.save(inserted=[package("blocked")], save_id=save_id)
    client.save(deleted=[{"id": blocker}])
    applied = client.save(inserted=[package("blocked")], save_id=save_id)
    assert applied["ids"]["p"] != blocker
    assert count(client, "blocked") == 1


@pytest.mark.parametrize("bad", ["", "x" * 129, 7])
def test_a_bad_save_id_is_refused_naming_the_field(client: depot.Client, bad: Any) -> None:
    with pytest.raises(depot.InvalidParamsError) as caught:
        client.save(inserted=[package(f"bad-{bad!r}")], save_id=bad)
    assert caught.value.field == "params.saveId"
    assert count(client, f"bad-{bad!r}") == 0


def test_the_answer_survives_a_kill_and_a_restart() -> None:
    first_daemon = Daemon()
    second = None
    try:
        with first_daemon.client() as client:
            client.call("model/define", TEST_MODEL)
            first = client.save(inserted=[package("survivor")], save_id="survivor-1")
        first_daemon.kill()
        second = Daemon(data_dir=first_daemon.data_dir)
        with second.client() as client:
            assert client.save(inserted=[package("survivor")], save_id="survivor-1") == first
            assert count(client, "survivor") == 1
    finally:
        if second is not None:
            second.stop()
        first_daemon.stop()
