//! `worker_bench`: what tasks run by workers cost. Registers `--workers` workers (spread over
//! the `--url`s) serving a tool of no work, creates its tasks through MCP sessions (closed
//! loop of `--concurrency` creators, or open loop at `--rate` per second), and completes each
//! leased task at once; then prints the worker tasks completed per second (create, lease and
//! complete, all durable) and the dispatch latency (from a create's answer to the poll that
//! brings its lease, 0 when the lease came first). With `--builtin` it creates tasks of the
//! built-in `slow_compute` of 0 seconds instead (create and finish, durable), for the same
//! figures without workers.
//!
//!     worker_bench --url http://127.0.0.1:8080/mcp --token T --worker-token W --duration-s 10
//!
//! See docs/benchmarks.md for the runs behind the published figures.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::json;
use taskmesh_bench::{create_task_of, Session};
use taskmesh_client::worker::{Declaration, Worker};

#[derive(Parser)]
#[command(
    name = "worker_bench",
    about = "Throughput and dispatch latency of worker tasks"
)]
struct Args {
    /// MCP endpoint(s); sessions and workers are spread over them.
    #[arg(long, required = true, value_delimiter = ',')]
    url: Vec<String>,
    /// The clients' bearer token.
    #[arg(long)]
    token: Option<String>,
    /// A worker token whose identity may serve `--tool`.
    #[arg(long, default_value = "")]
    worker_token: String,
    /// The worker tool registered and called.
    #[arg(long, default_value = "bench_noop")]
    tool: String,
    #[arg(long, default_value_t = 10.0)]
    duration_s: f64,
    #[arg(long, default_value_t = 16)]
    sessions: usize,
    /// Closed loop: creates in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Open loop: creates per second (instead of the closed loop).
    #[arg(long)]
    rate: Option<f64>,
    /// Worker registrations.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Tasks one worker runs at once (its completions in flight).
    #[arg(long, default_value_t = 64)]
    worker_concurrency: u32,
    /// Create built-in slow_compute tasks of 0 seconds instead (no workers).
    #[arg(long)]
    builtin: bool,
}

/// Per task: when its create was answered, and when its lease arrived.
type Times = HashMap<String, (Option<Instant>, Option<Instant>)>;

/// What the run saw, shared by creators and workers.
#[derive(Default)]
struct Seen {
    created: AtomicU64,
    completed: AtomicU64,
    errors: AtomicU64,
    times: Mutex<Times>,
}

impl Seen {
    fn created_at(&self, id: String, at: Instant) {
        self.times
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id)
            .or_default()
            .0 = Some(at);
    }
    fn leased_at(&self, id: String, at: Instant) {
        self.times
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id)
            .or_default()
            .1 = Some(at);
    }
}

async fn create_one(s: &Session, tool: &str, builtin: bool, seen: &Seen) {
    let (tool, seconds) = if builtin {
        ("slow_compute", 0.0)
    } else {
        (tool, 0.0)
    };
    match create_task_of(s, tool, seconds).await {
        Ok(id) => {
            seen.created.fetch_add(1, Ordering::Relaxed);
            if !builtin {
                seen.created_at(id, Instant::now());
            }
        }
        Err(_) => {
            seen.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

async fn serve(w: Worker, until: Instant, max: u32, seen: Arc<Seen>) {
    let places = Arc::new(tokio::sync::Semaphore::new(max as usize));
    while Instant::now() < until {
        let free = places.available_permits().max(1) as u32;
        let leases = match w.poll(free, Duration::from_millis(500)).await {
            Ok(l) => l,
            Err(_) => {
                seen.errors.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        let now = Instant::now();
        for l in leases {
            seen.leased_at(l.task_id.clone(), now);
            let Ok(place) = places.clone().acquire_owned().await else {
                return;
            };
            let (w, seen) = (w.clone(), seen.clone());
            tokio::spawn(async move {
                let done = json!({"content": [{"type": "text", "text": "ok"}]});
                match w.complete(&l, Ok(done)).await {
                    Ok(_) => seen.completed.fetch_add(1, Ordering::Relaxed),
                    Err(_) => seen.errors.fetch_add(1, Ordering::Relaxed),
                };
                drop(place);
            });
        }
    }
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    anyhow::ensure!(a.duration_s > 0.0 && a.sessions > 0 && a.concurrency > 0);
    anyhow::ensure!(
        a.builtin || !a.worker_token.is_empty(),
        "--worker-token is required"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(a))
}

async fn run(a: Args) -> anyhow::Result<()> {
    let seen = Arc::new(Seen::default());
    let duration = Duration::from_secs_f64(a.duration_s);
    let mut workers = Vec::new();
    if !a.builtin {
        for i in 0..a.workers {
            let decl = Declaration::new(&a.tool, json!({"type": "object"}));
            let url = &a.url[i % a.url.len()];
            let w = Worker::register(
                url,
                &a.worker_token,
                vec![decl],
                a.worker_concurrency,
                "bench",
            )
            .await
            .map_err(|e| anyhow::anyhow!("registering a worker at {url}: {e}"))?;
            workers.push(w);
        }
        // Every node lists the tool once the worker digests went round.
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    let mut sessions = Vec::new();
    for i in 0..a.sessions {
        let url = &a.url[i % a.url.len()];
        let s = Session::open(url, a.token.as_deref())
            .await
            .map_err(|f| anyhow::anyhow!("opening a session at {url}: {f}"))?;
        sessions.push(Arc::new(s));
    }
    let started = Instant::now();
    let until = started + duration;
    // Workers run on past the creates' end, to finish what was created.
    let drain = until + Duration::from_secs(3);
    let serving: Vec<_> = workers
        .into_iter()
        .map(|w| tokio::spawn(serve(w, drain, a.worker_concurrency, seen.clone())))
        .collect();
    let mut creators = Vec::new();
    match a.rate {
        None => {
            for i in 0..a.concurrency {
                let (s, seen, tool) = (
                    sessions[i % sessions.len()].clone(),
                    seen.clone(),
                    a.tool.clone(),
                );
                let builtin = a.builtin;
                creators.push(tokio::spawn(async move {
                    while Instant::now() < until {
                        create_one(&s, &tool, builtin, &seen).await;
                    }
                }));
            }
        }
        Some(rate) => {
            let gap = Duration::from_secs_f64(1.0 / rate);
            let (seen, tool, builtin) = (seen.clone(), a.tool.clone(), a.builtin);
            let sessions = sessions.clone();
            creators.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(gap);
                let mut n = 0usize;
                let mut inflight = Vec::new();
                while Instant::now() < until {
                    tick.tick().await;
                    let (s, seen, tool) = (
                        sessions[n % sessions.len()].clone(),
                        seen.clone(),
                        tool.clone(),
                    );
                    n += 1;
                    inflight.push(tokio::spawn(async move {
                        create_one(&s, &tool, builtin, &seen).await
                    }));
                }
                futures::future::join_all(inflight).await;
            }));
        }
    }
    futures::future::join_all(creators).await;
    let created_s = started.elapsed().as_secs_f64();
    futures::future::join_all(serving).await;
    let created = seen.created.load(Ordering::Relaxed);
    let completed = seen.completed.load(Ordering::Relaxed);
    let errors = seen.errors.load(Ordering::Relaxed);
    println!(
        "mode          {}",
        if a.builtin {
            "built-in slow_compute(0)"
        } else {
            "worker tasks"
        }
    );
    println!(
        "created       {created} ({:.0}/s)",
        created as f64 / created_s
    );
    if !a.builtin {
        println!(
            "completed     {completed} ({:.0}/s over the create phase)",
            completed as f64 / created_s
        );
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
        let mut unmatched = 0u64;
        for (c, l) in seen
            .times
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
        {
            match (c, l) {
                (Some(c), Some(l)) => {
                    let us = l.saturating_duration_since(*c).as_micros().max(1) as u64;
                    h.saturating_record(us);
                }
                _ => unmatched += 1,
            }
        }
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        println!(
            "dispatch      p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms  ({} tasks, {} without both times)",
            ms(0.5),
            ms(0.9),
            ms(0.99),
            h.max() as f64 / 1000.0,
            h.len(),
            unmatched
        );
    }
    println!("errors        {errors}");
    Ok(())
}
