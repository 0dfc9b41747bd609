"""threadmill_django's admin pages in a real browser (Chromium through Selenium) on a live server.

Debian's ``chromium`` and ``chromium-driver`` and the ``selenium`` package
are needed; where one is missing these tests skip saying which, except
under ``CI=true``, where that is a failure (`.ci/run` installs them). They
write the screenshots docs/django.md shows: docs/admin-*.png.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.staticfiles.handlers import StaticFilesHandler
from django.test.testcases import LiveServerThread

from tests.conftest import IN_CI
from tests.django import admin_bench as ab
from tests.django.bench import Bench
from tests.django.djapp import tasks
from threadmill_core import TaskResultStatus
from threadmill_core.live_workers import RunningTask, WorkerInfo
from threadmill_core.periodic import registered_schedules, unregister_schedule
from threadmill_django import periodic

DOCS = Path(__file__).resolve().parents[2] / "docs"
PASSWORD = "a password for the browser"


def _missing() -> str | None:
    """Why no browser can run here, or None."""
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (pip install -e '.[test]')"
    for program, package in (("chromium", "chromium"), ("chromedriver", "chromium-driver")):
        if shutil.which(program) is None:
            return f"{program} is not installed (Debian: apt-get install {package})"
    return None


@pytest.fixture(scope="module")
def live_server() -> Iterator[str]:
    """The test project served on a free loopback port (static files too); its base URL."""
    ab.migrate()
    server = LiveServerThread("127.0.0.1", StaticFilesHandler)
    server.daemon = True
    server.start()
    server.is_ready.wait()
    if server.error is not None:
        raise server.error
    yield f"http://127.0.0.1:{server.port}"
    server.terminate()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium driven by Selenium, 1440 pixels wide."""
    why = _missing()
    if why is not None:
        if IN_CI:
            pytest.fail(f"{why}; CI must run the browser tests", pytrace=False)
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(shutil.which("chromium"))
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1440,900"):  # fmt: skip
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def log_in(browser: Any, base: str, name: str, *permissions: str) -> None:
    """Through the admin's login form, as a new staff user `name`-... with `permissions`."""
    from selenium.webdriver.common.by import By

    user = ab.user(*permissions, password=PASSWORD, name=name)
    browser.delete_all_cookies()
    browser.get(f"{base}/admin/login/")
    browser.find_element(By.NAME, "username").send_keys(user.username)
    browser.find_element(By.NAME, "password").send_keys(PASSWORD)
    navigate(browser, browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click)
    assert browser.find_element(By.ID, "site-name").text == "Django administration"


def navigate(browser: Any, act: Any) -> None:
    """Run `act` (a click, a form submitted), then wait until the browser has left the page.

    An element looked up too soon is the old page's, and goes stale under the test.
    """
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.expected_conditions import staleness_of
    from selenium.webdriver.support.wait import WebDriverWait

    page = browser.find_element(By.TAG_NAME, "html")
    act()
    WebDriverWait(browser, 30).until(staleness_of(page))


def shoot(browser: Any, name: str) -> None:
    """The whole page as docs/admin-NAME.png."""
    from selenium.webdriver.common.by import By

    height = browser.execute_script("return document.body.scrollHeight")
    browser.set_window_size(1440, max(600, min(int(height) + 40, 1600)))
    browser.find_element(By.TAG_NAME, "body").screenshot(str(DOCS / f"admin-{name}.png"))
    browser.set_window_size(1440, 900)


def field(browser: Any, name: str) -> str:
    from selenium.webdriver.common.by import By

    return str(browser.find_element(By.ID, f"field-{name}").text)


def test_staff_sees_the_traceback_requeues_and_sees_the_task_succeed(
    bench: Bench, live_server: str, browser: Any
) -> None:
    """Logged in with the change permission: the failed task's traceback, Requeue, a worker
    run, and the task SUCCESSFUL; screenshots of every page along the way."""
    from selenium.webdriver.common.by import By

    failed = tasks.fails_first_time.enqueue("order 42").id
    bench.work()
    tasks.note.enqueue("waiting")
    bench.broker.enqueue_many(ab.core_task(tasks.add), [((i, 1), {}) for i in range(3)])
    log_in(browser, live_server, "operator", ab.CHANGE)

    browser.get(live_server + ab.url("changelist"))
    shoot(browser, "overview")
    failed_list = f'a[href="{ab.url("list", "default", "default", "failed")}"]'
    navigate(browser, browser.find_element(By.CSS_SELECTOR, failed_list).click)
    shoot(browser, "list")
    navigate(browser, browser.find_element(By.LINK_TEXT, failed).click)
    assert field(browser, "status") == "FAILED"
    errors = browser.find_element(By.ID, "errors").text
    assert "LookupError: order 42: the first attempt always fails" in errors
    assert "Traceback (most recent call last)" in errors
    shoot(browser, "task")

    navigate(browser, browser.find_element(By.CSS_SELECTOR, "input[value=Requeue]").click)
    message = browser.find_element(By.CSS_SELECTOR, "ul.messagelist li.success").text
    assert message == f"Task {failed} requeued."
    assert field(browser, "status") == "READY"
    assert bench.work() == 4  # the requeued task and the three adds
    browser.refresh()
    assert field(browser, "status") == "SUCCESSFUL"
    assert field(browser, "return-value") == '"order 42"'
    shoot(browser, "task-successful")

    browser.get(live_server + ab.url("purge", "default", "high", "ready"))
    question = browser.find_element(By.ID, "purge-count").text
    assert "Purge the 1 READY task of queue “high”" in question
    shoot(browser, "purge")


def test_staff_pauses_a_schedule_and_sees_a_live_worker(
    bench: Bench, live_server: str, browser: Any
) -> None:
    """From the overview's links: Pause on the schedules page stores the pause and says so;
    the workers page lists a registered worker; screenshots of both pages."""
    from selenium.webdriver.common.by import By

    periodic(cron="0 3 * * *", tz="Europe/Berlin", args=[1, 2], name="nightly-add")(tasks.add)
    periodic(every=timedelta(minutes=5), args=[3, 4], name="every-five")(tasks.add)
    running = tasks.add.enqueue(5, 6).id
    backend = bench.broker.backend
    worker = WorkerInfo(id="web-1:4242:7f3a", host="web-1", pid=4242, queues=("default", "high"),
                        threads=4, version="1.0.0", started_at=backend.now(),
                        running=(RunningTask(running, ab.core_task(tasks.add).path),))  # fmt: skip
    backend.register_worker(worker, timedelta(minutes=1))
    try:
        log_in(browser, live_server, "scheduler", ab.CHANGE)
        browser.get(live_server + ab.url("changelist"))
        navigate(browser, browser.find_element(By.LINK_TEXT, "Schedules").click)
        pause = "#schedule-nightly-add input[value=Pause]"
        navigate(browser, browser.find_element(By.CSS_SELECTOR, pause).click)
        message = browser.find_element(By.CSS_SELECTOR, "ul.messagelist li.success").text
        assert message.startswith("Schedule 'nightly-add' paused")
        assert backend.schedule_pauses()["nightly-add"].paused
        shoot(browser, "schedules")
        browser.get(live_server + ab.url("changelist"))
        navigate(browser, browser.find_element(By.LINK_TEXT, "Live workers").click)
        assert "web-1" in browser.find_element(By.ID, "worker-web-142427f3a").text
        shoot(browser, "workers")
    finally:
        for name in registered_schedules():
            unregister_schedule(name)


def test_a_viewer_sees_no_button_and_is_refused_the_post(
    bench: Bench, live_server: str, browser: Any
) -> None:
    """With the view permission only, the failed task shows no Requeue, and a POST of the form
    (with a valid CSRF token) is answered 403; the task stays FAILED."""
    from selenium.webdriver.common.by import By

    failed = tasks.fails_first_time.enqueue("order 43").id
    bench.work()
    log_in(browser, live_server, "viewer", ab.VIEW)
    browser.get(live_server + ab.url("task", "default", failed))
    assert field(browser, "status") == "FAILED"
    assert not browser.find_elements(By.CSS_SELECTOR, "input[value=Requeue]")
    # The form a user with the change permission would see, posted by hand.
    navigate(
        browser,
        lambda: browser.execute_script(
            """
        const form = document.createElement("form");
        form.method = "post";
        form.action = arguments[0];
        const token = document.createElement("input");
        token.name = "csrfmiddlewaretoken";
        token.value = document.cookie.match(/csrftoken=([^;]+)/)[1];
        form.appendChild(token);
        document.body.appendChild(form);
        form.submit();
        """,
            ab.url("requeue", "default", failed),
        ),
    )
    assert "403 Forbidden" in browser.find_element(By.TAG_NAME, "h1").text
    assert bench.broker.get_result(failed).status is TaskResultStatus.FAILED
