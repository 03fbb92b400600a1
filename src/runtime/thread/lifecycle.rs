//! Commit, abort, and the task lifecycle of a stream thread's [`Core`]:
//! opening (restore, standby take-over, stream time), closing and recovering.

use super::*;

impl Core {
    pub(super) fn exactly_once(&self) -> bool {
        self.env.config.is_exactly_once()
    }

    pub(super) fn transactional_id(&self) -> String {
        self.producer
            .context()
            .transactional_id
            .clone()
            .unwrap_or_default()
    }

    /// Classifies a producer error into "abort and go on" or fatal.
    pub(super) fn classify(&self, context: &str, error: KafkaError) -> TxnError {
        use RDKafkaErrorCode::{Fenced, InvalidProducerEpoch, ProducerFenced};
        if let KafkaError::Transaction(rd) = &error
            && (rd.is_fatal() || matches!(rd.code(), Fenced | ProducerFenced))
        {
            if matches!(rd.code(), Fenced | ProducerFenced | InvalidProducerEpoch) {
                return TxnError::Fatal(StreamsError::Fenced {
                    transactional_id: self.transactional_id(),
                });
            }
            return TxnError::Fatal(StreamsError::kafka(context.to_string(), error));
        }
        TxnError::Abort(StreamsError::kafka(context.to_string(), error))
    }

    pub(super) fn begin_if_needed(&mut self) -> Result<(), TxnError> {
        if self.exactly_once() && !self.txn_open {
            self.producer
                .begin_transaction()
                .map_err(|e| self.classify("beginning a transaction", e))?;
            self.txn_open = true;
        }
        Ok(())
    }

    pub(super) fn offsets_list(&self) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        for (topic, partitions) in &self.offsets {
            for (&partition, &next) in partitions {
                // Adding a partition with a valid offset cannot fail.
                let _ = tpl.add_partition_offset(topic, partition, Offset::Offset(next));
            }
        }
        crate::runtime::stream_time::annotate(&mut tpl, &self.env.layout, |id| {
            self.tasks.get(&id).map(TaskInstance::stream_time)
        });
        tpl
    }

    /// Commits everything processed since the last commit. See the module docs.
    pub(super) fn commit(
        &mut self,
        consumer: &BaseConsumer<RebalanceContext>,
    ) -> Result<(), TxnError> {
        if !self.dirty {
            return Ok(());
        }
        let started = Instant::now();
        // The record caches' updates join this transaction.
        {
            let mut collector = KafkaCollector {
                producer: &self.producer,
                partitions: &self.env.layout.partitions,
            };
            for task in self.tasks.values_mut() {
                task.flush(&mut collector)
                    .map_err(|e| TxnError::Fatal(e.into()))?;
            }
        }
        crate::runtime::collector::flush(&self.producer, TXN_TIMEOUT)
            .map_err(|e| self.classify("flushing the producer", e))?;
        if let Some(error) = self.events.take_error() {
            return Err(TxnError::Abort(StreamsError::kafka(
                "delivering records",
                error,
            )));
        }
        let offsets = self.offsets_list();
        if self.exactly_once() {
            let metadata = consumer.group_metadata().ok_or_else(|| {
                TxnError::Abort(StreamsError::kafka(
                    "reading the consumer group metadata",
                    KafkaError::ConsumerCommit(RDKafkaErrorCode::UnknownMemberId),
                ))
            })?;
            if offsets.count() > 0 {
                self.producer
                    .send_offsets_to_transaction(&offsets, &metadata, TXN_TIMEOUT)
                    .map_err(|e| self.classify("sending offsets to the transaction", e))?;
            }
            self.producer
                .commit_transaction(TXN_TIMEOUT)
                .map_err(|e| self.classify("committing the transaction", e))?;
            self.txn_open = false;
        }
        let events = self.events.clone();
        for (id, task) in self.tasks.iter_mut() {
            let partition = id.partition;
            task.commit(|topic| events.changelog_offset(topic, partition))
                .map_err(|e| TxnError::Fatal(e.into()))?;
        }
        if !self.exactly_once() && offsets.count() > 0 {
            consumer
                .commit(&offsets, CommitMode::Sync)
                .map_err(|e| TxnError::Abort(StreamsError::kafka("committing offsets", e)))?;
        }
        self.note_purgeable();
        self.offsets.clear();
        self.dirty = false;
        self.meter.commit_done(started, self.exactly_once());
        tracing::debug!(
            thread = self.thread,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "committed"
        );
        Ok(())
    }

    /// Remembers the just-committed offsets of repartition topics and hands
    /// them to the purger once per `repartition_purge_interval_ms`.
    pub(super) fn note_purgeable(&mut self) {
        let layout = &self.env.layout;
        for (topic, partitions) in &self.offsets {
            if layout.repartition_topics.iter().any(|t| t == topic) {
                for (&partition, &next) in partitions {
                    self.purgeable.insert((topic.clone(), partition), next);
                }
            }
        }
        let interval = Duration::from_millis(self.env.config.repartition_purge_interval_ms);
        if !self.purgeable.is_empty() && self.last_purge.elapsed() >= interval {
            self.last_purge = Instant::now();
            self.env.purger.purge(std::mem::take(&mut self.purgeable));
        }
    }

    /// Aborts the open transaction and drops every task's uncommitted state.
    pub(super) fn abort(&mut self) {
        tracing::debug!(thread = self.thread, txn_open = self.txn_open, "aborting");
        if self.txn_open {
            self.meter.transaction_aborted();
            // librdkafka waits for the delivery reports of purged records
            // before it aborts, and a BaseProducer only delivers them while
            // polled: purge, serve them, then abort.
            self.producer
                .purge(PurgeConfig::default().queue().inflight());
            let _ = self.producer.flush(Duration::from_secs(5));
            if let Err(e) = self.producer.abort_transaction(TXN_TIMEOUT) {
                tracing::warn!(error = %e, "aborting the transaction failed");
            }
            self.txn_open = false;
        }
        let _ = self.events.take_error();
        for task in self.tasks.values_mut() {
            task.abort();
        }
        self.offsets.clear();
        self.dirty = false;
    }

    pub(super) fn close_tasks(&mut self) {
        self.meter.tasks_closed();
        for (id, mut task) in std::mem::take(&mut self.tasks) {
            if let Err(e) = task.close() {
                tracing::warn!(task = %id, error = %e, "closing task failed");
            }
            self.env.standbys.release(id);
        }
    }

    /// Creates, restores and initializes the tasks of the current assignment,
    /// each from the stream time of the last commit (`crate::runtime::stream_time`).
    pub(super) fn open_tasks(
        &mut self,
        consumer: &BaseConsumer<RebalanceContext>,
    ) -> Result<(), StreamsError> {
        let mut ids: Vec<TaskId> = self
            .assignment
            .iter()
            .filter_map(|(topic, partition)| {
                self.env
                    .layout
                    .subtopology_of_topic
                    .get(topic)
                    .map(|&sub| TaskId {
                        subtopology: sub,
                        partition: *partition,
                    })
            })
            .collect();
        ids.sort();
        ids.dedup();
        let now = wall_clock_ms();
        let stream_times = crate::runtime::stream_time::committed_stream_times(
            consumer,
            &self.assignment,
            &self.env.layout,
            Duration::from_secs(30),
        )?;
        for id in ids {
            let mut task = match self.env.standbys.claim(id) {
                Some(standby) => {
                    tracing::info!(task = %id, "taking over the standby copy");
                    standby.into_task()?
                }
                None => {
                    let mut provider = self.env.stores.provider();
                    TaskInstance::new(
                        self.env.topology.clone(),
                        id,
                        self.env.task_config.clone(),
                        &mut provider,
                    )
                    .inspect_err(|_| self.env.standbys.release(id))?
                }
            };
            let started = Instant::now();
            let mut meter = RestoreMeter::start(self.env.metrics.clone(), id.to_string());
            let stats = restore_task(
                &mut task,
                &self.restore_consumer,
                Duration::from_secs(300),
                &mut meter,
            )?;
            drop(meter);
            if stats.changelog_size > 0 {
                tracing::info!(
                    task = %id,
                    restored = stats.restored,
                    changelog_records = stats.changelog_size,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "restored task"
                );
            }
            if let Some(&time) = stream_times.get(&id) {
                task.restore_stream_time(time)?;
            }
            self.begin_if_needed().map_err(TxnError::into_error)?;
            let mut collector = KafkaCollector {
                producer: &self.producer,
                partitions: &self.env.layout.partitions,
            };
            task.initialize(now, &mut collector)?;
            self.tasks.insert(id, task);
        }
        Ok(())
    }

    /// Recovers from an abortable error: abort, rebuild tasks from their
    /// committed state, and rewind the consumer to the committed offsets.
    pub(super) fn recover(
        &mut self,
        consumer: &BaseConsumer<RebalanceContext>,
        cause: &StreamsError,
    ) -> Result<(), StreamsError> {
        tracing::warn!(thread = self.thread, error = %cause, "aborting the transaction and rewinding to the last commit");
        self.abort();
        self.close_tasks();
        self.generation += 1;
        let mut assigned = TopicPartitionList::new();
        for (topic, partition) in &self.assignment {
            let _ = assigned.add_partition(topic, *partition);
        }
        let committed = consumer
            .committed_offsets(assigned, Duration::from_secs(30))
            .map_err(|e| StreamsError::kafka("reading committed offsets to rewind", e))?;
        let mut rewind = TopicPartitionList::new();
        for element in committed.elements() {
            let offset = match element.offset() {
                Offset::Offset(n) => Offset::Offset(n),
                _ => Offset::Beginning,
            };
            let _ = rewind.add_partition_offset(element.topic(), element.partition(), offset);
        }
        consumer
            .seek_partitions(rewind, Duration::from_secs(30))
            .map_err(|e| StreamsError::kafka("rewinding to the committed offsets", e))?;
        self.open_tasks(consumer)
    }
}
