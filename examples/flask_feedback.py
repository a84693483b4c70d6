"""User feedback on a Flask error page: the page shows the error's reference id
(``last_reference_id()``) and a form; what the user writes is attached to that error
(``submit_user_description``), as ``data["@user_description"]`` on the service.

The example serves on 127.0.0.1 (a free port), fails one request, posts the form of the error
page as a user would, and exits.

    pip install flask
    python examples/flask_feedback.py
"""

from __future__ import annotations

import html
import re
import threading

import requests
from flask import Flask, request
from werkzeug.serving import make_server

import eventlog_handler
from eventlog_handler.wsgi import init_flask

eventlog_handler.setup(tags=["example", "feedback"])

app = Flask(__name__)
init_flask(app)

ERROR_PAGE = """<!doctype html>
<title>Something went wrong</title>
<h1>Something went wrong</h1>
<p>We were told. If you tell us what you were doing, quote <code>{reference}</code>.</p>
<form method="post" action="/feedback">
  <input type="hidden" name="reference" value="{reference}">
  <input type="email" name="email" placeholder="you@example.com">
  <textarea name="description"></textarea>
  <button>Send</button>
</form>
"""


@app.errorhandler(500)
def error_page(error: Exception) -> tuple[str, int]:
    reference = eventlog_handler.last_reference_id() or ""
    return ERROR_PAGE.format(reference=html.escape(reference)), 500


@app.post("/feedback")
def feedback() -> str:
    queued = eventlog_handler.submit_user_description(
        request.form.get("reference", ""),
        email=request.form.get("email") or None,
        description=request.form.get("description") or None,
    )
    return "Thank you!\n" if queued else "That did not work; please write to us.\n"


@app.get("/checkout")
def checkout() -> str:
    raise RuntimeError("the payment service is unreachable")


def main() -> None:
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        page = requests.get(base + "/checkout", timeout=5)
        reference = re.search(r'name="reference" value="([^"]+)"', page.text)
        print("/checkout", page.status_code, "reference", reference.group(1) if reference else None)
        form = {
            "reference": reference.group(1) if reference else "",
            "email": "ann@example.com",
            "description": "I pressed Pay and got this page.",
        }
        answer = requests.post(base + "/feedback", data=form, timeout=5)
        print("/feedback", answer.status_code, answer.text.strip())
    finally:
        server.shutdown()
        thread.join()


if __name__ == "__main__":
    main()
