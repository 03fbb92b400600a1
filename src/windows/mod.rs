//! Windows, windowed keys and triggers for windowed aggregations.
//!
//! A grouped stream is windowed with [`TimeWindows`] (tumbling or hopping),
//! [`SlidingWindows`] or [`SessionWindows`] and then aggregated (see
//! [`crate::topology::TimeWindowedKStream`] and
//! [`crate::topology::SessionWindowedKStream`]). The result is a table keyed
//! by [`Windowed<K>`]: the record key plus its window.
//!
//! # Time and lateness (invariants)
//!
//! * Event time comes from the source's timestamp extractor; a task's
//!   *stream time* is the largest timestamp it has seen.
//! * A time window `[start, end)` **closes** when stream time reaches
//!   `end + grace`; a sliding window `[start, end]` when it passes
//!   `end + grace`; a session `[start, end]` when it passes
//!   `end + gap + grace` (the last moment a record could still extend it, plus grace).
//! * A record none of whose windows is open is **late**: it is dropped,
//!   counted in [`crate::processor::TaskMetrics::late_dropped`], and written
//!   to the late-records topic when one is configured, with the reason in
//!   its headers ([`late_headers`]), through the task's collector — so
//!   inside the transaction of the input record. The runtime creates a
//!   missing late-records topic at start-up. (A hopping-window record
//!   that still has an open window updates those and is not counted; a
//!   sliding-window record is late when its left window closed.)
//! * Stream time survives restarts and task moves: the runtime commits it
//!   with the input offsets, in the same transaction as the state
//!   ([`crate::runtime::stream_time`]), so windows closed before a crash stay
//!   closed after it.
//! * Stores keep windows for `retention` (default and minimum: size + grace;
//!   for sessions gap + grace after their end) and then expire them.
//!
//! # Triggers ([`EmitStrategy`])
//!
//! * [`EmitStrategy::OnEveryUpdate`] (default, as Kafka Streams): every
//!   update forwards `Change { new, old }`.
//! * [`EmitStrategy::OnWindowClose`]: one final result per window and key,
//!   forwarded when the window closes (`Change { new, old: None }`).
//! * [`EmitStrategy::early`]: early results every N updates of a window
//!   and/or every T of wall-clock time while it is open (only windows that
//!   changed since their last result), then the final result at close.
//!
//! The trigger's bookkeeping — which windows are still open and how many
//! updates each has had since its last result — lives in a logged key-value
//! store `<store>-trigger`, written in the same transaction as the outputs.
//! So after a crash, a restart or a rebalance a window's final result is
//! still emitted exactly once.

pub(crate) mod serde;
pub(crate) mod session;
pub(crate) mod sliding;
pub(crate) mod time;
pub(crate) mod trigger;

pub use self::serde::WindowedSerde;

use std::time::Duration;

/// A time interval: `[start_ms, end_ms)` for time windows, `[start_ms, end_ms]`
/// for sessions (a session spans its first to its last record).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Window {
    /// Start (ms, inclusive).
    pub start_ms: i64,
    /// End (ms; exclusive for time windows, inclusive for sessions).
    pub end_ms: i64,
}

/// A key together with its window: the key of a windowed aggregation's table.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Windowed<K> {
    /// The record key.
    pub key: K,
    /// The window.
    pub window: Window,
}

impl<K> Windowed<K> {
    /// `key` in the window `[start_ms, end_ms)`.
    pub fn new(key: K, start_ms: i64, end_ms: i64) -> Self {
        Windowed {
            key,
            window: Window { start_ms, end_ms },
        }
    }
}

/// Errors in a window definition or its store's retention.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// Size, advance or gap is zero or out of range.
    #[error("{what} is {value_ms} ms; {requirement}")]
    InvalidDuration {
        /// Which parameter.
        what: &'static str,
        /// Its value.
        value_ms: i64,
        /// What it must satisfy.
        requirement: &'static str,
    },
    /// The store would expire windows before they close.
    #[error(
        "retention {retention_ms} ms is shorter than window size + grace ({needed_ms} ms); \
         windows would expire before they close: raise Materialized::with_retention or lower the grace"
    )]
    RetentionTooShort {
        /// The configured retention.
        retention_ms: i64,
        /// Window size (or session gap) + grace.
        needed_ms: i64,
    },
    /// An early-firing trigger without any firing condition.
    #[error(
        "EmitStrategy::early needs every_updates > 0 and/or a non-zero every_wall_clock interval"
    )]
    EmptyEarlyTrigger,
}

/// Header of a late record: why it was dropped (`window-closed`).
pub const LATE_HEADER_REASON: &str = "weir.late.reason";
/// Header of a late record: a sentence with the record time, stream time
/// and close bound.
pub const LATE_HEADER_MESSAGE: &str = "weir.late.message";
/// Header of a late record: the task's stream time when it was dropped (ms, decimal).
pub const LATE_HEADER_STREAM_TIME: &str = "weir.late.stream_time";
/// Header of a late record: the windowed aggregation's store.
pub const LATE_HEADER_STORE: &str = "weir.late.store";
/// Header of a late record: the input topic it was read from.
pub const LATE_HEADER_TOPIC: &str = "weir.late.topic";
/// Header of a late record: its input partition (decimal).
pub const LATE_HEADER_PARTITION: &str = "weir.late.partition";
/// Header of a late record: its input offset (decimal).
pub const LATE_HEADER_OFFSET: &str = "weir.late.offset";
/// The value of [`LATE_HEADER_REASON`].
pub const LATE_REASON_WINDOW_CLOSED: &str = "window-closed";

/// The headers of a late record of `store` with event time `record_ms`,
/// dropped at `stream_time_ms` because its windows end at or before
/// `close_bound_ms`; `source` is where it was read (absent in punctuators).
pub(crate) fn late_headers(
    store: &str,
    record_ms: i64,
    stream_time_ms: i64,
    close_bound_ms: i64,
    source: Option<crate::processor::RecordMetadata<'_>>,
) -> crate::processor::Headers {
    let text = |s: String| Some(s.into_bytes());
    let mut headers = crate::processor::Headers::new();
    headers
        .add(LATE_HEADER_REASON, text(LATE_REASON_WINDOW_CLOSED.into()))
        .add(
            LATE_HEADER_MESSAGE,
            text(format!(
                "record at {record_ms} ms dropped by '{store}': its windows closed \
                 (they end at or before {close_bound_ms} ms at stream time {stream_time_ms} ms)"
            )),
        )
        .add(LATE_HEADER_STREAM_TIME, text(stream_time_ms.to_string()))
        .add(LATE_HEADER_STORE, text(store.to_owned()));
    if let Some(source) = source {
        headers
            .add(LATE_HEADER_TOPIC, text(source.topic.to_owned()))
            .add(LATE_HEADER_PARTITION, text(source.partition.to_string()))
            .add(LATE_HEADER_OFFSET, text(source.offset.to_string()));
    }
    headers
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Tumbling (advance = size) or hopping (advance < size) windows
/// `[start, start + size)` aligned to the epoch (Kafka Streams' `TimeWindows`).
///
/// ```
/// use std::time::Duration;
/// use weir::windows::TimeWindows;
///
/// // 1-minute windows every 10 s, accepting records up to 5 s late.
/// let w = TimeWindows::of_size_with_grace(Duration::from_secs(60), Duration::from_secs(5))
///     .unwrap()
///     .advance_by(Duration::from_secs(10))
///     .unwrap();
/// let starts: Vec<i64> = w.windows_for(65_000).map(|win| win.start_ms).collect();
/// assert_eq!(starts, vec![10_000, 20_000, 30_000, 40_000, 50_000, 60_000]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeWindows {
    size_ms: i64,
    advance_ms: i64,
    grace_ms: i64,
}

impl TimeWindows {
    /// Tumbling windows of `size` with `grace` for out-of-order records.
    pub fn of_size_with_grace(size: Duration, grace: Duration) -> Result<Self, WindowError> {
        let size_ms = positive("window size", millis(size))?;
        Ok(TimeWindows {
            size_ms,
            advance_ms: size_ms,
            grace_ms: millis(grace),
        })
    }

    /// Hopping windows: a new window every `advance` (0 < advance <= size).
    pub fn advance_by(mut self, advance: Duration) -> Result<Self, WindowError> {
        let advance_ms = millis(advance);
        if advance_ms <= 0 || advance_ms > self.size_ms {
            return Err(WindowError::InvalidDuration {
                what: "advance",
                value_ms: advance_ms,
                requirement: "it must be > 0 and <= the window size",
            });
        }
        self.advance_ms = advance_ms;
        Ok(self)
    }

    /// Window size (ms).
    pub fn size_ms(&self) -> i64 {
        self.size_ms
    }

    /// Advance (ms); equals the size for tumbling windows.
    pub fn advance_ms(&self) -> i64 {
        self.advance_ms
    }

    /// Grace period (ms).
    pub fn grace_ms(&self) -> i64 {
        self.grace_ms
    }

    /// The windows containing `timestamp_ms`, by start (none start before 0).
    pub fn windows_for(&self, timestamp_ms: i64) -> impl Iterator<Item = Window> + use<> {
        let (size, advance) = (self.size_ms, self.advance_ms);
        let first = (timestamp_ms - size + advance).max(0) / advance * advance;
        (0..)
            .map(move |i| first + i * advance)
            .take_while(move |&start| start <= timestamp_ms)
            .map(move |start| Window {
                start_ms: start,
                end_ms: start + size,
            })
    }
}

/// Sliding windows (Kafka Streams' `SlidingWindows`): every window
/// `[start, start + time_difference]` (both ends inclusive) that begins or
/// ends at a record, i.e. each record's *left* window `[ts - diff, ts]` and
/// *right* window `[ts + 1, ts + 1 + diff]` when a record falls into it.
/// Records within `diff` of each other are aggregated together; each
/// distinct window is one result.
///
/// ```
/// use std::time::Duration;
/// use weir::windows::SlidingWindows;
///
/// let w = SlidingWindows::with_time_difference_and_grace(Duration::from_secs(5), Duration::ZERO).unwrap();
/// assert_eq!(w.time_difference_ms(), 5_000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingWindows {
    diff_ms: i64,
    grace_ms: i64,
}

impl SlidingWindows {
    /// Windows spanning `time_difference`, with `grace` for out-of-order records.
    pub fn with_time_difference_and_grace(
        time_difference: Duration,
        grace: Duration,
    ) -> Result<Self, WindowError> {
        Ok(SlidingWindows {
            diff_ms: positive("time difference", millis(time_difference))?,
            grace_ms: millis(grace),
        })
    }

    /// The maximum time difference between records of one window (ms).
    pub fn time_difference_ms(&self) -> i64 {
        self.diff_ms
    }

    /// Grace period (ms).
    pub fn grace_ms(&self) -> i64 {
        self.grace_ms
    }
}

/// Session windows: records of a key less than `gap` apart belong to one
/// session; a record bridging two sessions merges them (Kafka Streams'
/// `SessionWindows`).
///
/// ```
/// use std::time::Duration;
/// use weir::windows::SessionWindows;
///
/// let w = SessionWindows::with_inactivity_gap_and_grace(Duration::from_secs(30), Duration::ZERO).unwrap();
/// assert_eq!(w.gap_ms(), 30_000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionWindows {
    gap_ms: i64,
    grace_ms: i64,
}

impl SessionWindows {
    /// Sessions closed after `gap` of inactivity, with `grace` for
    /// out-of-order records.
    pub fn with_inactivity_gap_and_grace(
        gap: Duration,
        grace: Duration,
    ) -> Result<Self, WindowError> {
        Ok(SessionWindows {
            gap_ms: positive("inactivity gap", millis(gap))?,
            grace_ms: millis(grace),
        })
    }

    /// The inactivity gap (ms).
    pub fn gap_ms(&self) -> i64 {
        self.gap_ms
    }

    /// Grace period (ms).
    pub fn grace_ms(&self) -> i64 {
        self.grace_ms
    }
}

fn positive(what: &'static str, value_ms: i64) -> Result<i64, WindowError> {
    if value_ms <= 0 {
        return Err(WindowError::InvalidDuration {
            what,
            value_ms,
            requirement: "it must be at least 1 ms",
        });
    }
    Ok(value_ms)
}

/// When a windowed aggregation forwards results; see the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EmitStrategy {
    /// Every update (Kafka Streams' default).
    #[default]
    OnEveryUpdate,
    /// Once per window and key, when the window closes (emit-final).
    OnWindowClose,
    /// Early results while the window is open, then the final result.
    Early {
        /// Fire after this many updates of a window since its last result (0: never).
        every_updates: u64,
        /// Fire every this many ms of wall-clock time for windows updated
        /// since their last result (0: never).
        every_wall_clock_ms: i64,
    },
}

impl EmitStrategy {
    /// Early firings every `every_updates` updates (0: off) and/or every
    /// `every_wall_clock` (`None`: off), plus the final result at close.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::windows::EmitStrategy;
    ///
    /// let t = EmitStrategy::early(3, Some(Duration::from_secs(10))).unwrap();
    /// assert!(EmitStrategy::early(0, None).is_err());
    /// # let _ = t;
    /// ```
    pub fn early(
        every_updates: u64,
        every_wall_clock: Option<Duration>,
    ) -> Result<Self, WindowError> {
        let every_wall_clock_ms = every_wall_clock.map_or(0, millis);
        if every_updates == 0 && every_wall_clock_ms <= 0 {
            return Err(WindowError::EmptyEarlyTrigger);
        }
        Ok(EmitStrategy::Early {
            every_updates,
            every_wall_clock_ms,
        })
    }
}

/// Retention (ms) of a window store: `configured` or size + grace, checked.
pub(crate) fn retention(configured: Option<i64>, needed_ms: i64) -> Result<i64, WindowError> {
    match configured {
        Some(r) if r < needed_ms => Err(WindowError::RetentionTooShort {
            retention_ms: r,
            needed_ms,
        }),
        Some(r) => Ok(r),
        None => Ok(needed_ms),
    }
}

/// Segment width for a store keeping data `retention_ms` (half of it, as Kafka
/// Streams, so expiry drops whole segments at most half a retention late).
pub(crate) fn segment_interval(retention_ms: i64) -> i64 {
    (retention_ms / 2).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tumbling_windows_for() {
        let w = TimeWindows::of_size_with_grace(Duration::from_millis(10), Duration::ZERO).unwrap();
        let v: Vec<_> = w.windows_for(25).collect();
        assert_eq!(
            v,
            vec![Window {
                start_ms: 20,
                end_ms: 30
            }]
        );
    }

    #[test]
    fn hopping_windows_start_at_zero() {
        let w = TimeWindows::of_size_with_grace(Duration::from_millis(10), Duration::ZERO)
            .unwrap()
            .advance_by(Duration::from_millis(5))
            .unwrap();
        let starts: Vec<_> = w.windows_for(3).map(|w| w.start_ms).collect();
        assert_eq!(starts, vec![0]);
        let starts: Vec<_> = w.windows_for(12).map(|w| w.start_ms).collect();
        assert_eq!(starts, vec![5, 10]);
    }

    #[test]
    fn retention_is_validated() {
        assert_eq!(retention(None, 15), Ok(15));
        assert_eq!(
            retention(Some(10), 15),
            Err(WindowError::RetentionTooShort {
                retention_ms: 10,
                needed_ms: 15
            })
        );
        assert!(TimeWindows::of_size_with_grace(Duration::ZERO, Duration::ZERO).is_err());
    }
}
