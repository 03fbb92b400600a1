//! What happens to a record that cannot be processed.
//!
//! Two handlers are configured per task ([`crate::processor::TaskConfig`]):
//!
//! * the **deserialization** handler, for input records whose key or value
//!   the source's serde rejects, and for records whose extracted timestamp is
//!   invalid (negative);
//! * the **processing** handler, for errors raised while the record travels
//!   through the processors (user errors, serialization at sinks and stores)
//!   and for failing punctuators.
//!
//! Each is an [`ErrorHandling`]: fail the task (default, as Kafka Streams'
//! `LogAndFailExceptionHandler`), log and skip the record (counted in
//! [`crate::processor::TaskMetrics`]), or dead-letter it: the *original* input
//! key and value bytes are written to the configured topic with the input
//! headers plus the error headers below (the names of Kafka's KIP-1034, so
//! tooling for Kafka Streams' dead-letter queues reads Weir's too).
//! A failing punctuator has no input record; under `DeadLetter` it is logged
//! and skipped.
//!
//! Outputs the record produced before the error stay emitted (as in Kafka
//! Streams); under exactly-once they commit with the rest of the transaction.

/// Header: the kind of error (`deserialization`, `invalid-timestamp`, `processing`).
pub const HEADER_EXCEPTION: &str = "__streams.errors.exception";
/// Header: the error message.
pub const HEADER_MESSAGE: &str = "__streams.errors.message";
/// Header: the input topic of the rejected record.
pub const HEADER_TOPIC: &str = "__streams.errors.topic";
/// Header: the input partition (decimal text).
pub const HEADER_PARTITION: &str = "__streams.errors.partition";
/// Header: the input offset (decimal text).
pub const HEADER_OFFSET: &str = "__streams.errors.offset";

/// The choice of an error handler.
///
/// ```
/// use weir::handler::ErrorHandling;
/// let h = ErrorHandling::DeadLetter { topic: "orders-dlq".into() };
/// assert_ne!(h, ErrorHandling::default());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ErrorHandling {
    /// Stop the task with an error naming the record (topic/partition/offset).
    #[default]
    LogAndFail,
    /// Log a warning, count the record as skipped, and go on.
    LogAndContinue,
    /// Write the original record with error headers to `topic`, count it, and go on.
    DeadLetter {
        /// The dead-letter topic (full name; not prefixed with the application id).
        topic: String,
    },
}

impl std::str::FromStr for ErrorHandling {
    type Err = String;

    /// `log_and_fail`, `log_and_continue` or `dead_letter:<topic>` (the
    /// values of the `*_handler` settings).
    fn from_str(value: &str) -> Result<Self, String> {
        match value {
            "log_and_fail" => Ok(ErrorHandling::LogAndFail),
            "log_and_continue" => Ok(ErrorHandling::LogAndContinue),
            other => match other.strip_prefix("dead_letter:") {
                Some(topic) if !topic.is_empty() => Ok(ErrorHandling::DeadLetter {
                    topic: topic.to_string(),
                }),
                _ => Err(format!(
                    "'{other}' is not a handler; use log_and_fail, log_and_continue or dead_letter:<topic>"
                )),
            },
        }
    }
}
