"""The console in a real headless Chromium (selenium): every page loads with no console errors,
shows what the broker holds, the live charts draw, the forms work (a test message produced, a
group's offsets reset, a topic created and deleted, an ACL created and deleted, checked with
confluent-kafka), read-only mode shows no actions, and a
SASL broker's console asks for credentials."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer
from integration.helpers import wait_until

from console.browser import basic_auth, chromium, console_errors, skip_reason
from console.support import committed, consume, create_topic, produce, watermarks
from snakka.testing import EmbeddedBroker

pytestmark = [pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or ""),
              pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    with chromium() as d:
        yield d


def _by(css: str) -> tuple[str, str]:
    from selenium.webdriver.common.by import By

    return (By.CSS_SELECTOR, css)


def _open(driver: Any, url: str) -> None:
    console_errors(driver)  # drop what an earlier page logged
    driver.get(url)
    wait_until(lambda: driver.execute_script("return document.readyState") == "complete", 30,
               f"{url} to load")


def test_pages_load_and_show_the_broker(driver):
    with EmbeddedBroker(config={"console.port": "0"}) as b:
        bs, url = b.bootstrap_servers, b.console_url
        create_topic(bs, "clicks", 3)
        produce(bs, "clicks", 45)
        consume(bs, "clicks", "analytics", 45)
        _open(driver, url)
        assert driver.title == "Overview · snakka console"
        # The live charts draw once two samples of throughput exist.
        wait_until(lambda: driver.find_elements(*_by("#chart-bytes svg polyline")), 30,
                   "the throughput chart")
        for nav, heading in (("#nav-topics", "Topics"), ("#nav-groups", "Consumer groups"),
                             ("#nav-shares", "Share groups"), ("#nav-acls", "ACLs"),
                             ("#nav-users", "Users"), ("#nav-quotas", "Client quotas"),
                             ("#nav-broker", "Broker configs"), ("#nav-overview", "Overview")):
            driver.find_element(*_by(nav)).click()
            wait_until(lambda h=heading: driver.find_element(*_by("h1")).text == h, 30, heading)
            assert console_errors(driver) == [], nav
        _open(driver, url + "topics")
        row = driver.find_element(*_by('tr[data-topic="clicks"]'))
        assert row.find_elements(*_by("td"))[2].text == "45"  # records
        row.find_element(*_by("a")).click()
        wait_until(lambda: driver.find_element(*_by("h1")).text == "Topic clicks", 30, "topic")
        marks = watermarks(bs, "clicks", 3)
        for p, (_lo, hi) in marks.items():
            cell = driver.find_element(*_by(f'tr[data-partition="{p}"] td.hw'))
            assert cell.text == f"{hi:,}"
        driver.find_element(*_by('tr[data-partition="0"] a')).click()
        wait_until(lambda: driver.find_elements(*_by("tr.msg")), 30, "the messages")
        assert len(driver.find_elements(*_by("tr.msg"))) == marks[0][1]
        first = driver.find_elements(*_by("tr.msg"))[0]
        assert '"order":' in first.find_element(*_by("td.value")).text  # pretty JSON
        assert "source" in first.find_element(*_by("td.headers")).text
        _open(driver, url + "groups/analytics")
        assert driver.find_element(*_by("#group-state")).text == "Empty"
        assert driver.find_element(*_by("#total-lag")).text == "0"
        assert len(driver.find_elements(*_by("table.offsets tbody tr"))) == 3
        assert console_errors(driver) == []


def test_produce_and_reset_through_the_forms(driver):
    with EmbeddedBroker(config={"console.port": "0"}) as b:
        bs, url = b.bootstrap_servers, b.console_url
        create_topic(bs, "tasks", 1)
        produce(bs, "tasks", 5)
        consume(bs, "tasks", "doers", 5)
        _open(driver, url + "topics/tasks")
        driver.find_element(*_by("#produce-key")).send_keys("console-key")
        driver.find_element(*_by("#produce-value")).send_keys('{"made": "in a browser"}')
        driver.find_element(*_by("#produce-headers")).send_keys("via=selenium")
        driver.find_element(*_by("#produce-form button")).click()
        wait_until(lambda: driver.find_elements(*_by("#notice")), 30, "the notice")
        assert driver.find_element(*_by("#notice")).text == \
            "produced to partition 0 at offset 5"
        c = Consumer({"bootstrap.servers": bs, "group.id": "verify",
                      "auto.offset.reset": "earliest"})
        try:
            c.subscribe(["tasks"])
            seen: list = []

            def six() -> bool:
                m = c.poll(0.5)
                if m is not None and not m.error():
                    seen.append(m)
                return len(seen) >= 6

            wait_until(six, 30, "six records")
        finally:
            c.close()
        last = seen[-1]
        assert (last.key(), last.value(), last.headers()) == \
            (b"console-key", b'{"made": "in a browser"}', [("via", b"selenium")])

        _open(driver, url + "groups/doers")
        from selenium.webdriver.support.ui import Select

        Select(driver.find_element(*_by("#reset-form select[name=strategy]"))) \
            .select_by_value("to-offset")
        driver.find_element(*_by("#reset-value")).send_keys("2")
        driver.find_element(*_by("#reset-form button")).click()
        alert = wait_until(lambda: _alert(driver), 30, "the confirmation")
        alert.accept()
        wait_until(lambda: driver.find_elements(*_by("#notice")), 30, "the notice")
        assert "reset 1 partition(s) to-offset" in driver.find_element(*_by("#notice")).text
        assert driver.find_element(*_by('tr[data-tp="tasks/0"] td.committed')).text == "2"
        assert committed(bs, "doers", "tasks", 1) == {0: 2}
        assert console_errors(driver) == []


def test_create_a_topic_and_an_acl_through_the_forms(driver):
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ConfigResource,
        ResourcePatternType,
        ResourceType,
    )
    from selenium.webdriver.support.ui import Select

    with EmbeddedBroker(config={
            "console.port": "0", "super.users": "User:ANONYMOUS",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    }) as b:
        bs, url = b.bootstrap_servers, b.console_url
        admin = AdminClient({"bootstrap.servers": bs})
        _open(driver, url + "topics")
        driver.find_element(*_by("#topic-name")).send_keys("browser-made")
        driver.find_element(*_by("#topic-partitions")).send_keys("2")
        driver.find_element(*_by("#topic-configs")).send_keys("retention.ms=7200000")
        driver.find_element(*_by("#topic-create-form button")).click()
        wait_until(lambda: driver.find_elements(*_by("#notice")), 30, "the notice")
        assert driver.find_element(*_by("#notice")).text == \
            "created topic browser-made with 2 partition(s)"
        assert driver.find_element(*_by("h1")).text == "Topic browser-made"
        assert len(admin.list_topics(timeout=30).topics["browser-made"].partitions) == 2
        res = ConfigResource(ConfigResource.Type.TOPIC, "browser-made")
        assert admin.describe_configs([res])[res].result(timeout=30)["retention.ms"].value == \
            "7200000"
        assert console_errors(driver) == []

        _open(driver, url + "acls")
        driver.find_element(*_by("#acl-principal")).send_keys("User:carol")
        Select(driver.find_element(*_by("#acl-operation"))).select_by_value("DESCRIBE")
        Select(driver.find_element(*_by("#acl-resource-type"))).select_by_value("TOPIC")
        driver.find_element(*_by("#acl-resource-name")).send_keys("browser-")
        Select(driver.find_element(*_by("#acl-pattern-type"))).select_by_value("PREFIXED")
        driver.find_element(*_by("#acl-create-form button")).click()
        wait_until(lambda: driver.find_elements(*_by("#notice")), 30, "the notice")
        assert driver.find_element(*_by("#notice")).text.startswith(
            "created ACL: ALLOW User:carol DESCRIBE")
        row = driver.find_element(*_by('tr.acl[data-principal="User:carol"]'))
        assert [td.text for td in row.find_elements(*_by("td"))][:7] == [
            "User:carol", "ALLOW", "DESCRIBE", "*", "TOPIC", "browser-", "PREFIXED"]
        flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:carol",
                               None, AclOperation.ANY, AclPermissionType.ANY)
        found = admin.describe_acls(flt).result(timeout=30)
        assert [(a.name, a.resource_pattern_type.name, a.operation.name) for a in found] == \
            [("browser-", "PREFIXED", "DESCRIBE")]
        # Its row's delete button, confirmed.
        row.find_element(*_by("button")).click()
        wait_until(lambda: _alert(driver), 30, "the confirmation").accept()
        wait_until(lambda: driver.find_elements(*_by("#notice")), 30, "the notice")
        assert driver.find_element(*_by("#notice")).text.startswith("deleted ACL")
        assert driver.find_elements(*_by("tr.acl")) == []
        assert admin.describe_acls(flt).result(timeout=30) == []
        assert console_errors(driver) == []

        _open(driver, url + "topics/browser-made")
        driver.find_element(*_by("#delete-topic-confirm")).send_keys("browser-made")
        driver.find_element(*_by("#delete-topic-form button")).click()
        wait_until(lambda: _alert(driver), 30, "the confirmation").accept()
        wait_until(lambda: driver.find_elements(*_by("#notice")), 30, "the notice")
        assert driver.find_element(*_by("#notice")).text == "deleted topic browser-made"
        assert driver.find_element(*_by("h1")).text == "Topics"
        assert "browser-made" not in admin.list_topics(timeout=30).topics
        assert console_errors(driver) == []


def _alert(driver: Any) -> Any:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        return driver.switch_to.alert
    except NoAlertPresentException:
        return None


def test_read_only_console_has_no_actions(driver):
    with EmbeddedBroker(config={"console.port": "0", "console.read.only": "true"}) as b:
        bs, url = b.bootstrap_servers, b.console_url
        create_topic(bs, "quiet", 1)
        produce(bs, "quiet", 2)
        consume(bs, "quiet", "listeners", 2)
        for path in ("topics/quiet", "groups/listeners"):
            _open(driver, url + path)
            assert driver.find_element(*_by("#read-only")).text == "read-only"
            assert driver.find_elements(*_by("form.action")) == []
            assert console_errors(driver) == []


def test_sasl_broker_console_asks_for_credentials():
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'user_admin="admin-secret";')
    with EmbeddedBroker(config={"listeners": "SASL_PLAINTEXT://localhost:0",
                                "console.port": "0", "sasl.enabled.mechanisms": "PLAIN",
                                "sasl.jaas.config": jaas}) as b, chromium() as d:
        d.get(b.console_url)  # answered 401 with a Basic challenge: no console page
        assert d.find_elements(*_by("#principal")) == []
        assert "snakka console" not in d.title
        basic_auth(d, "admin", "admin-secret")
        _open(d, b.console_url)
        assert d.find_element(*_by("#principal")).text == "User:admin"
        wait_until(lambda: d.find_elements(*_by("#chart-bytes svg line")), 30, "the chart")
        assert [e for e in console_errors(d) if "401" not in e["message"]] == []
