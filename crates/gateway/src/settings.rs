//! The TOML sections the gateway owns: `[http]` ([`HttpSettings`]), `[session]`
//! ([`SessionSettings`]), `[limits]` ([`LimitsSettings`]) and `[tools]` ([`ToolsSettings`]);
//! `[auth]` is [`crate::auth::AuthConfig`]. Each type is the one definition of its section's
//! keys, defaults and checks; [`crate::GatewayConfig`] holds them whole, with `[auth]`,
//! `[tasks]` (whose listing keys the gateway reads) and the readiness bounds.
//! The node reads the listener keys of `[http]` (`max_connections`, `header_read_timeout_ms`,
//! `max_header_bytes`, `tls`) and the tool choice of `[tools]` (`builtin`, `conformance`)
//! itself. Every field is documented in docs/configuration.md.

use std::path::PathBuf;

use serde::Deserialize;

/// The most events `http.sse_buffer_events` may keep per stream.
pub const MAX_SSE_BUFFER_EVENTS: usize = 65_536;
/// The smallest `http.max_header_bytes`: the HTTP/1 parser's buffer cannot be smaller.
pub const MIN_HEADER_BYTES: usize = 8 * 1024;
/// The largest `http.max_header_bytes` accepted.
pub const MAX_HEADER_BYTES: usize = 1024 * 1024;
/// The largest `http.max_listen_task_ids` accepted.
pub const MAX_LISTEN_TASK_IDS: usize = 100_000;
/// The smallest `http.max_body_bytes` accepted.
pub const MIN_BODY_BYTES: usize = 1024;
/// The shortest `session.secret` accepted, in characters.
pub const MIN_SECRET_CHARS: usize = 16;

/// `[http]`: what the MCP HTTP endpoint accepts and how it keeps SSE streams open.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSettings {
    /// Largest request body, in bytes; a larger one gets HTTP 413. Default 1048576 (1 MiB),
    /// at least [`MIN_BODY_BYTES`].
    pub max_body_bytes: usize,
    /// Origins allowed to call (DNS-rebinding protection): an entry without a port matches any
    /// port, `"*"` allows all; a request without `Origin` is allowed. Default: localhost only.
    pub allowed_origins: Vec<String>,
    /// Interval of keep-alive comments on SSE streams, in ms (below 100 acts as 100). Default
    /// 15000.
    pub sse_keepalive_ms: u64,
    /// GET streams one session may hold open at once; one more gets HTTP 429. Default 8, at
    /// least 1.
    pub max_streams_per_session: usize,
    /// SSE answers of every kind open at once on the node; one more gets HTTP 429. Default
    /// 10000, at least 1.
    pub max_sse_streams: usize,
    /// SSE answers one principal may have open at once on the node; one more gets HTTP 429.
    /// Default 1000, at least 1.
    pub max_sse_streams_per_principal: usize,
    /// Connections open at once on the MCP listener (read by the node's listener); one more
    /// is closed as soon as it is accepted. Default 10000, at least 1.
    pub max_connections: usize,
    /// How long a request's headers may take to arrive (from the moment the connection waits
    /// for them, also between requests on a kept-alive connection) before the connection is
    /// closed, in ms (read by the node's listener). Default 10000, at least 100.
    pub header_read_timeout_ms: u64,
    /// The most bytes a request's head (request line and headers) may take; a larger one gets
    /// HTTP 431 and its connection is closed (read by the node's listener). Default 65536,
    /// between [`MIN_HEADER_BYTES`] and [`MAX_HEADER_BYTES`].
    pub max_header_bytes: usize,
    /// How long a request's body may take to arrive once its headers did, in ms; slower gets
    /// HTTP 408. Default 30000, at least 100.
    pub body_read_timeout_ms: u64,
    /// Task ids one 2026-07-28 `subscriptions/listen` may watch; more get `-32602`. Default
    /// 1000, between 1 and [`MAX_LISTEN_TASK_IDS`].
    pub max_listen_task_ids: usize,
    /// `subscriptions/listen` streams one principal may hold open on a node; one more gets
    /// HTTP 429. Default 64, at least 1.
    pub max_listen_streams_per_principal: usize,
    /// How long a 2026-07-28 plain call's `requestState` stays good, in ms. Default 600000,
    /// at least 1000.
    pub request_state_ttl_ms: u64,
    /// Events one SSE stream keeps for a reconnection with `Last-Event-ID`, and the most that
    /// wait unread before its producer is held back. Default 256, between 1 and
    /// [`MAX_SSE_BUFFER_EVENTS`].
    pub sse_buffer_events: usize,
    /// The reconnection delay sent in the SSE `retry` field, in ms. Default 1000.
    pub sse_retry_ms: u64,
    /// How long a stream whose connection ended is kept for a reconnection, in ms; 0: not
    /// kept. Default 10000.
    pub sse_resume_window_ms: u64,
    /// `[http.tls]`: serve the MCP listener over TLS (HTTPS; read by the node's listener).
    /// Unset (the default): plain HTTP.
    pub tls: Option<ListenerTls>,
    /// After how long the server closes an SSE connection on purpose (the client reconnects
    /// with `Last-Event-ID`), in ms, for 2025-11-25 sessions; 0: never, else at least 1000.
    /// Default 300000.
    pub sse_max_stream_ms: u64,
}

/// `[http.tls]`: the MCP listener's certificate and key (PEM files), read again when either
/// changes, so a certificate is replaced without a restart.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerTls {
    /// The certificate (the leaf first, then its chain). Required.
    pub cert_file: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1). Required.
    pub key_file: PathBuf,
    /// How often the files are checked for a change, in ms. Default 10000, at least 100.
    #[serde(default = "default_tls_reload_ms")]
    pub reload_interval_ms: u64,
}

fn default_tls_reload_ms() -> u64 {
    10_000
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            max_body_bytes: 1024 * 1024,
            allowed_origins: [
                "http://localhost",
                "http://127.0.0.1",
                "http://[::1]",
                "https://localhost",
                "https://127.0.0.1",
                "https://[::1]",
            ]
            .map(String::from)
            .to_vec(),
            sse_keepalive_ms: 15_000,
            max_streams_per_session: 8,
            max_sse_streams: 10_000,
            max_sse_streams_per_principal: 1_000,
            max_connections: 10_000,
            header_read_timeout_ms: 10_000,
            max_header_bytes: 64 * 1024,
            body_read_timeout_ms: 30_000,
            max_listen_task_ids: 1000,
            max_listen_streams_per_principal: 64,
            request_state_ttl_ms: 600_000,
            sse_buffer_events: 256,
            sse_retry_ms: 1000,
            sse_resume_window_ms: 10_000,
            tls: None,
            sse_max_stream_ms: 300_000,
        }
    }
}

/// `Err("{key} must be at least {min} (got {value})")` when `value` is below `min`.
fn at_least<T: PartialOrd + std::fmt::Display>(key: &str, value: T, min: T) -> Result<(), String> {
    if value < min {
        return Err(format!("{key} must be at least {min} (got {value})"));
    }
    Ok(())
}

/// Check a setting against its bound with [`at_least`] (`>=`) or [`within`] (`in`), naming it
/// by its key as a user writes it: the section given and the field's own name, so the two
/// cannot drift apart.
macro_rules! check {
    ($section:literal: $s:ident.$field:ident >= $min:expr) => {
        at_least(concat!($section, ".", stringify!($field)), $s.$field, $min)
    };
    ($section:literal: $s:ident.$field:ident in $range:expr) => {
        within(
            concat!($section, ".", stringify!($field)),
            $s.$field,
            $range,
        )
    };
}

/// `Err` naming `key` when `value` is outside `range`.
fn within(key: &str, value: usize, range: std::ops::RangeInclusive<usize>) -> Result<(), String> {
    if !range.contains(&value) {
        return Err(format!(
            "{key} must be between {} and {} (got {value})",
            range.start(),
            range.end()
        ));
    }
    Ok(())
}

impl HttpSettings {
    /// Refuse values that cannot work, naming the key as it is written (`http.<key>`).
    pub fn validate(&self) -> Result<(), String> {
        check!("http": self.max_body_bytes >= MIN_BODY_BYTES)?;
        check!("http": self.max_streams_per_session >= 1)?;
        check!("http": self.max_sse_streams >= 1)?;
        check!("http": self.max_sse_streams_per_principal >= 1)?;
        check!("http": self.max_connections >= 1)?;
        check!("http": self.header_read_timeout_ms >= 100)?;
        check!("http": self.max_header_bytes in MIN_HEADER_BYTES..=MAX_HEADER_BYTES)?;
        if let Some(tls) = &self.tls {
            check!("http.tls": tls.reload_interval_ms >= 100)?;
        }
        check!("http": self.body_read_timeout_ms >= 100)?;
        check!("http": self.max_listen_task_ids in 1..=MAX_LISTEN_TASK_IDS)?;
        check!("http": self.max_listen_streams_per_principal >= 1)?;
        check!("http": self.request_state_ttl_ms >= 1000)?;
        check!("http": self.sse_buffer_events in 1..=MAX_SSE_BUFFER_EVENTS)?;
        if self.sse_max_stream_ms != 0 && self.sse_max_stream_ms < 1000 {
            return Err(format!(
                "http.sse_max_stream_ms must be 0 (never) or at least 1000 (got {})",
                self.sse_max_stream_ms
            ));
        }
        Ok(())
    }
}

/// `[session]`: how session ids and `tasks/list` cursors are signed and checked.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionSettings {
    /// Secret signing session ids and cursors, at least [`MIN_SECRET_CHARS`] characters;
    /// shared by all nodes of a cluster (required there). Unset (the default): a random key is
    /// created in the data directory.
    pub secret: Option<String>,
    /// Session ids whose signature was verified, kept so that later requests skip the HMAC;
    /// 0 = verify every request. Default 65536.
    pub verified_cache: usize,
}

impl Default for SessionSettings {
    fn default() -> Self {
        Self {
            secret: None,
            verified_cache: 65_536,
        }
    }
}

impl SessionSettings {
    /// Refuse values that cannot work, naming the key as it is written (`session.<key>`).
    pub fn validate(&self) -> Result<(), String> {
        match &self.secret {
            Some(s) if s.len() < MIN_SECRET_CHARS => Err(format!(
                "session.secret must be at least {MIN_SECRET_CHARS} characters"
            )),
            _ => Ok(()),
        }
    }
}

/// `[limits]`: how much one principal and one session may ask of the node.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSettings {
    /// Requests per second per principal; 0 (the default) = no limit.
    pub requests_per_second: u32,
    /// Burst above the rate; 0 (the default) = the rate.
    pub burst: u32,
    /// Unknown-task lookups per minute per principal before an audit warning; 0 = never.
    /// Default 60.
    pub failed_lookup_alert_per_minute: u32,
    /// Tasks one principal may create per minute on this node; past it `-32001`. 0 (the
    /// default) = no limit.
    pub tasks_per_minute: u32,
    /// Sessions (`initialize`) one principal may open per minute on this node; past it
    /// `-32001`. 0 (the default) = no limit.
    pub sessions_per_minute: u32,
    /// Wrong bearer tokens one client address may send within a minute; past it its wrong
    /// tokens get 429 (valid ones are served) until its minute is over. Default 20; 0 =
    /// unlimited.
    pub failed_auth_per_minute: u32,
    /// Cancellable requests (plain `tools/call`, held `tasks/result`) one session may have in
    /// flight at once; more are refused with `-32001`. Default 256, at least 1.
    pub max_inflight_per_session: usize,
}

impl Default for LimitsSettings {
    fn default() -> Self {
        Self {
            requests_per_second: 0,
            burst: 0,
            failed_lookup_alert_per_minute: 60,
            tasks_per_minute: 0,
            sessions_per_minute: 0,
            failed_auth_per_minute: 20,
            max_inflight_per_session: 256,
        }
    }
}

impl LimitsSettings {
    /// Refuse values that cannot work, naming the key as it is written (`limits.<key>`).
    pub fn validate(&self) -> Result<(), String> {
        check!("limits": self.max_inflight_per_session >= 1)
    }
}

/// `[tools]`: which tools the node serves and how `tools/list` pages them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolsSettings {
    /// Serve the built-in tools (read by the node). Default true.
    pub builtin: bool,
    /// Serve the tools the official conformance suite calls (`test_simple_text`, ...), listed
    /// first (read by the node). Default false.
    pub conformance: bool,
    /// Tools per `tools/list` page. Default 50, at least 1.
    pub page_size: usize,
}

impl Default for ToolsSettings {
    fn default() -> Self {
        Self {
            builtin: true,
            conformance: false,
            page_size: 50,
        }
    }
}

impl ToolsSettings {
    /// Refuse values that cannot work, naming the key as it is written (`tools.<key>`).
    pub fn validate(&self) -> Result<(), String> {
        check!("tools": self.page_size >= 1)
    }
}

/// What `GET /readyz` holds a follower replica to. Its inputs come from sections other than
/// the gateway's (`cluster.catch_up_entries`, `raft.election_timeout_max_ms`), so the node
/// passes them to [`Readiness::of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readiness {
    /// A replica more than this many entries behind its group's commit index is catching up.
    pub max_lag_entries: u64,
    /// A replica that has not heard from its leader for longer than this (ms) has none.
    pub max_leader_silence_ms: u64,
}

impl Default for Readiness {
    fn default() -> Self {
        Self {
            max_lag_entries: 100,
            max_leader_silence_ms: 2_000,
        }
    }
}

impl Readiness {
    /// A replica is ready once it is at most `catch_up_entries` behind (when it would also
    /// become a voter) and has heard from its leader within two of the longest election
    /// timeouts (a leader heartbeats every heartbeat interval; silence past that means it is
    /// gone or cut off).
    pub fn of(catch_up_entries: u64, election_timeout_max_ms: u64) -> Self {
        Self {
            max_lag_entries: catch_up_entries,
            max_leader_silence_ms: 2 * election_timeout_max_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each edit of a default section paired with the key its refusal must name.
    type Cases<T> = [(fn(&mut T), &'static str)];

    fn refused<T: Default>(validate: fn(&T) -> Result<(), String>, cases: &Cases<T>) {
        for (edit, key) in cases {
            let mut settings = T::default();
            edit(&mut settings);
            assert!(validate(&settings).is_err_and(|e| e.contains(key)), "{key}");
        }
    }

    #[test]
    fn the_defaults_are_valid() {
        assert_eq!(HttpSettings::default().validate(), Ok(()));
        assert_eq!(SessionSettings::default().validate(), Ok(()));
        assert_eq!(LimitsSettings::default().validate(), Ok(()));
        assert_eq!(ToolsSettings::default().validate(), Ok(()));
    }

    #[test]
    fn a_bad_http_value_is_refused_naming_its_key() {
        let tls = |s: &mut HttpSettings| {
            s.tls = Some(ListenerTls {
                cert_file: "c.pem".into(),
                key_file: "k.pem".into(),
                reload_interval_ms: 99,
            })
        };
        refused(
            HttpSettings::validate,
            &[
                (|s| s.max_body_bytes = 1023, "http.max_body_bytes"),
                (
                    |s| s.max_streams_per_session = 0,
                    "http.max_streams_per_session",
                ),
                (|s| s.max_sse_streams = 0, "http.max_sse_streams"),
                (
                    |s| s.max_sse_streams_per_principal = 0,
                    "http.max_sse_streams_per_principal",
                ),
                (|s| s.max_connections = 0, "http.max_connections"),
                (
                    |s| s.header_read_timeout_ms = 99,
                    "http.header_read_timeout_ms",
                ),
                (|s| s.max_header_bytes = 8191, "http.max_header_bytes"),
                (
                    |s| s.max_header_bytes = (1 << 20) + 1,
                    "http.max_header_bytes",
                ),
                (|s| s.body_read_timeout_ms = 99, "http.body_read_timeout_ms"),
                (|s| s.max_listen_task_ids = 0, "http.max_listen_task_ids"),
                (
                    |s| s.max_listen_streams_per_principal = 0,
                    "http.max_listen_streams_per_principal",
                ),
                (
                    |s| s.request_state_ttl_ms = 999,
                    "http.request_state_ttl_ms",
                ),
                (|s| s.sse_buffer_events = 0, "http.sse_buffer_events"),
                (|s| s.sse_max_stream_ms = 999, "http.sse_max_stream_ms"),
                (tls, "http.tls.reload_interval_ms"),
            ],
        );
    }

    #[test]
    fn bad_session_limits_and_tools_values_are_refused_naming_their_keys() {
        refused(
            SessionSettings::validate,
            &[(|s| s.secret = Some("too-short".into()), "session.secret")],
        );
        refused(
            LimitsSettings::validate,
            &[(
                |s| s.max_inflight_per_session = 0,
                "limits.max_inflight_per_session",
            )],
        );
        refused(
            ToolsSettings::validate,
            &[(|s| s.page_size = 0, "tools.page_size")],
        );
    }

    #[test]
    fn zero_turns_the_stream_age_bound_off() {
        let never = HttpSettings {
            sse_max_stream_ms: 0,
            ..HttpSettings::default()
        };
        assert_eq!(never.validate(), Ok(()));
    }

    #[test]
    fn readiness_allows_two_of_the_longest_election_timeouts() {
        let ready = Readiness::of(100, 600);
        assert_eq!(
            (ready.max_lag_entries, ready.max_leader_silence_ms),
            (100, 1_200)
        );
    }
}
