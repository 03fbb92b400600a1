//! The commit protocol without a broker: the task manager and the streams
//! producer driven through in-process fakes of the two clients, with real
//! tasks (word count over in-memory stores).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::TopicPartitionList;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::types::RDKafkaErrorCode as Code;

use super::client::{GroupConsumer, TxnProducer};
use super::commit::{CommitScope, commit, revoke};
use super::producer::{ProducerTimeouts, StreamsProducer, TxnState};
use super::tasks::{TaskCreator, TaskManager};
use crate::processor::{
    CollectorError, Headers, InputRecord, OutputKind, OutputRecord, RecordCollector, TaskConfig,
    TaskId, TaskInstance,
};
use crate::runtime::changelog::tests::{TASK, memory_task, word_count};
use crate::runtime::collector::ProducerEvents;
use crate::runtime::restore::{RestoreBudget, RestoreFailure};
use crate::runtime::topics::{TopicLayout, plan};
use crate::runtime::{Recovery, StreamsError};
use crate::topology::Topology;

const REPARTITION: &str = "app-counts-repartition";

/// Every call the fakes see, in order.
type Log = Arc<Mutex<Vec<String>>>;

fn note(log: &Log, line: impl Into<String>) {
    log.lock().unwrap().push(line.into());
}

/// A producer whose calls are logged and whose errors are scripted.
struct FakeProducer {
    log: Log,
    /// call name → errors its next calls return, in order.
    errors: Arc<Mutex<HashMap<&'static str, VecDeque<KafkaError>>>>,
    /// Calls that block (as librdkafka's sometimes did) until the test ends.
    hangs: Arc<Mutex<Vec<&'static str>>>,
    events: ProducerEvents,
    next_offset: Mutex<i64>,
}

impl FakeProducer {
    fn call(&self, name: &'static str) -> KafkaResult<()> {
        note(&self.log, name);
        if self.hangs.lock().unwrap().contains(&name) {
            std::thread::sleep(Duration::from_secs(30));
        }
        match self
            .errors
            .lock()
            .unwrap()
            .get_mut(name)
            .and_then(VecDeque::pop_front)
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

struct FakeCollector<'a>(&'a FakeProducer);

impl RecordCollector for FakeCollector<'_> {
    fn send(&mut self, record: OutputRecord<'_>) -> Result<(), CollectorError> {
        let p = self.0;
        note(&p.log, format!("send {}", record.topic));
        if record.kind == OutputKind::Changelog {
            let mut offset = p.next_offset.lock().unwrap();
            p.events
                .changelog_delivered(record.topic, record.partition.unwrap_or(0), *offset);
            *offset += 1;
        }
        Ok(())
    }
}

impl TxnProducer for FakeProducer {
    type Group = u64;
    type Collector<'a> = FakeCollector<'a>;

    fn collector<'a>(&'a self, _: &'a BTreeMap<String, i32>) -> FakeCollector<'a> {
        FakeCollector(self)
    }
    fn events(&self) -> &ProducerEvents {
        &self.events
    }
    fn transactional_id(&self) -> Option<&str> {
        Some("app-p-0")
    }
    fn init_transactions(&self, _: Duration) -> KafkaResult<()> {
        self.call("init")
    }
    fn begin_transaction(&self) -> KafkaResult<()> {
        self.call("begin")
    }
    fn flush(&self, _: Duration) -> KafkaResult<()> {
        self.call("flush")
    }
    fn send_offsets_to_transaction(
        &self,
        offsets: &TopicPartitionList,
        group: &u64,
        _: Duration,
    ) -> KafkaResult<()> {
        let element = &offsets.elements()[0];
        note(
            &self.log,
            format!(
                "offsets {}@{:?} gen {group}",
                element.partition(),
                element.offset()
            ),
        );
        self.call("send_offsets")
    }
    fn commit_transaction(&self, _: Duration) -> KafkaResult<()> {
        self.call("commit")
    }
    fn purge(&self) {
        note(&self.log, "purge");
    }
    fn abort_transaction(&self, _: Duration) -> KafkaResult<()> {
        self.call("abort")
    }
}

struct FakeConsumer {
    log: Log,
}

impl GroupConsumer for FakeConsumer {
    type Group = u64;
    fn group_metadata(&self) -> Option<u64> {
        Some(7)
    }
    fn commit_offsets(&self, _: &TopicPartitionList) -> KafkaResult<()> {
        note(&self.log, "consumer commit");
        Ok(())
    }
    fn committed_offsets(
        &self,
        p: TopicPartitionList,
        _: Duration,
    ) -> KafkaResult<TopicPartitionList> {
        Ok(p)
    }
    fn seek_partitions(&self, _: TopicPartitionList, _: Duration) -> KafkaResult<()> {
        Ok(())
    }
}

/// Opens word-count tasks over fresh in-memory stores.
struct MemoryCreator {
    topology: Arc<Topology>,
}

impl TaskCreator for MemoryCreator {
    fn create(&mut self, id: TaskId) -> Result<TaskInstance, StreamsError> {
        Ok(memory_task(
            self.topology.clone(),
            id,
            TaskConfig::new("app"),
        ))
    }
    fn restore(
        &mut self,
        tasks: &mut [&mut TaskInstance],
        _: &mut RestoreBudget,
    ) -> Result<Vec<TaskId>, RestoreFailure> {
        Ok(tasks.iter().map(|t| t.id()).collect())
    }
    fn closing(&mut self, _: &mut TaskInstance) {}
    fn wipe(&mut self, _: TaskId) -> Result<(), StreamsError> {
        Ok(())
    }
    fn released(&mut self, _: TaskId) {}
}

/// A task manager with one open word-count task, a transactional streams
/// producer and a consumer, all logging into one log.
struct Rig {
    log: Log,
    errors: Arc<Mutex<HashMap<&'static str, VecDeque<KafkaError>>>>,
    hangs: Arc<Mutex<Vec<&'static str>>>,
    tasks: TaskManager,
    producer: StreamsProducer<FakeProducer>,
    consumer: FakeConsumer,
    layout: TopicLayout,
    creator: MemoryCreator,
    producers_made: Arc<Mutex<u32>>,
}

impl Rig {
    fn new(exactly_once: bool, retry_for: Duration) -> Rig {
        let log: Log = Arc::default();
        let errors: Arc<Mutex<HashMap<_, VecDeque<_>>>> = Arc::default();
        let hangs: Arc<Mutex<Vec<_>>> = Arc::default();
        let producers_made = Arc::new(Mutex::new(0));
        let factory = {
            let (log, errors, made) = (log.clone(), errors.clone(), producers_made.clone());
            let hangs = hangs.clone();
            Box::new(move || {
                *made.lock().unwrap() += 1;
                Ok(FakeProducer {
                    log: log.clone(),
                    errors: errors.clone(),
                    hangs: hangs.clone(),
                    events: ProducerEvents::default(),
                    next_offset: Mutex::new(0),
                })
            })
        };
        let timeouts = ProducerTimeouts {
            call: Duration::from_secs(1),
            send_offsets: Duration::from_millis(300),
            retry_for,
            abandon_grace: Duration::from_millis(200),
            abandon_on_shutdown: Duration::from_millis(500),
        };
        let producer =
            StreamsProducer::new(factory, exactly_once, timeouts, Arc::default()).unwrap();
        let topology = Arc::new(word_count());
        let existing = HashMap::from([("lines".to_string(), 1)]);
        let layout = plan(&topology, "app", &existing).unwrap();
        let mut rig = Rig {
            log: log.clone(),
            errors,
            hangs,
            tasks: TaskManager::default(),
            producer,
            consumer: FakeConsumer { log },
            layout,
            creator: MemoryCreator { topology },
            producers_made,
        };
        rig.open();
        rig
    }

    fn open(&mut self) {
        self.producer.begin_if_needed().unwrap();
        let mut collector = self.producer.collector(&self.layout.partitions);
        self.tasks
            .open(&[TASK], &HashMap::new(), &mut self.creator)
            .unwrap();
        assert_eq!(self.tasks.restoring(), 1, "a created task restores first");
        let mut budget = RestoreBudget::new(Duration::from_secs(1), 1);
        let started = self
            .tasks
            .restore(&mut self.creator, &mut budget, 0, &mut collector)
            .unwrap();
        assert_eq!(
            (started, self.tasks.restoring()),
            (1, 0),
            "restored and running"
        );
    }

    fn fail_next(&self, call: &'static str, error: KafkaError) {
        self.errors
            .lock()
            .unwrap()
            .entry(call)
            .or_default()
            .push_back(error);
    }

    /// Processes word `word` at input offset `offset`.
    fn process(&mut self, word: &str, offset: i64) {
        self.producer.begin_if_needed().unwrap();
        let input = InputRecord {
            topic: REPARTITION,
            partition: 0,
            offset,
            timestamp: 1_000 + offset,
            headers: &Headers::new(),
            key: Some(word.as_bytes()),
            value: Some(word.as_bytes()),
        };
        let mut collector = self.producer.collector(&self.layout.partitions);
        assert!(self.tasks.process(TASK, &input, &mut collector).unwrap());
    }

    fn commit(&mut self) -> Result<(), StreamsError> {
        let scope = CommitScope {
            partitions: &self.layout.partitions,
            layout: &self.layout,
        };
        commit(&mut self.tasks, &mut self.producer, &self.consumer, &scope).map(|_| ())
    }

    fn revoke(&mut self, lost: bool) -> Result<(), StreamsError> {
        let scope = CommitScope {
            partitions: &self.layout.partitions,
            layout: &self.layout,
        };
        revoke(
            &mut self.tasks,
            &mut self.producer,
            &self.consumer,
            &scope,
            lost,
            &mut self.creator,
        )
    }

    fn count(&self, word: &str) -> Option<i64> {
        let task = self.tasks.task(TASK).unwrap();
        task.read_store("counts", |store| store.get(word.as_bytes()))
            .unwrap()
            .unwrap()
            .map(|v| i64::from_be_bytes(v.try_into().unwrap()))
    }

    fn committed_offset(&self) -> Option<i64> {
        self.tasks
            .task(TASK)
            .unwrap()
            .store_committed_offset("counts")
    }

    fn take_log(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

#[test]
fn exactly_once_commits_in_protocol_order_and_stores_last() {
    let mut rig = Rig::new(true, Duration::from_secs(1));
    rig.process("a", 0);
    rig.process("a", 1);
    rig.take_log();
    rig.commit().unwrap();
    assert_eq!(
        rig.take_log(),
        [
            "flush",
            "offsets 0@Offset(2) gen 7",
            "send_offsets",
            "commit"
        ],
        "flush the producer, send offsets with the group metadata, commit"
    );
    // The store commits after the transaction, with the last changelog offset.
    assert_eq!(rig.committed_offset(), Some(1));
    assert_eq!(rig.producer.state(), TxnState::Ready);
}

#[test]
fn a_failed_transaction_commit_leaves_the_store_uncommitted() {
    let mut rig = Rig::new(true, Duration::from_secs(1));
    rig.process("a", 0);
    rig.fail_next(
        "commit",
        KafkaError::MessageProduction(Code::InvalidProducerEpoch),
    );
    let error = rig.commit().unwrap_err();
    assert_eq!(error.recovery(), Recovery::TaskMigrated);
    assert_eq!(
        rig.committed_offset(),
        None,
        "the store must not claim an uncommitted offset"
    );
    assert_eq!(rig.producer.state(), TxnState::Defunct);
}

#[test]
fn abort_drops_the_open_store_writes() {
    let mut rig = Rig::new(true, Duration::from_secs(1));
    rig.process("a", 0);
    rig.commit().unwrap();
    rig.process("a", 1);
    rig.process("b", 2);
    assert_eq!(rig.count("a"), Some(2));
    rig.producer.abort().unwrap();
    rig.tasks.abort_all();
    assert_eq!(rig.count("a"), Some(1), "back to the committed count");
    assert_eq!(rig.count("b"), None);
    assert!(!rig.tasks.commit_needed());
    assert!(
        rig.take_log()
            .ends_with(&["purge".to_string(), "abort".to_string()])
    );
}

#[test]
fn a_retriable_commit_timeout_is_retried_not_aborted() {
    let mut rig = Rig::new(true, Duration::from_secs(5));
    rig.process("a", 0);
    rig.fail_next(
        "commit",
        KafkaError::MessageProduction(Code::OperationTimedOut),
    );
    rig.fail_next(
        "commit",
        KafkaError::MessageProduction(Code::OperationTimedOut),
    );
    rig.take_log();
    rig.commit().unwrap();
    let log = rig.take_log();
    assert_eq!(log.iter().filter(|l| *l == "commit").count(), 3);
    assert!(!log.iter().any(|l| l == "abort"));
    assert_eq!(rig.committed_offset(), Some(0));
}

#[test]
fn a_retriable_error_that_outlasts_the_retry_time_fails_the_commit() {
    let mut rig = Rig::new(true, Duration::from_millis(120));
    rig.process("a", 0);
    for _ in 0..100 {
        rig.fail_next(
            "send_offsets",
            KafkaError::MessageProduction(Code::RequestTimedOut),
        );
    }
    let error = rig.commit().unwrap_err();
    assert!(matches!(error, StreamsError::Timeout { .. }), "{error}");
    assert_eq!(rig.committed_offset(), None);
    assert!(!rig.take_log().contains(&"commit".to_string()));
}

#[test]
fn a_fenced_producer_is_replaced_before_it_is_used_again() {
    let mut rig = Rig::new(true, Duration::from_secs(1));
    rig.process("a", 0);
    rig.fail_next(
        "send_offsets",
        KafkaError::MessageProduction(Code::ProducerFenced),
    );
    let error = rig.commit().unwrap_err();
    assert!(matches!(error, StreamsError::Fenced { .. }), "{error}");
    assert!(
        rig.producer.begin_if_needed().is_err(),
        "a defunct producer is not used"
    );
    assert_replaced_and_fenced(&mut rig);
}

/// After the thread aborted: the defunct producer is replaced by a second
/// one, whose `init_transactions` fences the first.
fn assert_replaced_and_fenced(rig: &mut Rig) {
    rig.producer.abort().unwrap();
    rig.tasks.abort_all();
    rig.producer.reset().unwrap();
    assert_eq!(*rig.producers_made.lock().unwrap(), 2);
    assert_eq!(rig.producer.state(), TxnState::Ready);
    assert!(
        rig.take_log().ends_with(&["init".to_string()]),
        "the new producer fences the old id"
    );
}

#[test]
fn a_call_that_never_returns_is_abandoned_and_the_producer_replaced() {
    let mut rig = Rig::new(true, Duration::from_secs(1));
    rig.process("a", 0);
    rig.hangs.lock().unwrap().push("send_offsets");
    let started = std::time::Instant::now();
    let error = rig.commit().unwrap_err();
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(5),
        "the thread waited {waited:?}, not send_offsets' timeout plus the grace (500 ms)"
    );
    assert!(matches!(error, StreamsError::Timeout { .. }), "{error}");
    assert_eq!(error.recovery(), Recovery::Retry);
    assert_eq!(rig.producer.state(), TxnState::Defunct);
    assert!(
        rig.producer.begin_if_needed().is_err(),
        "an abandoned producer is not used"
    );
    rig.hangs.lock().unwrap().clear();
    assert_replaced_and_fenced(&mut rig);
    assert_eq!(rig.committed_offset(), None, "nothing was committed");
}

#[test]
fn a_delivery_failure_fails_the_commit_before_offsets_are_sent() {
    let mut rig = Rig::new(true, Duration::from_secs(1));
    rig.process("a", 0);
    rig.producer
        .client()
        .events()
        .delivery_failed(KafkaError::MessageProduction(Code::MessageTimedOut));
    rig.take_log();
    let error = rig.commit().unwrap_err();
    assert_eq!(error.recovery(), Recovery::AbortAndRewind);
    assert_eq!(rig.take_log(), ["flush"]);
    assert_eq!(rig.committed_offset(), None);
}

#[test]
fn an_abort_that_cannot_reach_the_broker_stays_pending_and_is_retried() {
    let mut rig = Rig::new(true, Duration::from_secs(1));
    rig.process("a", 0);
    rig.fail_next("abort", KafkaError::MessageProduction(Code::AllBrokersDown));
    assert!(rig.producer.abort().is_err());
    assert_eq!(rig.producer.state(), TxnState::AbortPending);
    assert!(
        rig.producer.begin_if_needed().is_err(),
        "nothing begins while an abort is pending"
    );
    rig.producer.abort().unwrap();
    assert_eq!(rig.producer.state(), TxnState::Ready);
}

#[test]
fn at_least_once_commits_stores_before_offsets_without_transactions() {
    let mut rig = Rig::new(false, Duration::from_secs(1));
    rig.process("a", 0);
    rig.take_log();
    rig.commit().unwrap();
    assert_eq!(rig.take_log(), ["flush", "consumer commit"]);
    assert_eq!(rig.committed_offset(), Some(0));
    assert_eq!(rig.producer.state(), TxnState::NonTransactional);
}

#[test]
fn nothing_to_commit_makes_no_calls() {
    let mut rig = Rig::new(true, Duration::from_secs(1));
    rig.take_log();
    rig.commit().unwrap();
    assert!(rig.take_log().is_empty());
}

#[test]
fn a_lost_assignment_aborts_instead_of_committing() {
    let mut rig = Rig::new(true, Duration::from_secs(1));
    rig.process("a", 0);
    rig.take_log();
    rig.revoke(true).unwrap();
    let log = rig.take_log();
    assert!(
        !log.iter().any(|l| l == "commit" || l == "send_offsets"),
        "{log:?}"
    );
    assert!(
        log.ends_with(&["purge".to_string(), "abort".to_string()]),
        "{log:?}"
    );
    assert_eq!(rig.tasks.len(), 0, "revoked tasks are closed");
}

#[test]
fn a_revoke_commits_then_closes() {
    let mut rig = Rig::new(true, Duration::from_secs(1));
    rig.process("a", 0);
    rig.take_log();
    rig.revoke(false).unwrap();
    assert_eq!(
        rig.take_log(),
        [
            "flush",
            "offsets 0@Offset(1) gen 7",
            "send_offsets",
            "commit"
        ]
    );
    assert_eq!(rig.tasks.len(), 0);
}

/// Refuses every record, as a producer in an abortable state does.
struct RefusingCollector;

impl RecordCollector for RefusingCollector {
    fn send(&mut self, record: OutputRecord<'_>) -> Result<(), CollectorError> {
        Err(CollectorError {
            topic: record.topic.to_string(),
            source: Box::new(KafkaError::MessageProduction(Code::State)),
        })
    }
}

#[test]
fn a_send_error_is_not_skipped_by_the_processing_handler_and_aborts() {
    let mut config = TaskConfig::new("app");
    config.processing_handler = crate::handler::ErrorHandling::LogAndContinue;
    let mut task = memory_task(Arc::new(word_count()), TASK, config);
    task.initialize(0, &mut RefusingCollector).unwrap();
    let input = InputRecord {
        topic: REPARTITION,
        partition: 0,
        offset: 3,
        timestamp: 10,
        headers: &Headers::new(),
        key: Some(b"a"),
        value: Some(b"a"),
    };
    let error = task.process(&input, &mut RefusingCollector).unwrap_err();
    assert_eq!(
        task.metrics().skipped_processing,
        0,
        "the record must not be skipped"
    );
    assert_eq!(
        StreamsError::from(error).recovery(),
        Recovery::AbortAndRewind
    );
}
