//! Errors of the runtime, classified by what the application must do.
//!
//! Every error a stream thread meets has a [`Recovery`] class, the one
//! decision the thread acts on ([`StreamsError::recovery`]). The classes come
//! from librdkafka's three transaction error classes (retriable, requires
//! abort, fatal) and from Kafka Streams' two task cases (task migrated: the
//! thread no longer owns its tasks; task corrupted: a task's local state
//! cannot be trusted):
//!
//! | class | examples | what the stream thread does |
//! |---|---|---|
//! | [`Recovery::Retry`] | broker unreachable (`BrokerTransportFailure`, `AllBrokersDown`), a request or `commit_transaction` timed out, coordinator moving | the same call again after a backoff; nothing is aborted |
//! | [`Recovery::Retry`] | an assigned task another stream thread of this instance still has open ([`StreamsError::TaskStillOpen`]) | the thread closes its tasks and opens them all again after a backoff, until the other thread has closed it |
//! | [`Recovery::AbortAndRewind`] | a record not delivered, a transaction that requires abort, a store write that may succeed when retried | abort the transaction, drop the tasks' uncommitted store writes, rewind the consumer to the committed offsets, reopen the tasks |
//! | [`Recovery::TaskMigrated`] | producer fenced (the coordinator aborted a transaction that outlived `transaction.timeout.ms`), member or generation unknown | as abort-and-rewind, and a new producer replaces the fenced one |
//! | [`Recovery::TaskCorrupted`] | a store ahead of its changelog, corrupt store files | the task's local state is wiped and restored from the changelog |
//! | [`Recovery::Fatal`] | bad configuration, missing topics, authorization failures, a processing error with the handler set to fail | the thread stops; the application goes to `Error` |

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
    /// An internal topic (changelog, repartition) disappeared while the
    /// application ran.
    #[error(
        "internal topic '{topic}' was deleted while the application ran; the state it backs cannot be recovered from it: stop every instance, run `weir reset --application-id …` (or restore the topic), then start again"
    )]
    InternalTopicDeleted {
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
    /// The group assigned this thread a task that another stream thread of
    /// this instance still has open: that thread's group membership was
    /// dropped (it was stuck past `max.poll.interval.ms`, say) and it has
    /// not polled since, so it has not closed the task yet. Retried.
    #[error(
        "task {task} is still open on stream thread {thread} of this instance (its group membership was dropped and it has not closed the task yet); retrying"
    )]
    TaskStillOpen {
        /// The task.
        task: crate::processor::TaskId,
        /// The stream thread that has it open.
        thread: usize,
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

/// What the runtime does about an error; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// Transient: try the same call again after a backoff.
    Retry,
    /// The open transaction cannot commit: abort it and rewind the tasks to
    /// the last commit.
    AbortAndRewind,
    /// The thread no longer owns its tasks or its producer was fenced:
    /// abort, rewind and replace the producer.
    TaskMigrated,
    /// A task's local state cannot be trusted: wipe it and restore it from
    /// the changelog.
    TaskCorrupted,
    /// Nothing to recover: the thread stops with the error.
    Fatal,
}

impl StreamsError {
    /// The recovery class of this error: the first Kafka or store error in
    /// its source chain decides; errors of configuration, topology and
    /// processing handlers are fatal.
    pub fn recovery(&self) -> Recovery {
        match self {
            StreamsError::Fenced { .. } => Recovery::TaskMigrated,
            StreamsError::Timeout { .. } | StreamsError::TaskStillOpen { .. } => Recovery::Retry,
            StreamsError::Kafka { source, .. } => classify_kafka(source, Recovery::AbortAndRewind),
            StreamsError::Store(e) => classify_store(e),
            StreamsError::Task(e) => chain_recovery(e).unwrap_or(Recovery::Fatal),
            StreamsError::Config(_)
            | StreamsError::MissingSourceTopic { .. }
            | StreamsError::InternalTopicDeleted { .. }
            | StreamsError::NotCopartitioned { .. }
            | StreamsError::InternalTopicMismatch { .. }
            | StreamsError::Io { .. }
            | StreamsError::IllegalState { .. } => Recovery::Fatal,
        }
    }

    pub(crate) fn kafka(context: impl Into<String>, source: rdkafka::error::KafkaError) -> Self {
        StreamsError::Kafka {
            context: context.into(),
            source,
        }
    }
}

impl StreamsError {
    /// The librdkafka error code of the first Kafka error in this error or
    /// its source chain.
    pub(crate) fn kafka_code(&self) -> Option<rdkafka::types::RDKafkaErrorCode> {
        if let StreamsError::Kafka { source, .. } = self {
            return source.rdkafka_error_code();
        }
        let mut next = std::error::Error::source(self);
        while let Some(e) = next {
            if let Some(kafka) = e.downcast_ref::<rdkafka::error::KafkaError>() {
                return kafka.rdkafka_error_code();
            }
            next = e.source();
        }
        None
    }
}

/// The class of the first Kafka or store error in `error`'s source chain.
fn chain_recovery(error: &(dyn std::error::Error + 'static)) -> Option<Recovery> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(kafka) = e.downcast_ref::<rdkafka::error::KafkaError>() {
            return Some(classify_kafka(kafka, Recovery::AbortAndRewind));
        }
        if let Some(store) = e.downcast_ref::<StoreError>() {
            return Some(classify_store(store));
        }
        next = e.source();
    }
    None
}

/// A store error: one that may succeed when retried is redone from the last
/// commit; corrupt files are wiped and restored; anything else is fatal.
fn classify_store(error: &StoreError) -> Recovery {
    let corrupt = match error {
        StoreError::Corrupt { .. } => true,
        StoreError::RocksDb { source, .. } => source.kind() == rocksdb::ErrorKind::Corruption,
        _ => false,
    };
    if error.is_retriable() {
        Recovery::AbortAndRewind
    } else if error.is_fatal() && corrupt {
        Recovery::TaskCorrupted
    } else {
        Recovery::Fatal
    }
}

/// The class of a librdkafka error. Transaction errors carry librdkafka's
/// own classification; other errors are classified by code, and codes
/// without a class get `otherwise` (what the call site can afford:
/// [`Recovery::Retry`] for a consumer poll, abort-and-rewind elsewhere).
pub(crate) fn classify_kafka(error: &rdkafka::error::KafkaError, otherwise: Recovery) -> Recovery {
    use rdkafka::error::KafkaError;
    if let KafkaError::Transaction(rd) = error {
        return match rd.code() {
            code if is_migrated(code) => Recovery::TaskMigrated,
            _ if rd.is_fatal() => Recovery::Fatal,
            _ if rd.txn_requires_abort() => Recovery::AbortAndRewind,
            _ if rd.is_retriable() => Recovery::Retry,
            code => classify_code(code).unwrap_or(Recovery::AbortAndRewind),
        };
    }
    if let KafkaError::MessageConsumptionFatal(_) = error {
        return Recovery::Fatal;
    }
    error
        .rdkafka_error_code()
        .and_then(classify_code)
        .unwrap_or(otherwise)
}

fn is_migrated(code: rdkafka::types::RDKafkaErrorCode) -> bool {
    use rdkafka::types::RDKafkaErrorCode as C;
    matches!(
        code,
        C::Fenced
            | C::ProducerFenced
            | C::InvalidProducerEpoch
            | C::UnknownMemberId
            | C::IllegalGeneration
            | C::RebalanceInProgress
            | C::FencedInstanceId
            | C::FencedMemberEpoch
    )
}

fn classify_code(code: rdkafka::types::RDKafkaErrorCode) -> Option<Recovery> {
    use rdkafka::types::RDKafkaErrorCode as C;
    if is_migrated(code) {
        return Some(Recovery::TaskMigrated);
    }
    Some(match code {
        C::BrokerTransportFailure
        | C::AllBrokersDown
        | C::Resolve
        | C::OperationTimedOut
        | C::TimedOutQueue
        | C::RequestTimedOut
        | C::NetworkException
        | C::WaitingForCoordinator
        | C::CoordinatorLoadInProgress
        | C::CoordinatorNotAvailable
        | C::NotCoordinator
        | C::LeaderNotAvailable
        | C::NotLeaderForPartition
        | C::NotEnoughReplicas
        | C::NotEnoughReplicasAfterAppend
        | C::ConcurrentTransactions
        | C::QueueFull
        | C::Retry => Recovery::Retry,
        C::MessageTimedOut
        | C::OutOfOrderSequenceNumber
        | C::UnknownProducerId
        | C::InvalidProducerIdMapping
        | C::State
        | C::PurgeQueue
        | C::PurgeInflight => Recovery::AbortAndRewind,
        C::Fatal
        | C::Authentication
        | C::SaslAuthenticationFailed
        | C::TopicAuthorizationFailed
        | C::GroupAuthorizationFailed
        | C::ClusterAuthorizationFailed
        | C::TransactionalIdAuthorizationFailed
        | C::MessageSizeTooLarge
        | C::InvalidConfig
        | C::UnsupportedVersion
        | C::UnsupportedFeature
        | C::TransactionCoordinatorFenced => Recovery::Fatal,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode as C;

    use super::*;

    fn kafka(source: KafkaError) -> StreamsError {
        StreamsError::kafka("testing", source)
    }

    #[test]
    fn a_broker_restart_seen_by_poll_is_retried() {
        let e = KafkaError::MessageConsumption(C::BrokerTransportFailure);
        assert_eq!(classify_kafka(&e, Recovery::Retry), Recovery::Retry);
        assert_eq!(kafka(e).recovery(), Recovery::Retry);
        let e = KafkaError::MessageConsumption(C::AllBrokersDown);
        assert_eq!(kafka(e).recovery(), Recovery::Retry);
    }

    #[test]
    fn an_unknown_poll_error_is_retried_but_elsewhere_aborts() {
        let e = KafkaError::MessageConsumption(C::OffsetOutOfRange);
        assert_eq!(classify_kafka(&e, Recovery::Retry), Recovery::Retry);
        assert_eq!(kafka(e).recovery(), Recovery::AbortAndRewind);
    }

    #[test]
    fn fencing_and_lost_membership_are_task_migrated() {
        let fenced = StreamsError::Fenced {
            transactional_id: "app-1-0".into(),
        };
        assert_eq!(fenced.recovery(), Recovery::TaskMigrated);
        let e = KafkaError::ConsumerCommit(C::IllegalGeneration);
        assert_eq!(kafka(e).recovery(), Recovery::TaskMigrated);
        let e = KafkaError::ConsumerCommit(C::UnknownMemberId);
        assert_eq!(kafka(e).recovery(), Recovery::TaskMigrated);
    }

    #[test]
    fn undelivered_records_abort_and_authorization_is_fatal() {
        let e = KafkaError::MessageProduction(C::MessageTimedOut);
        assert_eq!(kafka(e).recovery(), Recovery::AbortAndRewind);
        let e = KafkaError::MessageProduction(C::TopicAuthorizationFailed);
        assert_eq!(kafka(e).recovery(), Recovery::Fatal);
        let e = KafkaError::MessageConsumptionFatal(C::Fatal);
        assert_eq!(kafka(e).recovery(), Recovery::Fatal);
    }

    #[test]
    fn timeouts_are_retried() {
        let e = StreamsError::Timeout {
            context: "restoring".into(),
            after: std::time::Duration::from_secs(1),
        };
        assert_eq!(e.recovery(), Recovery::Retry);
        let e = KafkaError::Flush(C::OperationTimedOut);
        assert_eq!(kafka(e).recovery(), Recovery::Retry);
    }

    #[test]
    fn store_errors_use_their_own_classes() {
        let corrupt = StoreError::Corrupt {
            store: "counts".into(),
            message: "ahead of its changelog".into(),
        };
        assert_eq!(
            StreamsError::Store(corrupt).recovery(),
            Recovery::TaskCorrupted
        );
        let locked = StoreError::Locked {
            path: "/tmp/x".into(),
        };
        assert_eq!(StreamsError::Store(locked).recovery(), Recovery::Fatal);
        let interrupted = StoreError::Io {
            path: "/tmp/x".into(),
            source: std::io::Error::from(std::io::ErrorKind::Interrupted),
        };
        assert_eq!(
            StreamsError::Store(interrupted).recovery(),
            Recovery::AbortAndRewind
        );
    }

    #[test]
    fn a_send_error_inside_a_task_error_is_classified_by_its_kafka_error() {
        use crate::processor::{CollectorError, ProcessorError, TaskError, TaskId};
        let send = CollectorError {
            topic: "out".into(),
            source: Box::new(KafkaError::MessageProduction(C::State)),
        };
        let task = TaskError::Processing {
            task: TaskId {
                subtopology: 0,
                partition: 1,
            },
            topic: "in".into(),
            partition: 1,
            offset: 7,
            node: "sink".into(),
            source: Box::new(ProcessorError::Collector(send)),
        };
        assert_eq!(
            StreamsError::Task(task).recovery(),
            Recovery::AbortAndRewind
        );
    }
}
