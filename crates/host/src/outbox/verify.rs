//! Endpoint verification at `events/subscribe`, as the events extension asks: each node
//! remembers for `events.verification_cache_ms` which (principal, URL) pairs passed, and sends
//! at most `events.verifications_per_host_per_minute` verification POSTs to one host (a
//! subscribe past it fails, nothing sent), so that subscribing cannot be used to flood a host.

use std::collections::HashMap;
use std::num::NonZeroU32;

use parking_lot::Mutex;
use taskmesh_webhook::{Challenge, Endpoint, Sender};

use super::EventSettings;
use crate::now_ms;

/// Most (principal, URL) pairs a node remembers; past it, those that expired are forgotten,
/// and if none had, all.
const MAX_REMEMBERED: usize = 16_384;

/// Why an endpoint was not verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyError {
    /// The handshake failed: the category (`challenge_failed`, `connection_refused`,
    /// `timeout`, `tls_error`).
    Failed(&'static str),
    /// This node sent its host as many verifications this minute as it may (the setting).
    RateLimited {
        /// The setting: verifications a minute to one host.
        per_minute: u32,
    },
}

/// What verification a node remembers, and its rate per host.
pub(super) struct Verifier {
    remember_ms: u64,
    per_minute: u32,
    /// (principal, URL) → until when it counts as verified (ms since the epoch).
    passed: Mutex<HashMap<(String, String), u64>>,
    per_host: governor::DefaultKeyedRateLimiter<String>,
}

impl Verifier {
    pub(super) fn new(settings: &EventSettings) -> Self {
        // Validated: 1 to 10000.
        let per_minute =
            NonZeroU32::new(settings.verifications_per_host_per_minute).unwrap_or(NonZeroU32::MIN);
        let quota = governor::Quota::per_minute(per_minute);
        Self {
            remember_ms: settings.verification_cache_ms,
            per_minute: per_minute.get(),
            passed: Mutex::new(HashMap::new()),
            per_host: governor::RateLimiter::keyed(quota),
        }
    }

    /// Verify `to` for `principal` with a signed challenge, unless that pair passed lately.
    pub(super) async fn verify(
        &self,
        sender: &Sender,
        principal: &str,
        to: &Endpoint,
        challenge: &Challenge<'_>,
    ) -> Result<(), VerifyError> {
        let key = (principal.to_owned(), to.as_str().to_owned());
        let now = now_ms();
        if self
            .passed
            .lock()
            .get(&key)
            .is_some_and(|until| *until > now)
        {
            return Ok(());
        }
        if self
            .per_host
            .check_key(&to.host().to_ascii_lowercase())
            .is_err()
        {
            return Err(VerifyError::RateLimited {
                per_minute: self.per_minute,
            });
        }
        sender
            .verify(to, challenge)
            .await
            .map_err(VerifyError::Failed)?;
        if self.remember_ms > 0 {
            let mut passed = self.passed.lock();
            if passed.len() >= MAX_REMEMBERED {
                passed.retain(|_, until| *until > now);
                if passed.len() >= MAX_REMEMBERED {
                    passed.clear();
                }
            }
            passed.insert(key, now.saturating_add(self.remember_ms));
        }
        Ok(())
    }
}
