"""The live decision view in a real browser (docs/view.md): headless Chromium driven by selenium
against the proxy binary, its admin listener and two loopback origins this script starts.

    python3 Tests/Browser/view_test.py [--binary .build/debug/scopeproxy]
    python3 Tests/Browser/view_test.py --mock                  # the page against Tests/Fixtures/view_mock.py
    python3 Tests/Browser/view_test.py --screenshot docs/images/view.png [--theme dark]

What it checks, each step named when it fails: rows appear live for requests sent through the proxy
after the page loaded; the filters and the decision counts hide rows; the detail names the secret
(`${canary_token}`) and the canary value appears nowhere (page source, visible text, the curl text,
the event stream itself); the curl text, run with bash, reproduces the decision; a hostile path and
user-agent are shown as text (no alert, no element injected); the keyboard works; no console error;
no request leaves the admin origin; admin_token: no token shows "unauthorized", /view?token=...
shows live rows and the token leaves the address bar. Every wait is bounded; every process this
script starts is stopped at its end (the whole run is bounded by an alarm too).

The screenshot mode feeds the page the mock's realistic records (an injected GitHub request, a
stripped cookie, a refused egress, a followed redirect), opens a detail and saves a 1366x768 PNG.
"""

import argparse
import http.client
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOSTILE = "<img src=x onerror=alert(1)>"
WAIT = 10  # seconds, for any one thing to show up in the page
RUN_LIMIT = 150  # seconds, for the whole run (SIGALRM): a hang fails instead of blocking make test


class Failure(Exception):
    pass


def route_word():
    """Six random letters that no URL redaction rule takes for data (no digits, no hex run)."""
    return "".join(secrets.choice("ghijkmnpqrstuvwxyz") for _ in range(6))


def check(condition, what):
    if not condition:
        raise Failure(what)


# The origins: each answers 200 with a small JSON body and remembers the Authorization it got.

class Origin:
    def __init__(self, name):
        self.name = name
        self.authorizations = []
        origin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                origin.authorizations.append(self.headers.get("Authorization"))
                body = json.dumps({"origin": origin.name, "ok": True}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class Processes:
    """Every child this script starts, stopped in reverse order whatever happens."""

    def __init__(self):
        self.children = []
        self.cleanups = []

    def start(self, command, **options):
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, **options)
        self.children.append(child)
        return child

    def stop_all(self):
        for cleanup in reversed(self.cleanups):
            try:
                cleanup()
            except Exception as error:  # noqa: BLE001 (a cleanup must not stop the others)
                print("cleanup: %s" % error, file=sys.stderr)
        for child in reversed(self.children):
            if child.poll() is None:
                child.terminate()
                try:
                    child.wait(5)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait(5)


def read_lines_until(stream, pattern, limit_seconds, collected):
    """Reads a child's stderr line by line until `pattern` matches (bounded in time by the alarm
    and by the child's exit); the lines go into `collected`."""
    deadline = time.monotonic() + limit_seconds
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            return None
        collected.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    return None


def start_proxy(processes, binary, workdir, origin, other, canary, admin_secret):
    with open(os.path.join(workdir, "canary"), "w") as file:
        file.write(canary)
    with open(os.path.join(workdir, "admin"), "w") as file:
        file.write(admin_secret)
    os.chmod(os.path.join(workdir, "canary"), 0o600)
    os.chmod(os.path.join(workdir, "admin"), 0o600)
    config = os.path.join(workdir, "scopeproxy.yaml")
    with open(config, "w") as file:
        file.write(
            'listen: "127.0.0.1:0"\n'
            'admin: "127.0.0.1:0"\n'
            "admin_token: view_admin\n"
            "secrets:\n"
            "  canary_token: { file: %s }\n"
            "  view_admin: { file: %s }\n"
            "scopes:\n"
            "  - name: canary-scope\n"
            '    origins: ["http://127.0.0.1:%d"]\n'
            "    inject:\n"
            '      Authorization: "Bearer ${canary_token}"\n'
            "log:\n"
            "  format: json\n"
            "  output: stderr\n"
            % (os.path.join(workdir, "canary"), os.path.join(workdir, "admin"), origin.port))
    del other  # not covered by any scope: its requests pass
    log = open(os.path.join(workdir, "proxy.stderr"), "w+")
    child = processes.start([binary, "run", "--config", config], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True, cwd=workdir)
    processes.cleanups.append(log.close)
    lines = []
    admin = None
    listen = None
    while listen is None:
        match = read_lines_until(child.stderr, r"admin: http://(127\.0\.0\.1:\d+)|listening on (127\.0\.0\.1:\d+)", WAIT, lines)
        if match is None:
            raise Failure("the proxy did not start:\n" + "".join(lines))
        admin = match.group(1) or admin
        listen = match.group(2)
    check(admin is not None, "the banner names the admin address:\n" + "".join(lines))

    def drain():  # the access log goes to stderr: keep reading so the proxy never blocks on it
        try:
            for line in child.stderr:
                log.write(line)
        except (ValueError, OSError):  # the log closed at the end of the run, before the proxy stopped
            pass

    threading.Thread(target=drain, daemon=True).start()
    return listen, admin, log


def start_mock(processes, token, *arguments):
    child = processes.start([sys.executable, os.path.join(ROOT, "Tests", "Fixtures", "view_mock.py"), "--token", token, *arguments],
                            stdout=subprocess.PIPE, text=True)
    line = child.stdout.readline()
    check(line.startswith("listening "), "the mock started")
    return "127.0.0.1:" + line.split()[1]


def start_browser(processes, size):
    options = webdriver.ChromeOptions()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium:
        options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--no-first-run", "--disable-extensions", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync", "--window-size=%d,%d" % size):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    options.add_experimental_option("perfLoggingPrefs", {"enableNetwork": True, "enablePage": False})
    driver_path = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(WAIT)
    driver.set_script_timeout(WAIT)
    # The viewport itself at the size asked (a headless window's size includes no browser chrome,
    # but be exact for the screenshot).
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": False})
    processes.cleanups.append(driver.quit)
    return driver


def wait_for(driver, condition, what, seconds=WAIT):
    try:
        return WebDriverWait(driver, seconds, poll_frequency=0.1).until(lambda _: condition())
    except TimeoutException:
        raise Failure("timed out (%d s) waiting for %s" % (seconds, what)) from None


def rows(driver):
    """The table's rows as the page holds them: text, visibility and the request id (title)."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#rows tr')).map((tr) => ({"
        " text: tr.textContent, hidden: tr.hidden || tr.offsetParent === null, title: tr.title,"
        " decision: tr.querySelector('.col-decision').textContent, scope: tr.querySelector('.col-scope').textContent}));")


def row_with(driver, needle):
    for row in rows(driver):
        if needle in row["text"]:
            return row
    return None


def through_proxy(listen, url, headers=None):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": "http://" + listen}))
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with opener.open(request, timeout=WAIT) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def raw_through_proxy(listen, target, user_agent):
    """A request line urllib would refuse to send: the hostile path unencoded."""
    host, port = listen.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=WAIT) as connection:
        connection.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\nConnection: close\r\n\r\n"
                            % (target, target.split("/")[2], user_agent)).encode())
        received = b""
        while True:
            chunk = connection.recv(65536)
            if not chunk:
                break
            received += chunk
    return received


def stream_sample(admin, token, seconds):
    """The raw event stream for a moment, as a viewer receives it (bounded by `seconds`)."""
    connection = http.client.HTTPConnection(admin, timeout=seconds)
    connection.request("GET", "/view/events", headers={"Authorization": "Bearer " + token})
    response = connection.getresponse()
    check(response.status == 200, "/view/events with the token answers 200 (got %d)" % response.status)
    data = b""
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            chunk = response.fp.read1(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, TimeoutError):
        pass
    finally:
        connection.close()
    return data.decode("utf-8", "replace")


def mock_post(admin, path, record=None):
    connection = http.client.HTTPConnection(admin, timeout=WAIT)
    body = json.dumps(record).encode() if record is not None else b""
    connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    connection.getresponse().read()
    connection.close()


def click_row(driver, needle):
    driver.execute_script(
        "Array.from(document.querySelectorAll('#rows tr')).find((tr) => tr.textContent.includes(arguments[0])).click();", needle)


def page_text(driver):
    return driver.execute_script("return document.documentElement.textContent + '\\n' + document.body.innerText;")


def severe_console_entries(driver):
    return [entry for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]


def requested_urls(driver):
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def run_suite(options, processes, workdir):
    canary = "canary-view-" + secrets.token_hex(12)
    admin_secret = "view-admin-" + secrets.token_hex(12)
    origin = Origin("covered")
    other = Origin("other")
    processes.cleanups.append(origin.stop)
    processes.cleanups.append(other.stop)
    if options.mock:
        admin = start_mock(processes, admin_secret)
        listen = None
        log = None
    else:
        listen, admin, log = start_proxy(processes, options.binary, workdir, origin, other, canary, admin_secret)
    base = "http://" + admin
    driver = start_browser(processes, (1366, 768))
    step = "start"

    def say(name):
        nonlocal step
        step = name
        print("  " + name, flush=True)

    try:
        say("/view?token=... loads, shows live and the token leaves the address bar")
        driver.get(base + "/view?token=" + admin_secret)
        wait_for(driver, lambda: driver.find_element(By.ID, "connection").get_attribute("data-state") == "live",
                 "the connection state 'live'")
        check("token" not in driver.current_url and admin_secret not in driver.current_url,
              "the address bar still holds the token: " + driver.current_url)
        check(driver.find_element(By.ID, "connection").text == "live", "the state reads 'live'")

        if options.mock:
            wait_for(driver, lambda: len(rows(driver)) >= 9, "the mock's records")
            covered_path = "/repos/acme/app/pulls"
            other_path = "/v1/loans"
            injected_needle = covered_path
        else:
            before = len(rows(driver))
            say("rows appear live as requests go through the proxy")
            # Letters only: a segment with six digits in a row is logged as `:number` (the URL
            # redaction, docs/logging.md), and the row would never show the path looked for.
            covered_path = "/items/view-%s?page=2" % route_word()
            other_path = "/plain/view-%s" % route_word()
            status, _ = through_proxy(listen, "http://127.0.0.1:%d%s" % (origin.port, covered_path))
            check(status == 200, "the covered origin answered through the proxy (%d)" % status)
            check(origin.authorizations[-1] == "Bearer " + canary, "the proxy injected the canary into the covered origin")
            status, _ = through_proxy(listen, "http://127.0.0.1:%d%s" % (other.port, other_path))
            check(status == 200, "the other origin answered through the proxy (%d)" % status)
            check(other.authorizations[-1] is None, "no credential went to the origin no scope covers")
            injected_needle = covered_path.split("?")[0]
            wait_for(driver, lambda: row_with(driver, injected_needle) and row_with(driver, other_path), "both rows")
            check(len(rows(driver)) >= before + 2, "two new rows")
            covered = row_with(driver, injected_needle)
            check(covered["decision"] == "injected", "the covered request's decision is injected: %r" % covered)
            check("canary-scope" in covered["scope"], "the covered request's scope is shown: %r" % covered)
            check(row_with(driver, other_path)["decision"] == "passed", "the other request passed")
            check(rows(driver)[0]["text"].find(other_path) >= 0, "the newest row is on top")
            check(re.search(r"request id \S+", covered["title"]), "the row's title holds the request id")
            say("a hostile path and user-agent go through")
            raw_through_proxy(listen, "http://127.0.0.1:%d/%s" % (other.port, HOSTILE.replace(" ", "/")), HOSTILE)
            through_proxy(listen, "http://127.0.0.1:%d/ua-check" % other.port, {"User-Agent": HOSTILE})
            wait_for(driver, lambda: row_with(driver, "/ua-check"), "the hostile user-agent's row")

        say("the filters hide rows; a decision count filters")
        Select(driver.find_element(By.ID, "filter-decision")).select_by_value("passed")
        check(not row_with(driver, injected_needle) or row_with(driver, injected_needle)["hidden"],
              "the decision filter hides the injected row")
        check(any(not row["hidden"] for row in rows(driver)), "the decision filter keeps the passed rows")
        driver.find_element(By.ID, "filter-clear").click()
        check(not row_with(driver, injected_needle)["hidden"], "Clear shows every row again")
        driver.find_element(By.CSS_SELECTOR, "#counts button[data-decision='injected']").click()
        visible = [row for row in rows(driver) if not row["hidden"]]
        check(visible and all(row["decision"] == "injected" for row in visible), "the injected count shows injected rows only")
        driver.find_element(By.CSS_SELECTOR, "#counts button[data-decision='injected']").click()
        check(all(not row["hidden"] for row in rows(driver)), "clicking the count again shows all")
        origins = [option.get_attribute("value") for option in
                   Select(driver.find_element(By.ID, "filter-origin")).options]
        check(len(origins) >= 3, "the origin filter lists the origins seen: %r" % origins)
        Select(driver.find_element(By.ID, "filter-origin")).select_by_value(origins[1])
        check(any(row["hidden"] for row in rows(driver)), "the origin filter hides the other origin's rows")
        driver.find_element(By.ID, "filter-clear").click()
        driver.find_element(By.ID, "filter-text").send_keys(injected_needle)
        visible = [row for row in rows(driver) if not row["hidden"]]
        check(visible and all(injected_needle in row["text"] for row in visible), "the text filter keeps matching rows only")
        driver.find_element(By.ID, "filter-clear").click()

        say("the detail names the secret, never its value")
        driver.execute_script(
            "Array.from(document.querySelectorAll('#rows tr')).find((tr) => tr.textContent.includes(arguments[0])).click();",
            injected_needle)
        detail = driver.find_element(By.ID, "detail")
        wait_for(driver, lambda: detail.is_displayed(), "the detail panel")
        name = "${github_token}" if options.mock else "${canary_token}"
        check(name in detail.text, "the detail names %s:\n%s" % (name, detail.text))
        check("Authorization" in detail.text, "the detail shows the injected header")
        curl = driver.find_element(By.ID, "curl-text").text
        check("curl" in curl and name in curl, "the curl text names the secret:\n" + curl)
        for where, text in (("the page source", driver.page_source), ("the page's text", page_text(driver)),
                            ("the curl text", curl), ("the event stream", stream_sample(admin, admin_secret, 1.5))):
            check(canary not in text, "the canary value appears in " + where)
            check(admin_secret not in text, "the admin token appears in " + where)

        if options.mock:
            say("rules in plain words: a refused egress, a followed redirect's chain")
            click_row(driver, "pastebin.example")
            wait_for(driver, lambda: "Refused the destination pastebin.example:443 by the egress rule default deny" in detail.text,
                     "the egress rule in words:\n" + detail.text)
            click_row(driver, "/v1/covers/42")
            wait_for(driver, lambda: "Redirect chain" in detail.text.title() or "REDIRECT CHAIN" in detail.text, "the redirect chain")
            check(len(driver.find_elements(By.CSS_SELECTOR, "#detail .chain button")) == 2, "the chain lists both hops")
            click_row(driver, injected_needle)

        if os.environ.get("VIEW_TEST_SNAPSHOT"):  # a look at the page with real records, by hand
            driver.save_screenshot(os.environ["VIEW_TEST_SNAPSHOT"])

        if options.mock:
            say("a dropped stream reconnects; a replay adds no row twice")
            count = len(rows(driver))
            mock_post(admin, "/mock/drop?replay=all")
            mock_post(admin, "/mock/emit", {"id": "after-the-drop", "ts": "2026-12-02T15:00:00.000Z", "method": "GET",
                                            "status": 200, "view": {"decision": "passed", "origin": "127.0.0.1:1", "path": "/after", "hop": 1}})
            wait_for(driver, lambda: row_with(driver, "/after"), "the record sent after the drop")
            wait_for(driver, lambda: driver.find_element(By.ID, "connection").get_attribute("data-state") == "live", "live again")
            check(len(rows(driver)) == count + 1, "the replay added rows twice: %d rows, %d expected" % (len(rows(driver)), count + 1))

        say("the keyboard: Esc, j/k, Enter, /, c")
        body = driver.find_element(By.TAG_NAME, "body")
        body.send_keys(Keys.ESCAPE)
        wait_for(driver, lambda: not detail.is_displayed(), "Esc to close the detail")
        driver.execute_script("document.activeElement && document.activeElement.blur && document.activeElement.blur();")
        body.send_keys("j")
        selected = driver.execute_script("return document.querySelectorAll('#rows tr[aria-selected=\"true\"]').length;")
        check(selected == 1, "j selects a row")
        body.send_keys("j")
        body.send_keys("k")
        check(driver.execute_script("return document.activeElement.getAttribute('aria-selected');") == "true",
              "the selected row has the focus (visible focus)")
        driver.switch_to.active_element.send_keys(Keys.ENTER)
        wait_for(driver, lambda: detail.is_displayed(), "Enter to open the detail")
        driver.switch_to.active_element.send_keys("/")
        check(driver.execute_script("return document.activeElement.id;") == "filter-text", "/ focuses the filter")
        driver.switch_to.active_element.send_keys(Keys.ESCAPE)
        driver.execute_script(
            "Array.from(document.querySelectorAll('#rows tr')).find((tr) => tr.textContent.includes(arguments[0])).click();",
            injected_needle)
        driver.execute_script("document.activeElement.blur();")
        body.send_keys("c")
        wait_for(driver, lambda: driver.find_element(By.CSS_SELECTOR, "#detail .curl-status").text != "",
                 "c to copy the curl text (a status after it)")

        if not options.mock:
            say("the curl text, run with bash, reproduces the decision")
            injected_before = sum(1 for row in rows(driver) if injected_needle in row["text"])
            calls_before = len(origin.authorizations)
            ran = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, timeout=WAIT, cwd=workdir)
            check(ran.returncode == 0, "the curl text runs (exit %d): %s" % (ran.returncode, ran.stderr[-400:]))
            check(canary not in ran.stdout + ran.stderr, "curl's output holds no canary")
            check(len(origin.authorizations) == calls_before + 1 and origin.authorizations[-1] == "Bearer " + canary,
                  "curl's request reached the covered origin with the injected credential")
            wait_for(driver, lambda: sum(1 for row in rows(driver) if injected_needle in row["text"]) == injected_before + 1,
                     "curl's request as a new row")
            again = row_with(driver, injected_needle)
            check(again["decision"] == "injected" and "canary-scope" in again["scope"], "the same decision: %r" % again)

        say("hostile strings are text: no alert, no element injected")
        try:
            alert = driver.switch_to.alert
            raise Failure("an alert opened: " + alert.text)
        except NoAlertPresentException:
            pass
        check(driver.execute_script("return document.querySelectorAll('img, iframe, object, embed').length;") == 0,
              "an element was injected")
        check(driver.execute_script("return document.scripts.length;") == 1, "only the page's own script")
        check(row_with(driver, "onerror=alert(1)"), "the hostile path shows as text in a row")
        driver.execute_script(
            "Array.from(document.querySelectorAll('#rows tr')).find((tr) => tr.textContent.includes(arguments[0])).click();",
            "onerror" if options.mock else "/ua-check")
        wait_for(driver, lambda: HOSTILE in detail.text, "the hostile user-agent as text in the detail")
        try:
            driver.switch_to.alert
            raise Failure("an alert opened after the detail")
        except NoAlertPresentException:
            pass
        check(driver.execute_script("return document.querySelectorAll('img').length;") == 0, "the detail injected an element")

        say("the theme toggle is remembered")
        driver.find_element(By.ID, "theme").click()
        chosen = driver.execute_script("return document.documentElement.getAttribute('data-theme');")
        check(chosen in ("dark", "light"), "the toggle sets a theme")

        say("no console error; no request leaves the admin origin")
        errors = severe_console_entries(driver)
        check(not errors, "console errors: %r" % errors)
        urls = requested_urls(driver)
        check(urls, "the performance log recorded the page's requests")
        strays = [url for url in urls if not (url.startswith(base + "/") or url.startswith("data:"))]
        check(not strays, "requests outside the admin origin: %r" % strays)

        say("without the token: unauthorized")
        driver.delete_all_cookies()
        driver.get(base + "/view")
        wait_for(driver, lambda: "unauthorized" in page_text(driver).lower(), "'unauthorized' without the token")
        if options.mock:  # the mock serves the page without the token: the page says why its stream was refused
            wait_for(driver, lambda: driver.find_element(By.ID, "connection").get_attribute("data-state") == "unauthorized",
                     "the connection state 'unauthorized'")
            check("/view?token=" in driver.find_element(By.ID, "notice").text, "the notice tells to open /view?token=...")
        check(canary not in driver.page_source, "no canary in the unauthorized page")
        driver.get(base + "/view")
        check(driver.execute_script("return document.documentElement.getAttribute('data-theme');") in (None, chosen),
              "the theme survives a reload")
    except Failure:
        print("failed at: " + step, file=sys.stderr)
        try:
            print("page: state %s, %d rows: %r" % (driver.find_element(By.ID, "connection").get_attribute("data-state"),
                                                  len(rows(driver)), [row["text"][:90] for row in rows(driver)][:8]), file=sys.stderr)
            print("console: %r" % driver.get_log("browser")[-5:], file=sys.stderr)
            if not options.mock:
                sample = stream_sample(admin, admin_secret, 1.0)
                print("the stream now: %d records" % sample.count("\ndata: "), file=sys.stderr)
        except Exception as error:  # noqa: BLE001 (diagnostics only)
            print("diagnostics failed: %s" % error, file=sys.stderr)
        if log is not None:
            log.flush()
            log.seek(0)
            tail = log.read()[-3000:]
            print("proxy stderr (tail, canary masked):\n" + tail.replace(canary, "<canary>"), file=sys.stderr)
        raise


def take_screenshot(options, processes):
    """The page fed by the mock's realistic records (no hostile row), a detail open, 1366x768."""
    token = secrets.token_hex(8)
    admin = start_mock(processes, token, "--no-hostile")
    driver = start_browser(processes, (1366, 768))
    driver.get("http://%s/view?token=%s" % (admin, token))
    if options.theme:
        driver.execute_script("localStorage.setItem('scopeproxy.view.theme', arguments[0]);", options.theme)
        driver.get("http://%s/view" % admin)
    wait_for(driver, lambda: len(rows(driver)) >= 8, "the mock's records")
    driver.execute_script(
        "Array.from(document.querySelectorAll('#rows tr')).find((tr) => tr.textContent.includes('/repos/acme')).click();")
    wait_for(driver, lambda: driver.find_element(By.ID, "detail").is_displayed(), "the detail")
    driver.execute_script("document.activeElement.blur();")
    os.makedirs(os.path.dirname(os.path.abspath(options.screenshot)), exist_ok=True)
    driver.save_screenshot(options.screenshot)
    print("wrote " + options.screenshot)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", default=os.environ.get("SCOPEPROXY_BINARY", os.path.join(ROOT, ".build", "debug", "scopeproxy")))
    parser.add_argument("--mock", action="store_true", help="the page against Tests/Fixtures/view_mock.py, no proxy")
    parser.add_argument("--screenshot", default=os.environ.get("SCREENSHOT"), help="write a PNG of the page and exit")
    parser.add_argument("--theme", choices=["light", "dark"], help="with --screenshot")
    options = parser.parse_args()
    options.binary = os.path.abspath(options.binary)  # the proxy runs in its own directory

    def out_of_time(*_):
        raise Failure("the run took over %d s" % RUN_LIMIT)

    signal.signal(signal.SIGALRM, out_of_time)
    signal.alarm(RUN_LIMIT)
    processes = Processes()
    workdir = tempfile.mkdtemp(prefix="scopeproxy-view-test-")
    started = time.monotonic()
    try:
        if options.screenshot:
            take_screenshot(options, processes)
        else:
            print("the live view in headless Chromium (%s)" % ("mock" if options.mock else options.binary), flush=True)
            run_suite(options, processes, workdir)
            print("the live view: passed in %.1f s" % (time.monotonic() - started))
    except Failure as failure:
        print("the live view: FAILED: %s" % failure, file=sys.stderr)
        return 1
    finally:
        signal.alarm(0)
        processes.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
