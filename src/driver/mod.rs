//! [`TopologyTestDriver`]: runs a topology in-process, without Kafka, for tests.
//!
//! The driver builds one [`TaskInstance`] per sub-topology (partition 0) with
//! in-memory stores and drives them through exactly the calls the runtime
//! makes: `process` per input record, `punctuate_wall_clock` when the test
//! advances the mock clock, `commit` after every input. So the semantics under
//! test are the runtime's, not a re-implementation.
//!
//! # Topics
//!
//! Every record the tasks emit — sink output, repartition records, changelog
//! records, dead letters — is appended to an in-memory topic log with
//! increasing offsets. A record written to a topic some task reads (a
//! repartition topic, or a user topic that is also a source) is fed back to
//! that task after the current record finished, in the order written (as Kafka
//! Streams' `TopologyTestDriver` does). Tests read output topics typed
//! ([`TestOutputTopic`]) or raw ([`TopologyTestDriver::read_raw`]); reads
//! consume, [`TopologyTestDriver::all_raw`] shows everything.
//!
//! # Global tables
//!
//! Each [`crate::topology::GlobalKTable`] gets an in-memory store before the
//! tasks are built; a record piped into its topic is applied to that store at
//! once (it reaches no task), so every later record of every task sees it.
//!
//! ```
//! use weir::driver::{DriverConfig, TestInputTopic, TestOutputTopic, TopologyTestDriver};
//! use weir::serdes::StringSerde;
//! use weir::topology::{Consumed, Produced, StreamsBuilder};
//!
//! let builder = StreamsBuilder::new();
//! builder
//!     .stream::<String, String>("in", Consumed::new())
//!     .map_values(|v: String| v.to_uppercase())
//!     .to("out", Produced::new());
//! let mut driver = TopologyTestDriver::new(builder.build().unwrap(), DriverConfig::new("app")).unwrap();
//! let input = TestInputTopic::new("in", StringSerde, StringSerde);
//! let output = TestOutputTopic::new("out", StringSerde, StringSerde);
//! driver.pipe(&input, "k".to_string(), "hello".to_string(), 10).unwrap();
//! assert_eq!(driver.read_key_values(&output).unwrap(), vec![("k".to_string(), "HELLO".to_string())]);
//! ```

mod config;
mod log;
mod stores;
mod topics;

pub use config::{DriverConfig, DriverError};
pub use topics::{ProducedRecord, TestInputTopic, TestOutputTopic, TestRecord};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::processor::{
    Headers, InputRecord, StoreSpec, TaskConfig, TaskId, TaskInstance, TaskMetrics,
};
use crate::state::{KeyValueStore, StoreError};
use crate::topology::Topology;

use log::Topics;

/// Runs a topology in memory; see the module docs.
pub struct TopologyTestDriver {
    topology: Arc<Topology>,
    task_config: TaskConfig,
    tasks: Vec<TaskInstance>,
    topics: Topics,
    input_offsets: HashMap<String, i64>,
    wall_clock_ms: i64,
}

impl TopologyTestDriver {
    /// Builds and initializes the tasks of `topology` with in-memory stores.
    pub fn new(topology: Topology, config: DriverConfig) -> Result<Self, DriverError> {
        let mut provider = in_memory_provider;
        Self::with_store_provider(topology, config, &mut provider)
    }

    /// Like [`TopologyTestDriver::new`] with stores from `provider`.
    pub fn with_store_provider(
        topology: Topology,
        config: DriverConfig,
        provider: &mut dyn crate::processor::StoreProvider,
    ) -> Result<Self, DriverError> {
        let topology = Arc::new(topology);
        let globals = crate::topology::GlobalStores::open(&topology.global_topics(), |name| {
            Ok(Box::new(crate::state::memory::InMemoryKeyValueStore::new(
                name,
            )))
        })?;
        let task_config = TaskConfig {
            application_id: config.application_id.clone(),
            deserialization_handler: config.deserialization_handler.clone(),
            processing_handler: config.processing_handler.clone(),
            globals,
            cache: Arc::new(crate::state::CacheBudget::new(config.cache_max_bytes)),
            // Shedding follows the wall clock, which the driver fakes.
            shedding: None,
            shed_memo: Default::default(),
        };
        let mut topics = Topics {
            partition_counts: config.partition_counts.clone(),
            ..Topics::default()
        };
        let mut tasks = Vec::new();
        for sub in 0..topology.subtopology_count() {
            let id = TaskId {
                subtopology: sub,
                partition: 0,
            };
            let mut task = TaskInstance::new(topology.clone(), id, task_config.clone(), provider)?;
            for topic in task.source_topics() {
                topics.sources.insert(topic.to_owned(), sub as usize);
            }
            task.initialize(config.initial_wall_clock_ms, &mut topics)?;
            tasks.push(task);
        }
        let mut driver = TopologyTestDriver {
            topology,
            task_config,
            tasks,
            topics,
            input_offsets: HashMap::new(),
            wall_clock_ms: config.initial_wall_clock_ms,
        };
        driver.drain_feedback()?;
        driver.commit()?;
        Ok(driver)
    }

    /// Pipes one record (raw bytes) into `topic` and processes it, including
    /// everything it causes downstream through repartition topics.
    pub fn pipe_raw(
        &mut self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp: i64,
        headers: &Headers,
    ) -> Result<(), DriverError> {
        if let Some(global) = self.task_config.globals.by_topic(topic) {
            if let Some(key) = key {
                global.apply(key, value)?;
                global.flush()?;
            }
            return Ok(());
        }
        let task = *self
            .topics
            .sources
            .get(topic)
            .ok_or_else(|| DriverError::UnknownTopic(topic.to_owned()))?;
        let offset = self.input_offsets.entry(topic.to_owned()).or_insert(0);
        let input = InputRecord {
            topic,
            partition: 0,
            offset: *offset,
            timestamp,
            headers,
            key,
            value,
        };
        *offset += 1;
        let result = self.tasks[task].process(&input, &mut self.topics);
        let result = result
            .map_err(DriverError::from)
            .and_then(|()| self.drain_feedback());
        match result {
            Ok(()) => self.commit(),
            Err(e) => {
                self.abort();
                Err(e)
            }
        }
    }

    /// Pipes a typed record into the input topic.
    pub fn pipe<K: 'static, V: 'static>(
        &mut self,
        topic: &TestInputTopic<K, V>,
        key: K,
        value: V,
        timestamp: i64,
    ) -> Result<(), DriverError> {
        let (k, v) = topic.encode(&key, &value)?;
        self.pipe_raw(
            topic.name(),
            k.as_deref(),
            v.as_deref(),
            timestamp,
            &Headers::new(),
        )
    }

    /// Feeds records written to topics that tasks read back into those tasks.
    fn drain_feedback(&mut self) -> Result<(), DriverError> {
        while let Some((topic, index)) = self.topics.feedback.pop_front() {
            let record = self.topics.logs[&topic].records[index].clone();
            let task = self.topics.sources[&topic];
            let input = InputRecord {
                topic: &topic,
                partition: 0,
                offset: record.offset,
                timestamp: record.timestamp,
                headers: &record.headers,
                key: record.key.as_deref(),
                value: record.value.as_deref(),
            };
            self.tasks[task].process(&input, &mut self.topics)?;
        }
        Ok(())
    }

    fn commit(&mut self) -> Result<(), DriverError> {
        for task in &mut self.tasks {
            task.flush(&mut self.topics)?;
        }
        let topics = &self.topics;
        for task in &mut self.tasks {
            task.commit(|t| topics.last_offset(t))?;
        }
        Ok(())
    }

    fn abort(&mut self) {
        self.topics.feedback.clear();
        for task in &mut self.tasks {
            task.abort();
        }
    }

    /// Closes every task and builds it again from scratch, as after a crash
    /// or a rebalance: fresh in-memory stores restored from their changelog
    /// topics as the driver recorded them, then `initialize`. Only committed
    /// state survives (the driver commits after every input), so this shows
    /// what a task keeps across a restart. Stream time continues from the
    /// last commit, as in the runtime (which keeps it in the committed
    /// offsets' metadata, [`crate::runtime::stream_time`]).
    pub fn restart_tasks(&mut self) -> Result<(), DriverError> {
        let mut provider = in_memory_provider;
        for index in 0..self.tasks.len() {
            self.tasks[index].close()?;
            let id = self.tasks[index].id();
            let committed_stream_time = self.tasks[index].stream_time();
            let mut task = TaskInstance::new(
                self.topology.clone(),
                id,
                self.task_config.clone(),
                &mut provider,
            )?;
            crate::runtime::changelog::restore_in_memory(&mut task, |topic| self.all_raw(topic))?;
            task.restore_stream_time(committed_stream_time)?;
            task.initialize(self.wall_clock_ms, &mut self.topics)?;
            self.tasks[index] = task;
        }
        self.drain_feedback()?;
        self.commit()
    }

    /// Advances the mock wall clock by `by` and fires due wall-clock punctuators.
    pub fn advance_wall_clock_time(&mut self, by: Duration) -> Result<(), DriverError> {
        self.wall_clock_ms += i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        let mut result = Ok(());
        for task in &mut self.tasks {
            if let Err(e) = task.punctuate_wall_clock(self.wall_clock_ms, &mut self.topics) {
                result = Err(e.into());
                break;
            }
        }
        match result.and_then(|()| self.drain_feedback()) {
            Ok(()) => self.commit(),
            Err(e) => {
                self.abort();
                Err(e)
            }
        }
    }

    /// The mock wall clock (ms).
    pub fn wall_clock_ms(&self) -> i64 {
        self.wall_clock_ms
    }

    /// Unread records of `topic` (full name), consuming them.
    pub fn read_raw(&mut self, topic: &str) -> Vec<ProducedRecord> {
        match self.topics.logs.get_mut(topic) {
            Some(log) => {
                let out = log.records[log.read..].to_vec();
                log.read = log.records.len();
                out
            }
            None => Vec::new(),
        }
    }

    /// Every record ever written to `topic` (full name), read or not.
    pub fn all_raw(&self, topic: &str) -> &[ProducedRecord] {
        self.topics
            .logs
            .get(topic)
            .map_or(&[][..], |l| l.records.as_slice())
    }

    /// Names of all topics written so far, sorted.
    pub fn written_topics(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.topics.logs.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// Unread records of an output topic, decoded, consuming them.
    pub fn read_records<K: 'static, V: 'static>(
        &mut self,
        topic: &TestOutputTopic<K, V>,
    ) -> Result<Vec<TestRecord<K, V>>, DriverError> {
        self.read_raw(topic.name())
            .iter()
            .map(|r| topic.decode(r))
            .collect()
    }

    /// Unread `(key, value)` pairs of an output topic, consuming them.
    pub fn read_key_values<K: 'static, V: 'static>(
        &mut self,
        topic: &TestOutputTopic<K, V>,
    ) -> Result<Vec<(K, V)>, DriverError> {
        Ok(self
            .read_records(topic)?
            .into_iter()
            .map(|r| (r.key, r.value))
            .collect())
    }

    /// The counters of sub-topology `subtopology`'s task.
    pub fn task_metrics(&self, subtopology: u32) -> Option<TaskMetrics> {
        self.tasks
            .get(subtopology as usize)
            .map(TaskInstance::metrics)
    }

    /// The stream time of sub-topology `subtopology`'s task.
    pub fn stream_time(&self, subtopology: u32) -> Option<i64> {
        self.tasks
            .get(subtopology as usize)
            .map(TaskInstance::stream_time)
    }

    /// Closes all tasks.
    pub fn close(mut self) -> Result<(), DriverError> {
        for task in &mut self.tasks {
            task.close()?;
        }
        Ok(())
    }
}

/// The driver's store provider: in-memory stores of every kind.
fn in_memory_provider(
    _task: TaskId,
    spec: &StoreSpec<'_>,
) -> Result<Box<dyn KeyValueStore>, StoreError> {
    Ok(Box::new(crate::state::memory::InMemoryKeyValueStore::new(
        spec.name,
    )))
}

impl std::fmt::Debug for TopologyTestDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopologyTestDriver")
            .field("tasks", &self.tasks)
            .field("wall_clock_ms", &self.wall_clock_ms)
            .field("written_topics", &self.written_topics())
            .finish()
    }
}
