"""Depot Studio in a real headless Chromium against a real depotd and `depot studio`."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

from conftest import Daemon, Studio, console_errors, make_browser, screenshot, seed

TEAM_SORT = [{"key": "qualifyingZone", "ascending": True}, {"key": "wins", "ascending": False},
             {"key": "teamName", "ascending": True}]


def wait_for(driver: Any, condition: Callable[[], Any], timeout: float = 10, message: str = "") -> Any:
    """Polls `condition` until it holds; an element the page re-rendered while it was read (stale) is a
    "not yet", not a failure."""
    return WebDriverWait(
        driver, timeout, poll_frequency=0.02, ignored_exceptions=[StaleElementReferenceException]
    ).until(lambda _: condition(), message)


def rows(driver: Any, table: str) -> List[str]:
    return [row.get_attribute("data-id") for row in driver.find_elements(By.CSS_SELECTOR, f"#{table} tr[data-id]")]


def live_state(driver: Any) -> Dict[str, Any]:
    """The live view as the DOM shows it: ids in order, section names, seq and transaction."""
    return driver.execute_script("""
        const status = document.getElementById('live-status');
        return {
          ids: [...document.querySelectorAll('#live-table tr[data-id]')].map(r => r.dataset.id),
          sections: [...document.querySelectorAll('#live-table tr.section')].map(r => r.dataset.name),
          wins: [...document.querySelectorAll('#live-table tr[data-id] td[data-key="wins"]')].map(c => c.textContent),
          seq: status ? Number(status.dataset.seq) : -1,
          transaction: status ? Number(status.dataset.transaction) : -1,
          log: document.getElementById('live-log')?.textContent ?? '',
        };""")


def fresh_fetch(daemon: Daemon) -> Dict[str, Any]:
    objects = daemon.call("store/fetch", {"entity": "Team", "sort": TEAM_SORT})["objects"]
    sections: List[str] = []
    for team in objects:
        if not sections or sections[-1] != team["qualifyingZone"]:
            sections.append(team["qualifyingZone"])
    return {"ids": [team["id"] for team in objects], "sections": sections,
            "wins": [str(team["wins"]) for team in objects]}


def open_live(driver: Any, studio: Studio) -> Dict[str, Any]:
    driver.get(studio.url + "#/live")
    wait_for(driver, lambda: live_state(driver)["ids"], message="the live view shows rows")
    return live_state(driver)


@pytest.mark.parametrize("page, ready", [
    ("model", "section.entity[data-entity='Team'] table"),
    ("objects", "#objects-table tr[data-id]"),
    ("live", "#live-table tr[data-id]"),
    ("history", "#history-table tr[data-transaction]"),
    ("stats", "#sessions-table tbody tr"),
])
def test_each_page_loads_without_console_errors(daemon: Daemon, studio: Studio, browser: Any, page: str,
                                                ready: str) -> None:
    browser.get(studio.url + f"#/{page}")
    wait_for(browser, lambda: browser.find_elements(By.CSS_SELECTOR, ready), message=f"{page} shows {ready}")
    assert browser.find_element(By.ID, "banner").get_attribute("hidden") is not None, "no banner while depotd runs"
    time.sleep(0.3)  # let late errors (a failed module, a rejected promise) reach the console
    screenshot(browser, f"page-{page}")
    assert console_errors(browser) == []
    if page == "model":
        text = browser.find_element(By.CSS_SELECTOR, "section.entity[data-entity='Team']").text
        for expected in ("teamName", "qualifyingZone", "integer", "(teamName)"):
            assert expected in text
    if page == "stats":
        clients = browser.find_element(By.ID, "sessions-table").text
        assert "depot studio" in clients


def test_metrics_endpoint_serves_prometheus_text(daemon: Daemon, studio: Studio, browser: Any) -> None:
    browser.get(studio.url + "metrics")
    text = browser.find_element(By.TAG_NAME, "body").text
    assert "# TYPE depot_sessions gauge" in text
    assert "depot_store_transaction" in text
    assert console_errors(browser) == []


def test_predicate_shows_matching_rows_and_marks_a_syntax_error(daemon: Daemon, studio: Studio, browser: Any) -> None:
    browser.get(studio.url + "#/objects")
    wait_for(browser, lambda: rows(browser, "objects-table"))
    Select(browser.find_element(By.ID, "objects-entity")).select_by_value("Team")
    predicate = "qualifyingZone == 'Europe' AND teamName BEGINSWITH 'S'"
    box = browser.find_element(By.ID, "predicate")
    box.clear()
    box.send_keys(predicate)
    sort = browser.find_element(By.ID, "sort")
    sort.clear()
    sort.send_keys("teamName", Keys.ENTER)
    expected = [team["id"] for team in daemon.call("store/fetch", {
        "entity": "Team", "predicate": predicate, "sort": [{"key": "teamName", "ascending": True}]})["objects"]]
    assert len(expected) >= 2, "the fixture has several European teams starting with S"
    wait_for(browser, lambda: rows(browser, "objects-table") == expected, message="the matching rows, in order")
    assert f"of {len(expected)}" in browser.find_element(By.ID, "objects-status").text
    screenshot(browser, "objects-predicate")

    box.clear()
    box.send_keys("wins > 2 AND (teamName ==", Keys.ENTER)
    mark = wait_for(browser, lambda: browser.find_elements(By.ID, "predicate-mark"), message="the error position")
    error = browser.find_element(By.ID, "objects-error")
    assert "-32014" in error.text
    assert browser.find_elements(By.CSS_SELECTOR, "#objects-table tr[data-id]") == []
    # The marked character is where the daemon said the predicate stopped making sense.
    echo = browser.find_element(By.ID, "predicate-echo").text
    assert echo.startswith("wins > 2 AND (teamName ==")
    assert mark[0].location["x"] > browser.find_element(By.ID, "predicate-echo").location["x"]
    screenshot(browser, "objects-predicate-error")

    box.clear()
    box.send_keys("nosuchkey == 1", Keys.ENTER)
    wait_for(browser, lambda: "nosuchkey" in browser.find_element(By.ID, "objects-error").text,
             message="a refused request shows its message")
    assert console_errors(browser) == []


def test_live_view_follows_saves_from_the_cli(daemon: Daemon, studio: Studio, browser: Any) -> None:
    state = open_live(browser, studio)
    assert {k: state[k] for k in ("ids", "sections", "wins")} == fresh_fetch(daemon)
    ids: Dict[str, str] = daemon.ids

    def save_and_check(params: Dict[str, Any], kinds: List[str], ghosts: int = 0) -> Dict[str, Any]:
        before = live_state(browser)["seq"]
        result = daemon.call("store/save", params)
        saved_at = time.monotonic()
        wait_for(browser, lambda: live_state(browser)["transaction"] == result["transaction"], timeout=1.0,
                 message=f"transaction {result['transaction']} shown within a second")
        elapsed = time.monotonic() - saved_at
        # Deleted rows fade out where they were, outside the results (no data-id).
        assert len(browser.find_elements(By.CSS_SELECTOR, "#live-table tr.deleted:not([data-id])")) == ghosts
        after = live_state(browser)
        assert after["seq"] == before + 1
        assert {k: after[k] for k in ("ids", "sections", "wins")} == fresh_fetch(daemon)
        for kind in kinds:
            assert f"{kind} " in after["log"], f"the change log shows a {kind}"
        assert elapsed < 1.0
        return after

    # A move within a section (Spain's wins go up), then into a new section, an insert, a delete.
    save_and_check({"updated": [{"id": ids["Spain"], "values": {"wins": 9}}]}, ["move"])
    screenshot(browser, "live-move")
    after = save_and_check({"updated": [{"id": ids["Japan"], "values": {"qualifyingZone": "Oceania"}}]},
                           ["move", "section insert"])
    assert "Oceania" in after["sections"]
    save_and_check({"inserted": [{"entity": "Team", "values": {"teamName": "Zanzibar", "qualifyingZone": "Africa",
                                                                "wins": 4}}]}, ["insert"])
    after = save_and_check({"updated": [{"id": ids["Japan"], "values": {"qualifyingZone": "Asia"}}],
                            "deleted": [{"id": ids["Algeria"]}]}, ["delete", "section delete"], ghosts=1)
    assert "Oceania" not in after["sections"]
    assert ids["Algeria"] not in after["ids"]
    screenshot(browser, "live-after-saves")
    assert console_errors(browser) == []


def test_live_view_keeps_grouped_results(daemon: Daemon, studio: Studio, browser: Any) -> None:
    grouped = {"entity": "Team", "sort": [{"key": "sum_wins", "ascending": False}], "groupBy": ["qualifyingZone"],
               "aggregates": [{"name": "count", "function": "count"},
                              {"name": "sum_wins", "function": "sum", "key": "wins"}]}

    def shown() -> Dict[str, Any]:
        return browser.execute_script("""
            const status = document.getElementById('live-status');
            return {
              ids: [...document.querySelectorAll('#live-table tr[data-id]')].map(r => r.dataset.id),
              sums: [...document.querySelectorAll('#live-table tr[data-id] td[data-key="sum_wins"]')]
                .map(c => c.textContent),
              transaction: status ? Number(status.dataset.transaction) : -1,
            };""")

    def fresh() -> Dict[str, Any]:
        groups = daemon.call("store/fetch", grouped)["objects"]
        return {"ids": ['group:["' + group["qualifyingZone"] + '"]' for group in groups],
                "sums": [str(group["sum_wins"]) for group in groups]}

    browser.get(studio.url + "#/live?entity=Team&sort=sum_wins:desc&groupBy=qualifyingZone&aggregates=count,sum:wins")
    wait_for(browser, lambda: shown()["ids"], message="the live view shows groups")
    assert {k: shown()[k] for k in ("ids", "sums")} == fresh()
    japan = daemon.ids["Japan"]
    before = daemon.call("store/get", {"ids": [japan]})["objects"][0]["wins"]
    try:
        # Asia's sum jumps: its group moves to the top; no other group changes.
        result = daemon.call("store/save", {"updated": [{"id": japan, "values": {"wins": 40}}]})
        wait_for(browser, lambda: shown()["transaction"] == result["transaction"],
                 message="the grouped change is shown")
        assert {k: shown()[k] for k in ("ids", "sums")} == fresh()
        assert shown()["ids"][0] == 'group:["Asia"]'
        screenshot(browser, "live-grouped")
        assert console_errors(browser) == []
    finally:
        daemon.call("store/save", {"updated": [{"id": japan, "values": {"wins": before}}]})


def test_banner_when_the_daemon_stops_and_recovery_when_it_returns() -> None:
    daemon = Daemon()
    studio: Optional[Studio] = None
    browser = None
    try:
        daemon.ids = seed(daemon)
        studio = Studio(daemon)
        browser = make_browser()
        state = open_live(browser, studio)
        assert len(state["ids"]) == 32
        banner = browser.find_element(By.ID, "banner")
        assert not banner.is_displayed()

        daemon.stop()
        wait_for(browser, banner.is_displayed, timeout=10, message="the banner appears when depotd is gone")
        assert "not reachable" in banner.text
        screenshot(browser, "banner-daemon-gone")

        daemon.start()
        wait_for(browser, lambda: not banner.is_displayed(), timeout=20, message="the banner goes once depotd is back")
        wait_for(browser, lambda: "resubscribing" in live_state(browser)["log"], timeout=10)
        wait_for(browser, lambda: live_state(browser)["ids"] and live_state(browser)["seq"] == 0, timeout=10,
                 message="the view resubscribed")
        result = daemon.call("store/save", {"updated": [{"id": daemon.ids["Brazil"], "values": {"wins": 11}}]})
        wait_for(browser, lambda: live_state(browser)["transaction"] == result["transaction"], timeout=2,
                 message="deltas flow again after the restart")
        state = live_state(browser)
        assert {k: state[k] for k in ("ids", "sections", "wins")} == fresh_fetch(daemon)
        screenshot(browser, "live-recovered")
        # The browser's own console may note the dropped link; the page itself raises nothing.
        assert [e for e in console_errors(browser) if "Uncaught" in e["message"]] == []
    finally:
        if browser:
            browser.quit()
        if studio:
            studio.close()
        daemon.close()


def test_live_view_shows_columns_through_relationships(daemon: Daemon, studio: Studio, browser: Any) -> None:
    """A dotted column prefetches its path: each match row shows its home team's name, and a rename of the
    team (a save of another entity) updates the rows that show it."""
    daemon.call("model/define", {"entities": [
        {"name": "Match", "attributes": [{"name": "round", "type": "string"}, {"name": "score", "type": "integer"}],
         "relationships": [{"name": "homeTeam", "destination": "Team"}]}]})
    ids: Dict[str, str] = daemon.ids
    daemon.call("store/save", {"inserted": [
        {"entity": "Match", "values": {"round": "Final", "score": score, "homeTeam": ids[team]}}
        for score, team in enumerate(["Spain", "Japan", "Spain"])]})

    def shown() -> Dict[str, Any]:
        return browser.execute_script("""
            const status = document.getElementById('live-status');
            return {
              homes: [...document.querySelectorAll('#live-table tr[data-id] td[data-key="homeTeam.teamName"]')]
                .map(c => c.textContent),
              transaction: status ? Number(status.dataset.transaction) : -1,
            };""")

    def fresh() -> List[str]:
        matches = daemon.call("store/fetch", {"entity": "Match", "sort": [{"key": "score"}], "prefetch": ["homeTeam"]})
        return [matches["related"][match["homeTeam"]]["teamName"] for match in matches["objects"]]

    browser.get(studio.url + "#/live?entity=Match&sort=score&columns=score,homeTeam.teamName")
    wait_for(browser, lambda: shown()["homes"], message="the live view shows the home teams")
    assert shown()["homes"] == fresh() == ["Spain", "Japan", "Spain"]
    try:
        result = daemon.call("store/save", {"updated": [{"id": ids["Spain"], "values": {"teamName": "España"}}]})
        wait_for(browser, lambda: shown()["transaction"] == result["transaction"],
                 message="the rename reaches the match rows")
        assert shown()["homes"] == fresh() == ["España", "Japan", "España"]
        screenshot(browser, "live-related-columns")
        assert console_errors(browser) == []
    finally:
        daemon.call("store/save", {"updated": [{"id": ids["Spain"], "values": {"teamName": "Spain"}}]})
