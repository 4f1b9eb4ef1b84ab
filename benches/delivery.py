#!/usr/bin/env python3
"""Print the stream delivery delays the servers measured (GET /status, streamDelivery).

    benches/delivery.py URL [URL...]    the nodes' MCP URLs (.../mcp); their histograms are added

For each kind of message (status notification, task request or progress, held tasks/result
answer): how many were measured, and p50, p99 and p99.9 as the upper bound of the bucket they
fall in, with the largest delay seen. The delay runs from the moment the task's leader applied
the change or handed the message out until the writing node framed it for the client.
"""
import json
import sys
import urllib.request


def fetch(url):
    with urllib.request.urlopen(url.replace("/mcp", "/status"), timeout=10) as r:
        return json.load(r)["streamDelivery"]


def quantile(buckets, count, q):
    """The upper bound (µs) of the bucket the q-quantile falls in; None above the last one."""
    want = q * count
    for le, cumulative in buckets:
        if cumulative >= want:
            return le
    return None


def main(urls):
    nodes = [fetch(url) for url in urls]
    print("server-measured delivery delay (bucket upper bounds), ms:")
    for kind in ("status", "message", "result"):
        hs = [n[kind] for n in nodes]
        count = sum(h["count"] for h in hs)
        if count == 0:
            print(f"  {kind:8} none measured")
            continue
        bounds = sorted({b["leUs"] for h in hs for b in h["buckets"]})
        # A node lists its buckets up to the one that holds its largest delay: at every
        # bound past its list, its cumulative count is its last one.
        buckets = []
        for le in bounds:
            total = 0
            for h in hs:
                listed = {b["leUs"]: b["count"] for b in h["buckets"]}
                last = h["buckets"][-1]["count"] if h["buckets"] else 0
                total += listed.get(le, last)
            buckets.append((le, total))
        worst = max(h["maxUs"] for h in hs)

        def fmt(us):
            return "over %.1f" % (bounds[-1] / 1000) if us is None else "%.2f" % (us / 1000)

        qs = ", ".join(
            f"p{q * 100:g} <= {fmt(quantile(buckets, count, q))}" for q in (0.5, 0.99, 0.999)
        )
        print(f"  {kind:8} {count:6} measured, {qs}, max {worst / 1000:.2f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
