//! The two Kafka clients a stream thread drives, seen through the few calls
//! the commit protocol makes.
//!
//! [`TxnProducer`] and [`GroupConsumer`] are implemented by rdkafka's
//! `BaseProducer` and `BaseConsumer`; the thread's unit tests implement them
//! with in-process fakes, so the order of the commit protocol, aborts,
//! retries and fencing are tested without a broker (`thread/tests.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::TopicPartitionList;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, ConsumerGroupMetadata,
};
use rdkafka::error::KafkaResult;
use rdkafka::producer::{Producer, PurgeConfig};

use crate::processor::RecordCollector;
use crate::runtime::collector::{KafkaCollector, ProducerEvents, ThreadProducer};

/// A producer that takes a stream thread's output and runs its transactions.
///
/// Its transactional calls are made from a helper thread (see
/// `thread::producer`), hence `Send + Sync + 'static`.
pub(crate) trait TxnProducer: Send + Sync + 'static {
    /// The consumer group metadata that fences offsets sent to a transaction.
    type Group: Send + Sync + 'static;
    /// What task output is sent through.
    type Collector<'a>: RecordCollector
    where
        Self: 'a;

    /// A collector for task output; `partitions` holds the partition count
    /// of every topic the tasks write.
    fn collector<'a>(&'a self, partitions: &'a BTreeMap<String, i32>) -> Self::Collector<'a>;
    /// Delivery-report bookkeeping: changelog offsets and the first error.
    fn events(&self) -> &ProducerEvents;
    /// The transactional id, under exactly-once.
    fn transactional_id(&self) -> Option<&str>;
    /// Registers the transactional id and fences older producers with it.
    fn init_transactions(&self, timeout: Duration) -> KafkaResult<()>;
    /// Begins a transaction (local to the client until a record is sent).
    fn begin_transaction(&self) -> KafkaResult<()>;
    /// Waits until every record sent is acknowledged and its report served.
    fn flush(&self, timeout: Duration) -> KafkaResult<()>;
    /// Adds consumed offsets to the open transaction.
    fn send_offsets_to_transaction(
        &self,
        offsets: &TopicPartitionList,
        group: &Self::Group,
        timeout: Duration,
    ) -> KafkaResult<()>;
    /// Commits the open transaction.
    fn commit_transaction(&self, timeout: Duration) -> KafkaResult<()>;
    /// Drops queued and in-flight records (before an abort) and serves
    /// their delivery reports.
    fn purge(&self);
    /// Aborts the open transaction.
    fn abort_transaction(&self, timeout: Duration) -> KafkaResult<()>;
}

/// The group consumer as the commit protocol and recovery use it.
pub(crate) trait GroupConsumer {
    /// See [`TxnProducer::Group`].
    type Group;

    /// The group metadata of the current generation; `None` outside a group.
    fn group_metadata(&self) -> Option<Self::Group>;
    /// Commits `offsets` to the group (at-least-once).
    fn commit_offsets(&self, offsets: &TopicPartitionList) -> KafkaResult<()>;
    /// The group's committed offsets (with metadata) of `partitions`.
    fn committed_offsets(
        &self,
        partitions: TopicPartitionList,
        timeout: Duration,
    ) -> KafkaResult<TopicPartitionList>;
    /// Moves the fetch positions of assigned partitions; fails when any
    /// partition could not be moved.
    fn seek_partitions(&self, offsets: TopicPartitionList, timeout: Duration) -> KafkaResult<()>;
}

impl TxnProducer for ThreadProducer {
    type Group = ConsumerGroupMetadata;
    type Collector<'a> = KafkaCollector<'a>;

    fn collector<'a>(&'a self, partitions: &'a BTreeMap<String, i32>) -> KafkaCollector<'a> {
        KafkaCollector {
            producer: self,
            partitions,
        }
    }

    fn events(&self) -> &ProducerEvents {
        &self.context().events
    }

    fn transactional_id(&self) -> Option<&str> {
        self.context().transactional_id.as_deref()
    }

    fn init_transactions(&self, timeout: Duration) -> KafkaResult<()> {
        Producer::init_transactions(self, timeout)
    }

    fn begin_transaction(&self) -> KafkaResult<()> {
        Producer::begin_transaction(self)
    }

    fn flush(&self, timeout: Duration) -> KafkaResult<()> {
        crate::runtime::collector::flush(self, timeout)
    }

    fn send_offsets_to_transaction(
        &self,
        offsets: &TopicPartitionList,
        group: &ConsumerGroupMetadata,
        timeout: Duration,
    ) -> KafkaResult<()> {
        Producer::send_offsets_to_transaction(self, offsets, group, timeout)
    }

    fn commit_transaction(&self, timeout: Duration) -> KafkaResult<()> {
        Producer::commit_transaction(self, timeout)
    }

    fn purge(&self) {
        // librdkafka waits for the delivery reports of purged records
        // before it aborts, and a BaseProducer only delivers them while
        // polled: purge, then serve them (with the commit's flush, which
        // returns once they are served; rdkafka's polls 100 ms at a time).
        Producer::purge(self, PurgeConfig::default().queue().inflight());
        let _ = crate::runtime::collector::flush(self, Duration::from_secs(5));
    }

    fn abort_transaction(&self, timeout: Duration) -> KafkaResult<()> {
        Producer::abort_transaction(self, timeout)
    }
}

impl<C: ConsumerContext> GroupConsumer for BaseConsumer<C> {
    type Group = ConsumerGroupMetadata;

    fn group_metadata(&self) -> Option<ConsumerGroupMetadata> {
        Consumer::group_metadata(self)
    }

    fn commit_offsets(&self, offsets: &TopicPartitionList) -> KafkaResult<()> {
        Consumer::commit(self, offsets, CommitMode::Sync)
    }

    fn committed_offsets(
        &self,
        partitions: TopicPartitionList,
        timeout: Duration,
    ) -> KafkaResult<TopicPartitionList> {
        Consumer::committed_offsets(self, partitions, timeout)
    }

    fn seek_partitions(&self, offsets: TopicPartitionList, timeout: Duration) -> KafkaResult<()> {
        // librdkafka reports a partition it could not seek in the list,
        // not in the result: the first such error is the call's.
        let result = Consumer::seek_partitions(self, offsets, timeout)?;
        result.elements().iter().try_for_each(|e| e.error())
    }
}
