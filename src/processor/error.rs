//! Errors of the processor API and of task execution.

use crate::serdes::SerdeError;
use crate::state::StoreError;

use super::collector::CollectorError;
use super::task::TaskId;

/// Whether a serde failed on the key or the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyOrValue {
    /// The record key.
    Key,
    /// The record value.
    Value,
}

impl std::fmt::Display for KeyOrValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KeyOrValue::Key => "key",
            KeyOrValue::Value => "value",
        })
    }
}

/// An error raised while a processor handles a record or a punctuation.
#[derive(Debug, thiserror::Error)]
pub enum ProcessorError {
    /// Serializing a key or value failed (at a sink or a store write).
    #[error("could not serialize the {what} for '{target}': {source}")]
    Serialize {
        /// Key or value.
        what: KeyOrValue,
        /// The topic or store written to.
        target: String,
        /// The serde error.
        #[source]
        source: SerdeError,
    },
    /// Deserializing a value read from a store failed.
    #[error(
        "could not deserialize the {what} read from store '{store}': {source}; was the store written with other serdes?"
    )]
    StoreRead {
        /// Key or value.
        what: KeyOrValue,
        /// The store.
        store: String,
        /// The serde error.
        #[source]
        source: SerdeError,
    },
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store exists but holds other types than asked for.
    #[error(
        "store '{store}' holds <{actual_key}, {actual_value}>, but was opened as <{asked_key}, {asked_value}>"
    )]
    StoreType {
        /// The store.
        store: String,
        /// Key type of the store.
        actual_key: &'static str,
        /// Value type of the store.
        actual_value: &'static str,
        /// Key type asked for.
        asked_key: &'static str,
        /// Value type asked for.
        asked_value: &'static str,
    },
    /// A store was opened as another kind than it is (for example a window
    /// store through `key_value_store`).
    #[error(
        "store '{store}' is a {actual} store, but was opened as a {asked} store; use the matching ProcessorContext accessor"
    )]
    StoreKind {
        /// The store.
        store: String,
        /// Its kind.
        actual: crate::state::StoreKind,
        /// The kind asked for.
        asked: crate::state::StoreKind,
    },
    /// A store handle was used while another handle of the same store was
    /// in the middle of an operation (re-entrant use).
    #[error(
        "store '{0}' is already in use further up the call stack; finish the store access before forwarding"
    )]
    StoreBusy(String),
    /// `forward_to` named a child that is not connected.
    #[error("processor '{node}' has no child named '{child}'; children are: {children:?}")]
    UnknownChild {
        /// The forwarding processor.
        node: String,
        /// The name asked for.
        child: String,
        /// The connected children.
        children: Vec<String>,
    },
    /// A child received a record of other types than it was built for. The
    /// DSL rules this out; it signals a bug in how a topology was assembled.
    #[error(
        "processor '{node}' received a record of unexpected types (expected {expected}); the topology was wired with mismatched types"
    )]
    TypeMismatch {
        /// The receiving processor.
        node: String,
        /// The expected record type.
        expected: &'static str,
    },
    /// A processor forwarded from `init`, before the processors downstream
    /// were initialized.
    #[error(
        "a processor forwarded a record from init(); forward from process() or a punctuator instead"
    )]
    ForwardDuringInit,
    /// The collector refused a record.
    #[error(transparent)]
    Collector(#[from] CollectorError),
    /// A user processor failed.
    #[error("{0}")]
    User(Box<dyn std::error::Error + Send + Sync>),
}

impl ProcessorError {
    /// Wraps an error raised by user code.
    pub fn user(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        ProcessorError::User(error.into())
    }

    /// A [`ProcessorError::Serialize`] of the `what` written to `target` (a
    /// topic or store), for `map_err`. Copies `target` only on failure, so
    /// it costs nothing per record.
    pub(crate) fn serialize(what: KeyOrValue, target: &str) -> impl FnOnce(SerdeError) -> Self {
        move |source| ProcessorError::Serialize {
            what,
            target: target.to_owned(),
            source,
        }
    }

    /// A [`ProcessorError::StoreRead`] of the `what` read from `store`, for
    /// `map_err`.
    pub(crate) fn store_read(what: KeyOrValue, store: &str) -> impl FnOnce(SerdeError) -> Self {
        move |source| ProcessorError::StoreRead {
            what,
            store: store.to_owned(),
            source,
        }
    }
}

/// An error that stops a task: the caller must not feed it more records
/// before handling it (the runtime aborts the transaction and closes or
/// re-creates the task; the driver returns it to the test).
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// A record could not be deserialized and the deserialization handler is
    /// `LogAndFail`.
    #[error(
        "task {task}: could not deserialize the {what} of the record at {topic}/{partition}@{offset}: {source}; fix the producer or configure the deserialization handler to continue or dead-letter"
    )]
    Deserialization {
        /// The task.
        task: TaskId,
        /// Input topic.
        topic: String,
        /// Input partition.
        partition: i32,
        /// Input offset.
        offset: i64,
        /// Key or value.
        what: KeyOrValue,
        /// The serde error.
        #[source]
        source: SerdeError,
    },
    /// The timestamp extractor returned a negative timestamp and the
    /// deserialization handler is `LogAndFail`.
    #[error(
        "task {task}: invalid (negative) timestamp {timestamp} for the record at {topic}/{partition}@{offset}; fix the producer or the timestamp extractor, or configure the deserialization handler to continue or dead-letter"
    )]
    InvalidTimestamp {
        /// The task.
        task: TaskId,
        /// Input topic.
        topic: String,
        /// Input partition.
        partition: i32,
        /// Input offset.
        offset: i64,
        /// The extracted timestamp.
        timestamp: i64,
    },
    /// Processing a record failed and the processing handler is `LogAndFail`.
    #[error(
        "task {task}: processing the record at {topic}/{partition}@{offset} failed in processor '{node}': {source}"
    )]
    Processing {
        /// The task.
        task: TaskId,
        /// Input topic.
        topic: String,
        /// Input partition.
        partition: i32,
        /// Input offset.
        offset: i64,
        /// The failing processor.
        node: String,
        /// The error.
        #[source]
        source: Box<ProcessorError>,
    },
    /// A punctuator failed and the processing handler is `LogAndFail`.
    #[error("task {task}: punctuator of processor '{node}' at time {timestamp} failed: {source}")]
    Punctuation {
        /// The task.
        task: TaskId,
        /// The processor that scheduled it.
        node: String,
        /// The punctuation time.
        timestamp: i64,
        /// The error.
        #[source]
        source: Box<ProcessorError>,
    },
    /// Forwarding the record cache's updates at commit failed.
    #[error("task {task}: flushing the record cache through processor '{node}' failed: {source}")]
    Flush {
        /// The task.
        task: TaskId,
        /// The processor that failed.
        node: String,
        /// The error.
        #[source]
        source: Box<ProcessorError>,
    },
    /// A processor's `init` failed.
    #[error("task {task}: initializing processor '{node}' failed: {source}")]
    Init {
        /// The task.
        task: TaskId,
        /// The processor.
        node: String,
        /// The error.
        #[source]
        source: Box<ProcessorError>,
    },
    /// A record arrived for a topic this task does not read.
    #[error("task {task} does not read topic '{topic}'; it reads {sources:?}")]
    UnknownTopic {
        /// The task.
        task: TaskId,
        /// The topic of the record.
        topic: String,
        /// The topics the task reads.
        sources: Vec<String>,
    },
    /// A state store failed outside record processing (open, commit, restore).
    #[error("task {task}: {source}")]
    Store {
        /// The task.
        task: TaskId,
        /// The store error.
        #[source]
        source: StoreError,
    },
    /// Sending a dead letter failed.
    #[error("task {task}: {source}")]
    Collector {
        /// The task.
        task: TaskId,
        /// The collector error.
        #[source]
        source: CollectorError,
    },
    /// The task was used in a state that does not allow the call.
    #[error(
        "task {task}: cannot {action} while {state:?}; see the task state machine in weir::processor::task"
    )]
    State {
        /// The task.
        task: TaskId,
        /// What was attempted.
        action: &'static str,
        /// The task's state.
        state: super::task::TaskState,
    },
    /// The subtopology does not exist in this topology.
    #[error("task {task}: the topology has no sub-topology {}", task.subtopology)]
    UnknownSubtopology {
        /// The task.
        task: TaskId,
    },
}
