//! Punctuation: callbacks a processor schedules on stream time or wall-clock
//! time (the course's `onTimer`).
//!
//! # When a schedule fires (same rules as Kafka Streams)
//!
//! * [`PunctuationType::StreamTime`]: aligned to time 0, so it fires with the
//!   first record whose timestamp reaches the next multiple of the interval,
//!   then at each further multiple that stream time passes. It is checked only
//!   after a record was processed: without records it never fires, however much
//!   wall-clock time passes.
//! * [`PunctuationType::WallClockTime`]: first due at `now + interval` (now =
//!   the wall-clock time when scheduled), then every interval. It is checked
//!   when the caller reports wall-clock time ([`super::TaskInstance::punctuate_wall_clock`]).
//!
//! A schedule fires **at most once per check**: when time jumped over several
//! intervals the missed ones are skipped and the next due time is the first
//! multiple after now. The callback receives the current time (stream time or
//! wall-clock), not the due time.

/// The time a punctuator follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PunctuationType {
    /// Event time: the task's stream time (largest record timestamp seen).
    StreamTime,
    /// Processing time: the wall clock of the process (or the test driver's mock clock).
    WallClockTime,
}

/// Identifies a schedule, to cancel it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ScheduleId(pub(crate) u64);

/// The pure timing part of a schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Timing {
    pub(crate) interval_ms: i64,
    pub(crate) next_ms: i64,
}

impl Timing {
    /// Timing for a schedule created at wall-clock `now_ms` (wall clock) or
    /// aligned to 0 (stream time).
    pub(crate) fn new(kind: PunctuationType, interval_ms: i64, now_ms: i64) -> Self {
        let interval_ms = interval_ms.max(1);
        let next_ms = match kind {
            PunctuationType::StreamTime => 0,
            PunctuationType::WallClockTime => now_ms.saturating_add(interval_ms),
        };
        Timing {
            interval_ms,
            next_ms,
        }
    }

    /// Whether the schedule is due at `now_ms`.
    pub(crate) fn due(&self, now_ms: i64) -> bool {
        now_ms >= self.next_ms
    }

    /// After firing at `now_ms`: the next due time is the first
    /// `next + k * interval` strictly after `now_ms`.
    pub(crate) fn advance(&mut self, now_ms: i64) {
        let missed = (now_ms - self.next_ms) / self.interval_ms;
        self.next_ms += (missed + 1) * self.interval_ms;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_time_is_aligned_to_zero_and_skips_missed_intervals() {
        let mut t = Timing::new(PunctuationType::StreamTime, 10, 12345);
        assert!(t.due(3));
        t.advance(3);
        assert_eq!(t.next_ms, 10);
        assert!(!t.due(9));
        assert!(t.due(10));
        t.advance(35);
        assert_eq!(t.next_ms, 40);
    }

    #[test]
    fn wall_clock_starts_one_interval_after_now() {
        let mut t = Timing::new(PunctuationType::WallClockTime, 100, 1000);
        assert!(!t.due(1099));
        assert!(t.due(1100));
        t.advance(1100);
        assert_eq!(t.next_ms, 1200);
    }
}
