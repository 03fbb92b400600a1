//! What librdkafka reports outside of calls — its log lines and its
//! "global" errors — logged at the level the condition deserves: a broker
//! that is restarting (connection refused, transport failure, all brokers
//! down) is transient and logged as a warning, not as an error; the thread
//! goes on and recovers by itself (see [`crate::runtime::Recovery`]).

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::Recovery;
use super::error::classify_kafka;

/// A global error of a client (rdkafka's `ClientContext::error`).
pub(crate) fn client_error(error: &KafkaError, reason: &str) {
    match error {
        _ if is_end_of_partition(error) => {
            tracing::debug!(target: "librdkafka", %error, reason, "end of partition")
        }
        _ if classify_kafka(error, Recovery::Retry) == Recovery::Retry => {
            tracing::warn!(target: "librdkafka", %error, reason, "transient client error")
        }
        _ => tracing::error!(target: "librdkafka", %error, reason, "client error"),
    }
}

/// A log line of librdkafka (rdkafka's `ClientContext::log`); connection
/// failures (facility `FAIL`) are warnings.
pub(crate) fn client_log(level: RDKafkaLogLevel, facility: &str, message: &str) {
    use RDKafkaLogLevel::*;
    match level {
        Emerg | Alert | Critical | Error if facility != "FAIL" => {
            tracing::error!(target: "librdkafka", "{facility} {message}")
        }
        Emerg | Alert | Critical | Error | Warning => {
            tracing::warn!(target: "librdkafka", "{facility} {message}")
        }
        Notice | Info => tracing::info!(target: "librdkafka", "{facility} {message}"),
        Debug => tracing::debug!(target: "librdkafka", "{facility} {message}"),
    }
}

/// Whether `error` is an end of partition (reported with
/// `enable.partition.eof=true`) rather than a failure.
pub(crate) fn is_end_of_partition(error: &KafkaError) -> bool {
    matches!(error, KafkaError::PartitionEOF(_))
        || error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_end_of_a_partition_is_quiet() {
        assert!(is_end_of_partition(&KafkaError::Global(
            RDKafkaErrorCode::PartitionEOF
        )));
        assert!(is_end_of_partition(&KafkaError::PartitionEOF(3)));
        assert!(!is_end_of_partition(&KafkaError::Global(
            RDKafkaErrorCode::BrokerTransportFailure
        )));
    }
}
