"""A receiver of taskmesh's task events (docs/events.md), verified with the Standard Webhooks
library (`pip install standardwebhooks`), standard library otherwise.

    WEBHOOK_SECRET=whsec_... python receiver.py --port 8090 --out events.jsonl

Every POST is verified over its raw body before anything else: a bad or stale signature
answers 400 and is recorded as refused. A verified event is recorded (one JSON line: the
webhook-id, the subscription, and the event) and answered 204, once it is written, so that a
2xx means stored. Events are deduplicated by the reader, by webhook-id: delivery is at least
once.

A verification (`{"type": "verification", "challenge": ...}`, sent when a client subscribes
with `events/subscribe`) is verified the same way and answered 200 with the challenge echoed,
`{"challenge": ...}`: that tells taskmesh that this endpoint wants the events.

`--fail-while PATH` answers 500 to every verified event while PATH exists (and records it as
such): a receiver that is down, for a test of retries.
"""

import argparse
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    parser.add_argument("--out", required=True, help="JSON lines file of what arrived")
    parser.add_argument("--fail-while", help="answer 500 while this file exists")
    args = parser.parse_args()
    webhook = Webhook(os.environ["WEBHOOK_SECRET"])
    lock = threading.Lock()
    out = open(args.out, "a", encoding="utf-8")

    def record(line):
        with lock:
            out.write(json.dumps(line) + "\n")
            out.flush()
            os.fsync(out.fileno())

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                event = webhook.verify(body, headers)
            except WebhookVerificationError as e:
                record({"refused": str(e), "id": headers.get("webhook-id")})
                self.send_response(400)
                self.end_headers()
                return
            if isinstance(event, dict) and event.get("type") == "verification":
                record({"verification": headers["webhook-id"],
                        "subscription": headers.get("x-mcp-subscription-id")})
                answer = json.dumps({"challenge": event.get("challenge")}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
                return
            failing = args.fail_while is not None and os.path.exists(args.fail_while)
            status = 500 if failing else 204
            record({
                "id": headers["webhook-id"],
                "subscription": headers.get("x-mcp-subscription-id"),
                "timestamp": headers["webhook-timestamp"],
                "answered": status,
                "event": event,
            })
            self.send_response(status)
            self.end_headers()

        def log_message(self, *_):
            pass

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
