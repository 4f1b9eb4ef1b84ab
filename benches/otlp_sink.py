"""An OTLP/HTTP sink for benches/observability.sh: takes `POST /v1/traces`, answers 200 with an
empty protobuf body (an ExportTraceServiceResponse with nothing to say), and counts the requests
and bytes it took. Prints the counts when it receives SIGTERM.

    python3 benches/otlp_sink.py PORT
"""
import http.server
import signal
import sys

taken = {"requests": 0, "bytes": 0}


class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("content-length", "0"))
        self.rfile.read(n)
        taken["requests"] += 1
        taken["bytes"] += n
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def report(*_):
    print(f"otlp sink: {taken['requests']} exports, {taken['bytes']} bytes", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, report)
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
