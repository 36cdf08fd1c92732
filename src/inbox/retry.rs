//! [`RetryPolicy`]: when a failed event is due again, and when it is dead.

use std::time::{Duration, SystemTime};

use super::NextAttempt;

/// When a failed event is due again (a capped exponential backoff with jitter), and when it is
/// dead instead.
///
/// After attempt `n` fails, the event waits a random delay between half and all of
/// `first_delay × 2^(n-1)`, capped at `max_delay`. It is dead once a failed attempt comes more
/// than `max_age` after its receipt (72 h by default: nothing goes dead within the provider's
/// 48-hour window, so a handler outage of up to three days recovers by itself), or after
/// `max_attempts` attempts if one is set (none by default). A replay starts a new budget: its
/// attempts and its age count from the replay.
///
/// ```
/// use sangho_webhook::inbox::RetryPolicy;
/// use std::time::Duration;
///
/// let policy = RetryPolicy::default()
///     .with_first_delay(Duration::from_secs(5))
///     .with_max_delay(Duration::from_secs(600))
///     .with_max_attempts(20);
/// # let _ = policy;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    first_delay: Duration,
    max_delay: Duration,
    max_attempts: Option<u32>,
    max_age: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            first_delay: Self::DEFAULT_FIRST_DELAY,
            max_delay: Self::DEFAULT_MAX_DELAY,
            max_attempts: None,
            max_age: Self::DEFAULT_MAX_AGE,
        }
    }
}

impl RetryPolicy {
    /// The default delay after the first failure: 10 s.
    pub const DEFAULT_FIRST_DELAY: Duration = Duration::from_secs(10);
    /// The default longest delay: 1 h.
    pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(3600);
    /// The default age at which a failing event is dead: 72 h.
    pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(72 * 3600);

    /// Waits `delay` (the upper bound, before jitter) after the first failure, twice as long
    /// after each next one.
    pub fn with_first_delay(mut self, delay: Duration) -> Self {
        self.first_delay = delay;
        self
    }

    /// Waits at most `delay` between attempts.
    pub fn with_max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// Makes an event dead after `attempts` attempts (at least 1).
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts.max(1));
        self
    }

    /// Makes a failing event dead once it was received more than `age` ago.
    pub fn with_max_age(mut self, age: Duration) -> Self {
        self.max_age = age;
        self
    }

    /// The longest delay before the next attempt after attempt `attempt` failed (before
    /// jitter).
    pub fn delay_bound(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(32);
        self.first_delay
            .saturating_mul(1u32 << doublings.min(31))
            .min(self.max_delay)
    }

    /// Whether attempt `attempt` was the last one allowed, for an event whose attempt budget
    /// started at `budget_start` (its receipt, or its last replay).
    pub fn is_exhausted(&self, attempt: u32, budget_start: SystemTime, now: SystemTime) -> bool {
        let age = now.duration_since(budget_start).unwrap_or_default();
        self.max_attempts.is_some_and(|max| attempt >= max) || age >= self.max_age
    }

    /// What comes after attempt `attempt` failed at `now`, for an event whose attempt budget
    /// started at `budget_start` (its receipt, or its last replay).
    pub fn next(&self, attempt: u32, budget_start: SystemTime, now: SystemTime) -> NextAttempt {
        if self.is_exhausted(attempt, budget_start, now) {
            return NextAttempt::Dead;
        }
        let bound = self.delay_bound(attempt);
        // Half fixed, half random: attempts of events that failed together spread out.
        let jitter = bound.mul_f64(fastrand::f64()) / 2;
        NextAttempt::After(bound / 2 + jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn the_delay_doubles_from_the_first_up_to_the_cap() {
        let policy = RetryPolicy::default()
            .with_first_delay(SECOND)
            .with_max_delay(10 * SECOND);
        let bounds: Vec<_> = (1..=6).map(|n| policy.delay_bound(n).as_secs()).collect();
        assert_eq!(bounds, [1, 2, 4, 8, 10, 10]);
        assert_eq!(policy.delay_bound(u32::MAX), 10 * SECOND);
    }

    #[test]
    fn the_jittered_delay_is_between_half_and_all_of_the_bound() {
        let policy = RetryPolicy::default().with_first_delay(8 * SECOND);
        let now = SystemTime::now();
        for _ in 0..1000 {
            let NextAttempt::After(delay) = policy.next(3, now, now) else {
                panic!("not dead yet");
            };
            assert!((16 * SECOND..=32 * SECOND).contains(&delay), "{delay:?}");
        }
    }

    #[test]
    fn an_event_is_dead_after_its_attempts_or_its_age() {
        let now = SystemTime::now();
        let by_attempts = RetryPolicy::default().with_max_attempts(3);
        assert!(matches!(
            by_attempts.next(2, now, now),
            NextAttempt::After(_)
        ));
        assert_eq!(by_attempts.next(3, now, now), NextAttempt::Dead);

        let by_default = RetryPolicy::default();
        let young = now - Duration::from_secs(71 * 3600);
        let old = now - Duration::from_secs(72 * 3600);
        assert!(matches!(
            by_default.next(500, young, now),
            NextAttempt::After(_)
        ));
        assert_eq!(by_default.next(1, old, now), NextAttempt::Dead);
    }
}
