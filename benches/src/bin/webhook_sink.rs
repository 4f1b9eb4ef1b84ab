//! `webhook_sink`: a webhook receiver for benchmarks. Answers every POST with 204 at once and,
//! for each task event, records the delivery lag: the time it arrived less the event's
//! `timestamp` (the status change, on the same machine's clock). Prints its port when it
//! listens, and on SIGTERM or after `--duration-s` the events received (distinct and in all)
//! and the lag's percentiles, then exits. It runs on one thread and reads of each event only
//! its id and time, so that on a machine it shares with the server it takes as little of the
//! cores as a receiver can.
//!
//!     webhook_sink --port 0 --duration-s 30
//!
//! See docs/benchmarks.md for the runs behind the published figures.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Empty};
use hyper::{Request, Response, StatusCode};
use tokio::sync::Mutex;

#[derive(Parser)]
#[command(
    name = "webhook_sink",
    about = "A webhook receiver that measures delivery lag"
)]
struct Args {
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Stop after this long (or at SIGTERM).
    #[arg(long, default_value_t = 600.0)]
    duration_s: f64,
}

/// What the sink reads of an event; the rest of the body is skipped.
#[derive(serde::Deserialize)]
struct Event<'a> {
    #[serde(rename = "eventId", borrow)]
    event_id: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    timestamp: std::borrow::Cow<'a, str>,
}

#[derive(Default)]
struct Seen {
    ids: HashSet<String>,
    deliveries: u64,
    lag_us: Option<hdrhistogram::Histogram<u64>>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Milliseconds since the epoch of an RFC 3339 UTC time with milliseconds
/// (`2026-12-06T13:02:11.517Z`), as taskmesh writes them.
fn parse_ms(t: &str) -> Option<u64> {
    let (date, time) = t.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut h = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (h.next()??, h.next()??, h.next()??);
    let ms: i64 = format!("{frac:0<3}").get(..3)?.parse().ok()?;
    // Days from the civil date (proleptic Gregorian).
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(((days * 24 + hh) * 60 + mm) * 60_000 + ss * 1_000 + ms).ok()
}

async fn handle(
    seen: Arc<Mutex<Seen>>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Empty<Bytes>>, Infallible> {
    let arrived = now_ms();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if let Ok(event) = serde_json::from_slice::<Event<'_>>(&body) {
        let mut s = seen.lock().await;
        s.deliveries += 1;
        if s.ids.insert(event.event_id.into_owned()) {
            if let Some(at) = parse_ms(&event.timestamp) {
                if let Some(h) = s.lag_us.as_mut() {
                    let _ = h.record(arrived.saturating_sub(at) * 1_000);
                }
            }
        }
    }
    let mut r = Response::new(Empty::new());
    *r.status_mut() = StatusCode::NO_CONTENT;
    Ok(r)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
    println!("listening {}", listener.local_addr()?.port());
    let seen = Arc::new(Mutex::new(Seen {
        lag_us: Some(hdrhistogram::Histogram::new_with_bounds(1, 600_000_000, 3)?),
        ..Seen::default()
    }));
    let accept = {
        let seen = seen.clone();
        async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let seen = seen.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| handle(seen.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        }
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        () = accept => {}
        _ = term.recv() => {}
        () = tokio::time::sleep(Duration::from_secs_f64(args.duration_s)) => {}
    }
    let s = seen.lock().await;
    let ms = |q: f64| {
        s.lag_us
            .as_ref()
            .map_or(0.0, |h| h.value_at_quantile(q) as f64 / 1000.0)
    };
    println!(
        "events        {} distinct, {} deliveries",
        s.ids.len(),
        s.deliveries
    );
    println!(
        "lag           p50 {:.1} ms  p90 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
        ms(0.5),
        ms(0.9),
        ms(0.99),
        ms(1.0)
    );
    Ok(())
}
