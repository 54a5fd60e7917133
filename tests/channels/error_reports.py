"""A corpus of realistic error reports, as debugging sessions post them: the error line first, then what was being
done, then a Python stack trace. Two kinds recur three times with different stack frames (clusters a detector must
find), two kinds recur twice (pairs it must not report with ``min_cluster=3``), and six errors occur once; several
of them share the same application frames, as errors of one code base do."""

from __future__ import annotations

from typing import Any

#: (kind, content, metadata) in the order the sessions were posted. ``kind`` is what a detector should group.
REPORTS: list[tuple[str, str, dict[str, Any]]] = []


def _report(kind: str, error: str, message: str, doing: str, frames: list[tuple[str, int, str, str]]) -> None:
    trace = "\n".join(f'  File "{path}", line {line}, in {func}\n    {code}' for path, line, func, code in frames)
    content = f"{error}: {message}\n{doing}\n\nTraceback (most recent call last):\n{trace}\n{error}: {message}"
    meta = {"type": "debug_start", "error": {"type": error, "message": f"{error}: {message}"}}
    REPORTS.append((kind, content, meta))


_report("refused", "ConnectionRefusedError", "[Errno 111] Connection refused",
        "The checkout service crashed at start-up while opening its database pool.", [
            ("/srv/shop/checkout/app.py", 58, "create_app", "pool = db.make_pool(settings.database_url)"),
            ("/srv/shop/common/db.py", 41, "make_pool", "return Pool(dsn, min_size=2, max_size=10)"),
            ("/usr/lib/python3.11/site-packages/psycopg_pool/pool.py", 128, "__init__", "self._start_workers()"),
            ("/usr/lib/python3.11/socket.py", 836, "create_connection", "sock.connect(sa)"),
        ])  # fmt: skip
_report("locked", "sqlite3.OperationalError", "database is locked",
        "The nightly export job failed halfway through writing the orders table.", [
            ("/srv/shop/jobs/export.py", 112, "run", "writer.flush(batch)"),
            ("/srv/shop/jobs/writer.py", 77, "flush", "self.conn.executemany(INSERT_ORDERS, rows)"),
        ])  # fmt: skip
_report("timeout", "TimeoutError", "timed out",
        "The payment webhook handler gave up waiting for the fraud-check service.", [
            ("/srv/shop/payments/webhook.py", 64, "handle", "verdict = fraud.check(event.payment_id)"),
            ("/srv/shop/common/http.py", 29, "get_json", "response = session.get(url, timeout=5)"),
            ("/usr/lib/python3.11/socket.py", 706, "readinto", "return self._sock.recv_into(b)"),
        ])  # fmt: skip
_report("refused", "ConnectionRefusedError", "[Errno 111] Connection refused",
        "Celery workers cannot reach the result backend after the Redis upgrade.", [
            ("/srv/shop/worker/tasks.py", 23, "send_receipt", "cache.set(key, receipt, ex=3600)"),
            ("/usr/lib/python3.11/site-packages/redis/client.py", 1266, "execute_command", "conn.connect()"),
            ("/usr/lib/python3.11/site-packages/redis/connection.py", 707, "connect", "sock = self._connect()"),
        ])  # fmt: skip
_report("module", "ModuleNotFoundError", "No module named 'yaml'",
        "The deploy script fails on the new build image before reading its config.", [
            ("/srv/shop/deploy/main.py", 5, "<module>", "import yaml"),
        ])  # fmt: skip
_report("json", "json.decoder.JSONDecodeError", "Expecting value: line 1 column 1 (char 0)",
        "The shipping-rates client got an empty body from the carrier API.", [
            ("/srv/shop/shipping/rates.py", 88, "quote", "return response.json()"),
            ("/usr/lib/python3.11/json/decoder.py",
             355, "raw_decode", "raise JSONDecodeError('Expecting value', s, err.value) from None"),
        ])  # fmt: skip
_report("locked", "sqlite3.OperationalError", "database is locked",
        "Two test workers wrote the fixtures database at the same time.", [
            ("/srv/shop/tests/conftest.py", 45, "seed", "conn.execute('DELETE FROM products')"),
        ])  # fmt: skip
_report("keyerror", "KeyError", "'user_id'",
        "Logged-out users hitting /account crash the session middleware.", [
            ("/srv/shop/web/middleware.py", 31, "__call__", "user = users.get(request.session['user_id'])"),
        ])  # fmt: skip
_report("refused", "ConnectionRefusedError", "[Errno 111] Connect call failed ('10.0.3.7', 5432)",
        "The async inventory sync cannot open its database connection since the failover.", [
            ("/srv/shop/inventory/sync.py", 71, "main", "conn = await asyncpg.connect(settings.database_url)"),
            ("/usr/lib/python3.11/site-packages/asyncpg/connection.py", 2329, "connect",
             "return await connect_utils._connect("),
            ("/usr/lib/python3.11/asyncio/selector_events.py", 634, "_sock_connect_cb",
             "raise OSError(err, f'Connect call failed {address}')"),
        ])  # fmt: skip
_report("timeout", "TimeoutError", "timed out",
        "Search indexing stalls when the catalogue service is under load.", [
            ("/srv/shop/search/indexer.py", 140, "fetch_page", "items = catalogue.list(page=n)"),
            ("/srv/shop/common/http.py", 29, "get_json", "response = session.get(url, timeout=5)"),
        ])  # fmt: skip
_report("permission", "PermissionError", "[Errno 13] Permission denied: '/var/log/shop/app.log'",
        "The container runs as a non-root user and cannot open the log file.", [
            ("/srv/shop/common/logging.py", 19, "setup", "handler = logging.FileHandler(path)"),
        ])  # fmt: skip
_report("locked", "sqlite3.OperationalError", "database is locked",
        "The admin dashboard timed out while the importer held a write transaction.", [
            ("/srv/shop/admin/views.py", 203, "stats", "rows = db.execute(STATS_QUERY).fetchall()"),
            ("/srv/shop/common/db.py", 97, "execute", "return self.conn.execute(sql, params)"),
        ])  # fmt: skip
_report("json", "json.decoder.JSONDecodeError", "Expecting value: line 1 column 1 (char 0)",
        "Reading the feature-flag file after a failed deploy left it empty.", [
            ("/srv/shop/common/flags.py", 12, "load", "return json.load(f)"),
        ])  # fmt: skip
_report("attribute", "AttributeError", "'NoneType' object has no attribute 'email'",
        "Guest checkout sends the receipt to a customer that does not exist.", [
            ("/srv/shop/checkout/receipts.py", 52, "send", "mailer.send(order.customer.email, body)"),
        ])  # fmt: skip
_report("zero", "ZeroDivisionError", "division by zero",
        "The conversion-rate report divides by the visits of a day with no traffic.", [
            ("/srv/shop/reports/daily.py", 77, "conversion", "return orders / visits"),
        ])  # fmt: skip
_report("unicode", "UnicodeDecodeError",
        "'utf-8' codec can't decode byte 0xe9 in position 14: invalid continuation byte",
        "Importing the supplier's CSV fails on accented product names.", [
            ("/srv/shop/jobs/import_csv.py", 33, "rows", "for row in csv.reader(f):"),
        ])  # fmt: skip

#: The kinds a detector must report with ``min_cluster=3``: three reports each.
CLUSTERS = {"refused", "locked"}
