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

/// The context of the start-up metadata client: logs as the others do,
/// and keeps the first refusal librdkafka reports (SASL authentication
/// failed, TLS handshake failed), so that start-up stops at once with a
/// message that says which, instead of retrying a broker that will never
/// let it in.
#[derive(Default)]
pub(crate) struct StartupContext {
    refused: std::sync::Mutex<Option<String>>,
}

impl StartupContext {
    /// Why the broker refused this client, if it did.
    pub(crate) fn refused(&self) -> Option<String> {
        self.refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Keeps the first refusal.
    pub(crate) fn note(&self, code: RDKafkaErrorCode, reason: &str) {
        if let Some(why) = refusal(code, reason) {
            self.refused
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(why);
        }
    }
}

/// What a refusal means for the user, or `None` when `code` is not one.
pub(crate) fn refusal(code: RDKafkaErrorCode, reason: &str) -> Option<String> {
    let lower = reason.to_ascii_lowercase();
    match code {
        RDKafkaErrorCode::Authentication => Some(format!(
            "SASL authentication failed: wrong user name or password? (check kafka.sasl.username, \
             kafka.sasl.password and kafka.sasl.mechanism): {reason}"
        )),
        RDKafkaErrorCode::SSL if lower.contains("certificate verify failed") => Some(format!(
            "TLS: the broker's certificate is not trusted (check kafka.ssl.ca.location): {reason}"
        )),
        RDKafkaErrorCode::SSL => Some(format!(
            "TLS handshake failed (check the kafka.ssl.* options and that the port speaks TLS): {reason}"
        )),
        _ => None,
    }
}

impl rdkafka::ClientContext for StartupContext {
    /// librdkafka's log lines carry the detail its error codes lack.
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        client_log(level, facility, message);
        let lower = message.to_ascii_lowercase();
        if lower.contains("certificate verify failed") || lower.contains("ssl handshake failed") {
            self.note(RDKafkaErrorCode::SSL, message);
        } else if lower.contains("sasl authentication error")
            || lower.contains("authentication failed")
        {
            self.note(RDKafkaErrorCode::Authentication, message);
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        client_error(&error, reason);
        if let Some(code) = error.rdkafka_error_code() {
            self.note(code, reason);
        }
    }
}

impl rdkafka::consumer::ConsumerContext for StartupContext {}

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
    fn refusals_say_which() {
        let auth = refusal(
            RDKafkaErrorCode::Authentication,
            "SASL SCRAM-SHA-512 mechanism handshake failed",
        )
        .unwrap();
        assert!(auth.contains("wrong user name or password"), "{auth}");
        let cert = refusal(
            RDKafkaErrorCode::SSL,
            "SSL handshake failed: error:0A000086:SSL routines::certificate verify failed",
        )
        .unwrap();
        assert!(cert.contains("certificate is not trusted"), "{cert}");
        assert_eq!(
            refusal(RDKafkaErrorCode::BrokerTransportFailure, "down"),
            None
        );
    }

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
