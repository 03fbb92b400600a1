//! The client context of consumers that read partitions to their end.
//!
//! With `enable.partition.eof=true` librdkafka reports reaching the end of
//! a partition as an error event. rdkafka hands every error event to
//! [`ClientContext::error`] before the consumer returns it from `poll`
//! (as `KafkaError::PartitionEOF`), and the default context logs it at
//! ERROR level as "Global error: PartitionEOF". The end of a partition is
//! how restoration, global tables and `weir table` know they are done, not
//! an error: this context logs it at debug level and every other error by
//! its recovery class (`client_log.rs`).

use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, ConsumerContext};
use rdkafka::error::KafkaError;

/// A consumer context for reading partitions to their end: the end of a
/// partition is logged at debug level, not as an error, and other client
/// errors by their recovery class. `weir table` uses it; so can a program
/// that reads a topic to its end with `enable.partition.eof=true`.
#[derive(Clone, Copy, Debug, Default)]
pub struct EndOfPartitionContext;

/// A consumer reading to the end of partitions (restore, standby, global).
pub(crate) type RestoreConsumer = BaseConsumer<EndOfPartitionContext>;

impl ClientContext for EndOfPartitionContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, message: &str) {
        super::client_log::client_log(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        super::client_log::client_error(&error, reason);
    }
}

impl ConsumerContext for EndOfPartitionContext {}
