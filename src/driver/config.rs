//! The driver's settings and errors.

use std::collections::HashMap;

use crate::handler::ErrorHandling;
use crate::processor::{ProcessorError, TaskError};
use crate::serdes::SerdeError;
use crate::state::StoreError;

/// Settings of a [`TopologyTestDriver`].
#[derive(Clone, Debug)]
pub struct DriverConfig {
    /// Application id (prefix of internal topic names).
    pub application_id: String,
    /// Deserialization error handler.
    pub deserialization_handler: ErrorHandling,
    /// Processing error handler.
    pub processing_handler: ErrorHandling,
    /// The mock wall clock at start (ms).
    pub initial_wall_clock_ms: i64,
    /// Partition counts reported to custom partitioners (default 1).
    pub partition_counts: HashMap<String, i32>,
    /// Record cache of the aggregations, in bytes (default 0: every update
    /// goes downstream at once). The driver flushes and commits after every
    /// input record, so a cache only collapses the updates one input
    /// record causes (several words of one line, say), as at a runtime
    /// commit.
    pub cache_max_bytes: u64,
}

impl DriverConfig {
    /// Defaults: `LogAndFail` handlers, wall clock at 0.
    pub fn new(application_id: impl Into<String>) -> Self {
        DriverConfig {
            application_id: application_id.into(),
            deserialization_handler: ErrorHandling::LogAndFail,
            processing_handler: ErrorHandling::LogAndFail,
            initial_wall_clock_ms: 0,
            partition_counts: HashMap::new(),
            cache_max_bytes: 0,
        }
    }

    /// With a record cache of `bytes` (see [`DriverConfig::cache_max_bytes`]).
    pub fn with_cache_max_bytes(mut self, bytes: u64) -> Self {
        self.cache_max_bytes = bytes;
        self
    }

    /// With this deserialization handler.
    pub fn with_deserialization_handler(mut self, handling: ErrorHandling) -> Self {
        self.deserialization_handler = handling;
        self
    }

    /// With this processing handler.
    pub fn with_processing_handler(mut self, handling: ErrorHandling) -> Self {
        self.processing_handler = handling;
        self
    }

    /// Reports `partitions` partitions for `topic` to custom partitioners.
    pub fn with_partition_count(mut self, topic: impl Into<String>, partitions: i32) -> Self {
        self.partition_counts.insert(topic.into(), partitions);
        self
    }

    /// With the mock wall clock starting at `ms`.
    pub fn with_initial_wall_clock_ms(mut self, ms: i64) -> Self {
        self.initial_wall_clock_ms = ms;
        self
    }
}

/// Errors of the test driver.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// A task stopped with an error (for example `LogAndFail`).
    #[error(transparent)]
    Task(#[from] TaskError),
    /// No task reads the topic piped into.
    #[error("no sub-topology reads topic '{0}'; pipe into one of the topology's source topics")]
    UnknownTopic(String),
    /// Serializing test input or deserializing test output failed.
    #[error("test driver, topic '{topic}': {source}")]
    Serde {
        /// The topic.
        topic: String,
        /// The serde error.
        #[source]
        source: SerdeError,
    },
    /// Reading a store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A store was read with the wrong types.
    #[error(transparent)]
    StoreType(ProcessorError),
}
