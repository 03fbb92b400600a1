//! How records leave a task: the [`RecordCollector`] boundary.
//!
//! A task never talks to Kafka. Every record it emits — sink output,
//! repartition records, changelog records of logged stores, dead letters — is
//! handed to the collector the caller passes to each task call. The runtime's
//! collector produces into the open transaction; the test driver's collector
//! appends to in-memory topics. Key and value bytes are borrowed: the collector
//! copies them (librdkafka copies anyway), so sinks reuse their buffers and
//! emit without allocating.

use super::record::Headers;

/// What produced an output record; lets a collector route or count by kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutputKind {
    /// A sink writing to a user topic.
    Sink,
    /// A sink writing to an internal repartition topic.
    Repartition,
    /// The changelog record of a logged store write.
    Changelog,
    /// A record rejected by an error handler configured to dead-letter, or
    /// shed by load shedding to its topic.
    DeadLetter,
}

/// One record a task emits.
#[derive(Clone, Copy, Debug)]
pub struct OutputRecord<'a> {
    /// Full topic name (internal topics already carry the application id).
    pub topic: &'a str,
    /// The partition, or `None` to let the producer's partitioner
    /// (`murmur2_random`, as Java) choose from the key.
    pub partition: Option<i32>,
    /// Key bytes; `None` is a Kafka null.
    pub key: Option<&'a [u8]>,
    /// Value bytes; `None` is a Kafka null (a tombstone on compacted topics).
    pub value: Option<&'a [u8]>,
    /// Record timestamp, milliseconds since the epoch.
    pub timestamp: i64,
    /// Record headers.
    pub headers: &'a Headers,
    /// What produced the record.
    pub kind: OutputKind,
}

/// A collector could not take a record.
#[derive(Debug, thiserror::Error)]
#[error("could not send a record to topic '{topic}': {source}")]
pub struct CollectorError {
    /// The destination topic.
    pub topic: String,
    /// Why (for the runtime: the producer error).
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Receives every record a task emits. See the module docs.
///
/// ```
/// use weir::processor::{CollectorError, OutputRecord, RecordCollector};
/// #[derive(Default)]
/// struct Count(usize);
/// impl RecordCollector for Count {
///     fn send(&mut self, _record: OutputRecord<'_>) -> Result<(), CollectorError> {
///         self.0 += 1;
///         Ok(())
///     }
/// }
/// ```
pub trait RecordCollector {
    /// Takes one record (copying what it keeps).
    fn send(&mut self, record: OutputRecord<'_>) -> Result<(), CollectorError>;

    /// The number of partitions of `topic`, when known. Sinks with a custom
    /// partitioner need it; without it they leave the choice to the producer.
    fn partition_count(&self, topic: &str) -> Option<i32> {
        let _ = topic;
        None
    }
}
