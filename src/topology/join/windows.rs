//! [`JoinWindows`]: which records of two streams join.
//!
//! A left record at `t` joins right records with timestamps in
//! `[t - before, t + after]`; symmetrically a right record at `t` joins left
//! records in `[t - after, t + before]`. A record's *window closes* when
//! stream time passes the end of its own range plus `grace`
//! (left: `t + after + grace`, right: `t + before + grace`): a record that
//! arrives after that is *late* (dropped and counted), and an unmatched
//! left/outer record is emitted with no partner only then.

use std::time::Duration;

/// Time bounds of a stream–stream join (Kafka Streams' `JoinWindows`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JoinWindows {
    /// How far a right record may be *before* a left record (ms).
    pub before_ms: i64,
    /// How far a right record may be *after* a left record (ms).
    pub after_ms: i64,
    /// How long after its window a record is still accepted (ms).
    pub grace_ms: i64,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl JoinWindows {
    /// Records at most `difference` apart join; out-of-order records are
    /// accepted up to `grace` after their window.
    pub fn of_time_difference_and_grace(difference: Duration, grace: Duration) -> Self {
        JoinWindows {
            before_ms: ms(difference),
            after_ms: ms(difference),
            grace_ms: ms(grace),
        }
    }

    /// Records at most `difference` apart join; no grace.
    pub fn of_time_difference_without_grace(difference: Duration) -> Self {
        Self::of_time_difference_and_grace(difference, Duration::ZERO)
    }

    /// With `before`: right records up to this long before a left record join.
    pub fn before(mut self, before: Duration) -> Self {
        self.before_ms = ms(before);
        self
    }

    /// With `after`: right records up to this long after a left record join.
    pub fn after(mut self, after: Duration) -> Self {
        self.after_ms = ms(after);
        self
    }

    /// How long each side's window store keeps records: every record a
    /// not-late record of the other side can still match.
    pub fn retention_ms(&self) -> i64 {
        self.before_ms
            .saturating_add(self.after_ms)
            .saturating_add(self.grace_ms)
            .max(1)
    }
}
