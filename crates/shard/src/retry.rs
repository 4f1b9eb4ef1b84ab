//! The one retry pacer: how long a caller that finds no leader (or a busy one) waits before it
//! asks again, and when it gives up.
//!
//! Everything that follows a leader uses it: the router's `on_leader` (task requests), the
//! metadata client (`Membership::propose`, `propose_via`) and a replica's membership changes.
//! Each decides *whom* to ask next (a leader hint, the placement, the next seed); the pacer
//! decides *when*: pauses that start short and double up to a ceiling, never past the budget.

use std::time::Duration;

use tokio::time::Instant;

/// A retry budget with doubling pauses.
#[derive(Debug, Clone)]
pub struct Retry {
    deadline: Instant,
    first: Duration,
    pause: Duration,
    ceiling: Duration,
}

impl Retry {
    /// A budget of `budget` from now; the first pause is `first`, each next one doubles, up to
    /// `ceiling`.
    pub fn new(budget: Duration, first: Duration, ceiling: Duration) -> Self {
        Self {
            deadline: Instant::now() + budget,
            first,
            pause: first,
            ceiling: ceiling.max(first),
        }
    }

    /// Whether the budget is spent.
    pub fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// What is left of the budget.
    pub fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Wait before the next attempt (never past the deadline) and return `true`, or return
    /// `false` at once when the budget is spent.
    pub async fn pause(&mut self) -> bool {
        let left = self.left();
        if left.is_zero() {
            return false;
        }
        tokio::time::sleep(self.pause.min(left)).await;
        self.pause = (self.pause * 2).min(self.ceiling);
        true
    }

    /// Progress was made (a new leader to ask): the next pause is the first one again.
    pub fn reset(&mut self) {
        self.pause = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn pauses_double_up_to_the_ceiling_and_stop_at_the_budget() {
        let start = Instant::now();
        let mut r = Retry::new(
            Duration::from_millis(1000),
            Duration::from_millis(100),
            Duration::from_millis(300),
        );
        let mut waited = vec![];
        let mut at = start;
        while r.pause().await {
            waited.push((Instant::now() - at).as_millis());
            at = Instant::now();
        }
        // 100, 200, 300, 300, then what is left (100), then nothing.
        assert_eq!(waited, vec![100, 200, 300, 300, 100]);
        assert!(r.expired());
        assert_eq!(Instant::now() - start, Duration::from_millis(1000));
    }

    #[tokio::test(start_paused = true)]
    async fn progress_starts_the_pauses_over() {
        let mut r = Retry::new(
            Duration::from_secs(10),
            Duration::from_millis(50),
            Duration::from_secs(1),
        );
        assert!(r.pause().await);
        assert!(r.pause().await);
        r.reset();
        let at = Instant::now();
        assert!(r.pause().await);
        assert_eq!(Instant::now() - at, Duration::from_millis(50));
    }
}
