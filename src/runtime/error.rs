//! Errors of the runtime, classified by what the application must do.

use crate::config::ConfigError;
use crate::processor::TaskError;
use crate::state::StoreError;

/// An error of a running (or starting) application.
#[derive(Debug, thiserror::Error)]
pub enum StreamsError {
    /// The configuration is invalid; the message names the key.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A source topic the topology reads does not exist.
    #[error(
        "source topic '{topic}' does not exist; create it (Weir creates only its internal topics) or fix the topology"
    )]
    MissingSourceTopic {
        /// The missing topic.
        topic: String,
    },
    /// Source topics of one sub-topology have different partition counts.
    #[error(
        "topics {topics:?} are read by one sub-topology and must be co-partitioned, but have partition counts {counts:?}; give them equal partition counts"
    )]
    NotCopartitioned {
        /// The topics.
        topics: Vec<String>,
        /// Their partition counts, in the same order.
        counts: Vec<i32>,
    },
    /// An internal topic exists with the wrong shape.
    #[error(
        "internal topic '{topic}' exists with {actual} partitions but {expected} are needed; delete it (weir reset) or fix the topology"
    )]
    InternalTopicMismatch {
        /// The topic.
        topic: String,
        /// Partitions needed.
        expected: i32,
        /// Partitions found.
        actual: i32,
    },
    /// The broker could not be reached or refused a request.
    #[error("Kafka: {context}: {source}")]
    Kafka {
        /// What Weir was doing.
        context: String,
        /// The client error.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// Another instance took over this thread's transactional id: this
    /// instance is a zombie and must stop.
    #[error(
        "producer fenced: another instance uses transactional id '{transactional_id}'; this thread stops"
    )]
    Fenced {
        /// The transactional id.
        transactional_id: String,
    },
    /// A task failed (an error handler set to fail, or a store error).
    #[error(transparent)]
    Task(#[from] TaskError),
    /// A state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An operation against the cluster did not finish in time (the broker
    /// may be down or overloaded); retried where the runtime can.
    #[error("timed out after {after:?}: {context}")]
    Timeout {
        /// What Weir was waiting for.
        context: String,
        /// How long it waited.
        after: std::time::Duration,
    },
    /// The operating system refused a resource the runtime needs.
    #[error("{context}: {source}")]
    Io {
        /// What Weir was doing.
        context: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The application is not in a state that allows the call.
    #[error("cannot {action} while the application is {state:?}")]
    IllegalState {
        /// What was attempted.
        action: &'static str,
        /// The current state.
        state: super::AppState,
    },
}

impl StreamsError {
    pub(crate) fn kafka(context: impl Into<String>, source: rdkafka::error::KafkaError) -> Self {
        StreamsError::Kafka {
            context: context.into(),
            source,
        }
    }
}
