//! Event time: timestamp extractors.
//!
//! A source's [`TimestampExtractor`] gives each input record its event time,
//! after the key and value were deserialized. The task's *stream time* is the
//! largest extracted timestamp seen so far (`-1` before the first record); it
//! never goes backwards. A negative extracted timestamp is invalid: the record
//! goes to the deserialization error handler ([`crate::handler`]) and does not
//! advance stream time.

/// Gives a record its event time (milliseconds since the epoch).
pub trait TimestampExtractor<K, V>: Send + Sync + 'static {
    /// The timestamp of the record with `key`/`value` whose Kafka timestamp is
    /// `record_timestamp`; `stream_time` is the task's current stream time
    /// (useful as a fallback). A negative result marks the record invalid.
    fn extract(&self, key: &K, value: &V, record_timestamp: i64, stream_time: i64) -> i64;
}

/// The Kafka record timestamp (create or log-append time). The default.
#[derive(Clone, Copy, Debug, Default)]
pub struct RecordTimestamp;

impl<K, V> TimestampExtractor<K, V> for RecordTimestamp {
    fn extract(&self, _key: &K, _value: &V, record_timestamp: i64, _stream_time: i64) -> i64 {
        record_timestamp
    }
}

/// Reads the timestamp from a field of the (deserialized) value.
///
/// ```
/// use weir::time::{TimestampExtractor, ValueTimestamp};
/// struct Reading { at_ms: i64 }
/// let ex = ValueTimestamp::new(|r: &Reading| r.at_ms);
/// assert_eq!(ex.extract(&(), &Reading { at_ms: 7 }, 99, -1), 7);
/// ```
pub struct ValueTimestamp<F>(F);

impl<F> ValueTimestamp<F> {
    /// Uses `field` to read the timestamp from a value.
    pub fn new(field: F) -> Self {
        ValueTimestamp(field)
    }
}

impl<K, V, F> TimestampExtractor<K, V> for ValueTimestamp<F>
where
    F: Fn(&V) -> i64 + Send + Sync + 'static,
{
    fn extract(&self, _key: &K, value: &V, _record_timestamp: i64, _stream_time: i64) -> i64 {
        (self.0)(value)
    }
}
