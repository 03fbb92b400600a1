//! [`ThreadMeter`]: the metric handles of one stream thread and its tasks.
//!
//! The stream thread owns its meter (no lock). Per record it calls
//! [`ThreadMeter::record`], which only compares the task id with the previous
//! record's and pushes the record timestamp into a reused buffer. When the
//! task changes, and at the end of the batch, the run of records of one task
//! (a *segment*) is closed: one clock read gives the segment's processing
//! time (busy time of that task) and the sink time of its records (end-to-end
//! latency, observed into a thread-local histogram). [`ThreadMeter::batch_done`]
//! publishes everything to the shared families once per loop iteration.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus::local::LocalHistogram;
use prometheus::{Gauge, Histogram, IntCounter};

use super::Metrics;
use crate::processor::{TaskId, TaskMetrics};

/// The shortest window over which a busy ratio is computed.
const BUSY_WINDOW: Duration = Duration::from_secs(1);

/// Handles of one task, resolved when the task first processes a record.
struct TaskMeter {
    label: String,
    processed: IntCounter,
    late: IntCounter,
    shed: IntCounter,
    deserialization: IntCounter,
    processing: IntCounter,
    e2e: LocalHistogram,
    busy_ratio: Gauge,
    busy_seconds: prometheus::Counter,
    busy: Duration,
    /// Busy time not yet added to `busy_seconds`.
    busy_unpublished: Duration,
    /// The task's counters as last published.
    seen: TaskMetrics,
    /// Per node (topological order): records and busy seconds as last
    /// published.
    nodes_seen: Vec<(u64, f64)>,
}

/// Metric handles of one stream thread; see the module docs.
pub struct ThreadMeter {
    metrics: Arc<Metrics>,
    thread: String,
    polls: IntCounter,
    poll_seconds: Histogram,
    process_seconds: Histogram,
    processed: IntCounter,
    commit_seconds: Histogram,
    committed: IntCounter,
    aborted: IntCounter,
    rebalances: IntCounter,
    rebalance_seconds: Histogram,
    rebalance_started: Option<Instant>,
    /// Revoked, assigned and kept tasks (`weir_rebalance_tasks_total`).
    task_moves: [IntCounter; 3],
    /// `weir_partition_output_gap_seconds` per assigned input partition.
    output_gaps: std::collections::HashMap<(String, i32), Histogram>,
    tasks: BTreeMap<TaskId, TaskMeter>,
    /// Handles of `weir_node_*` per (sub-topology, node name).
    nodes: std::collections::HashMap<(u32, String), (IntCounter, prometheus::Counter)>,
    /// The task of the open segment, when it has a meter.
    current: Option<TaskId>,
    segment_start: Instant,
    /// Timestamps (ms) of the open segment's records.
    timestamps: Vec<i64>,
    batch_start: Option<Instant>,
    window_start: Instant,
}

impl ThreadMeter {
    /// Resolves the handles of stream thread `index`.
    pub fn new(metrics: Arc<Metrics>, index: usize) -> Self {
        let thread = index.to_string();
        let t = &[thread.as_str()];
        ThreadMeter {
            polls: metrics.thread_polls.with_label_values(t),
            poll_seconds: metrics.thread_poll_seconds.with_label_values(t),
            process_seconds: metrics.thread_process_seconds.with_label_values(t),
            processed: metrics.thread_processed.with_label_values(t),
            commit_seconds: metrics.thread_commit_seconds.with_label_values(t),
            committed: metrics
                .transactions
                .with_label_values(&[thread.as_str(), "committed"]),
            aborted: metrics
                .transactions
                .with_label_values(&[thread.as_str(), "aborted"]),
            rebalances: metrics.rebalances.with_label_values(t),
            rebalance_seconds: metrics.rebalance_seconds.with_label_values(t),
            // A thread starts by joining the group: its first rebalance.
            rebalance_started: Some(Instant::now()),
            task_moves: ["revoked", "assigned", "kept"].map(|change| {
                metrics
                    .rebalance_tasks
                    .with_label_values(&[thread.as_str(), change])
            }),
            output_gaps: std::collections::HashMap::new(),
            tasks: BTreeMap::new(),
            nodes: std::collections::HashMap::new(),
            current: None,
            segment_start: Instant::now(),
            timestamps: Vec::with_capacity(1024),
            batch_start: None,
            window_start: Instant::now(),
            thread,
            metrics,
        }
    }

    /// A poll that started at `started` returned.
    pub fn poll_done(&mut self, started: Instant) {
        self.polls.inc();
        super::observe(&self.poll_seconds, started);
    }

    /// Task `id` processed a record with timestamp `timestamp_ms`.
    #[inline]
    pub fn record(&mut self, id: TaskId, timestamp_ms: i64) {
        if self.current != Some(id) {
            let now = Instant::now();
            self.close_segment(now);
            self.batch_start.get_or_insert(now);
            if !self.tasks.contains_key(&id) {
                let meter = self.task_meter(id);
                self.tasks.insert(id, meter);
            }
            self.current = Some(id);
            self.segment_start = now;
        }
        self.timestamps.push(timestamp_ms);
    }

    fn task_meter(&self, id: TaskId) -> TaskMeter {
        let label = id.to_string();
        let m = &self.metrics;
        let dropped = |reason: &str| m.task_dropped.with_label_values(&[label.as_str(), reason]);
        TaskMeter {
            processed: m.task_processed.with_label_values(&[label.as_str()]),
            late: dropped("late"),
            shed: dropped("shed"),
            deserialization: dropped("deserialization_error"),
            processing: dropped("processing_error"),
            e2e: m
                .task_e2e_seconds
                .with_label_values(&[label.as_str()])
                .local(),
            busy_ratio: m.task_busy_ratio.with_label_values(&[label.as_str()]),
            busy_seconds: m.task_busy_seconds.with_label_values(&[label.as_str()]),
            busy: Duration::ZERO,
            busy_unpublished: Duration::ZERO,
            seen: TaskMetrics::default(),
            nodes_seen: Vec::new(),
            label,
        }
    }

    /// Closes the open segment: busy time and end-to-end latencies.
    fn close_segment(&mut self, now: Instant) {
        let Some(id) = self.current.take() else {
            return;
        };
        let Some(task) = self.tasks.get_mut(&id) else {
            return;
        };
        let busy = now.saturating_duration_since(self.segment_start);
        task.busy += busy;
        task.busy_unpublished += busy;
        let sink_ms = wall_clock_ms();
        for &ts in &self.timestamps {
            if ts >= 0 {
                task.e2e.observe((sink_ms - ts).max(0) as f64 / 1000.0);
            }
        }
        self.timestamps.clear();
    }

    /// Publishes the loop iteration: closes the open segment, records the
    /// batch's processing time, and adds each task's counters (read from
    /// [`crate::processor::TaskInstance::metrics`]) since the last call.
    pub fn batch_done<'a>(&mut self, tasks: impl Iterator<Item = (&'a TaskId, TaskMetrics)>) {
        let now = Instant::now();
        self.close_segment(now);
        if let Some(started) = self.batch_start.take() {
            self.process_seconds
                .observe(now.saturating_duration_since(started).as_secs_f64());
        }
        let mut processed = 0;
        for (id, counters) in tasks {
            let meter = match self.tasks.get_mut(id) {
                Some(m) => m,
                None if counters == TaskMetrics::default() => continue,
                None => {
                    let meter = self.task_meter(*id);
                    self.tasks.entry(*id).or_insert(meter)
                }
            };
            let seen = meter.seen;
            let delta = |now: u64, before: u64| now.saturating_sub(before);
            let p = delta(counters.processed, seen.processed);
            meter.processed.inc_by(p);
            processed += p;
            meter
                .late
                .inc_by(delta(counters.late_dropped, seen.late_dropped));
            meter.shed.inc_by(delta(counters.shed, seen.shed));
            meter.deserialization.inc_by(delta(
                counters.skipped_deserialization,
                seen.skipped_deserialization,
            ));
            meter
                .processing
                .inc_by(delta(counters.skipped_processing, seen.skipped_processing));
            meter.seen = counters;
            meter.e2e.flush();
        }
        for meter in self.tasks.values_mut() {
            if !meter.busy_unpublished.is_zero() {
                meter
                    .busy_seconds
                    .inc_by(meter.busy_unpublished.as_secs_f64());
                meter.busy_unpublished = Duration::ZERO;
            }
        }
        self.processed.inc_by(processed);
        let window = now.saturating_duration_since(self.window_start);
        if window >= BUSY_WINDOW {
            for meter in self.tasks.values_mut() {
                meter
                    .busy_ratio
                    .set((meter.busy.as_secs_f64() / window.as_secs_f64()).min(1.0));
                meter.busy = Duration::ZERO;
            }
            self.window_start = now;
        }
    }

    /// Publishes task `id`'s per-node counters (from
    /// [`crate::processor::TaskInstance::node_metrics`]) since the last call.
    pub fn nodes_done(&mut self, id: TaskId, nodes: &[crate::processor::NodeMetrics<'_>]) {
        let Some(meter) = self.tasks.get_mut(&id) else {
            return;
        };
        meter.nodes_seen.resize(nodes.len(), (0, 0.0));
        for (node, seen) in nodes.iter().zip(meter.nodes_seen.iter_mut()) {
            let records = node.records.saturating_sub(seen.0);
            let busy = (node.busy_seconds - seen.1).max(0.0);
            *seen = (node.records, node.busy_seconds);
            if records == 0 && busy == 0.0 {
                continue;
            }
            let key = (id.subtopology, node.name.to_string());
            let metrics = &self.metrics;
            let (processed, busy_seconds) = self.nodes.entry(key).or_insert_with(|| {
                let labels = [id.subtopology.to_string(), node.name.to_string()];
                let labels = [labels[0].as_str(), labels[1].as_str()];
                (
                    metrics.node_processed.with_label_values(&labels),
                    metrics.node_busy_seconds.with_label_values(&labels),
                )
            });
            processed.inc_by(records);
            busy_seconds.inc_by(busy);
        }
    }

    /// A commit that started at `started` finished; `transaction` when it
    /// committed a Kafka transaction.
    pub fn commit_done(&mut self, started: Instant, transaction: bool) {
        super::observe(&self.commit_seconds, started);
        if transaction {
            self.committed.inc();
        }
    }

    /// An open transaction was aborted.
    pub fn transaction_aborted(&mut self) {
        self.aborted.inc();
    }

    /// The thread entered a rebalance (revocation, or joining the group).
    pub fn rebalance_started(&mut self) {
        self.rebalance_started.get_or_insert_with(Instant::now);
    }

    /// The thread's new tasks are created (they restore afterwards).
    pub fn rebalance_finished(&mut self) {
        if let Some(started) = self.rebalance_started.take() {
            self.rebalances.inc();
            super::observe(&self.rebalance_seconds, started);
        }
    }

    /// A rebalance took `revoked` tasks away from the thread, gave it
    /// `assigned` new ones and left it `kept` of those it owned.
    pub fn tasks_moved(&mut self, revoked: usize, assigned: usize, kept: usize) {
        for (counter, n) in self.task_moves.iter().zip([revoked, assigned, kept]) {
            counter.inc_by(n as u64);
        }
    }

    /// Input partition `topic`/`partition` had no output for `seconds`
    /// before the commit that just carried its progress.
    pub fn output_gap(&mut self, topic: &str, partition: i32, seconds: f64) {
        let key = (topic.to_string(), partition);
        let metrics = &self.metrics;
        self.output_gaps
            .entry(key)
            .or_insert_with(|| {
                metrics
                    .partition_output_gap
                    .with_label_values(&[topic, &partition.to_string()])
            })
            .observe(seconds);
    }

    /// The partitions left the thread: their output gap series are removed.
    pub fn forget_partitions(&mut self, partitions: &[(String, i32)]) {
        for p in partitions {
            if self.output_gaps.remove(p).is_some() {
                let _ = self
                    .metrics
                    .partition_output_gap
                    .remove_label_values(&[p.0.as_str(), &p.1.to_string()]);
            }
        }
    }

    /// The thread's tasks were closed: their series are removed (see the
    /// module docs of [`crate::metrics`]).
    pub fn tasks_closed(&mut self) {
        self.current = None;
        self.timestamps.clear();
        let closed = std::mem::take(&mut self.tasks);
        self.remove_series(closed.into_values());
    }

    /// Tasks `ids` were closed, the others stay open (an incremental
    /// rebalance): the closed tasks' series are removed.
    pub fn some_tasks_closed(&mut self, ids: &[TaskId]) {
        if self.current.is_some_and(|c| ids.contains(&c)) {
            self.current = None;
            self.timestamps.clear();
        }
        let closed: Vec<TaskMeter> = ids.iter().filter_map(|id| self.tasks.remove(id)).collect();
        self.remove_series(closed.into_iter());
    }

    fn remove_series(&self, closed: impl Iterator<Item = TaskMeter>) {
        let m = &self.metrics;
        for meter in closed {
            meter.e2e.flush();
            let task = [meter.label.as_str()];
            let _ = m.task_processed.remove_label_values(&task);
            let _ = m.task_e2e_seconds.remove_label_values(&task);
            let _ = m.task_busy_ratio.remove_label_values(&task);
            let _ = m.task_busy_seconds.remove_label_values(&task);
            for reason in ["late", "shed", "deserialization_error", "processing_error"] {
                let _ = m
                    .task_dropped
                    .remove_label_values(&[meter.label.as_str(), reason]);
            }
        }
    }

    /// The thread's label value.
    pub fn thread_label(&self) -> &str {
        &self.thread
    }
}

fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(partition: i32) -> TaskId {
        TaskId {
            subtopology: 0,
            partition,
        }
    }

    #[test]
    fn a_batch_publishes_processed_counts_latency_and_drops() {
        let metrics = Arc::new(Metrics::new("app"));
        let mut meter = ThreadMeter::new(metrics.clone(), 0);
        let now = wall_clock_ms();
        meter.record(id(0), now - 2_000);
        meter.record(id(0), now - 2_000);
        meter.record(id(1), now - 500);
        let counters = |processed, late| TaskMetrics {
            processed,
            late_dropped: late,
            ..TaskMetrics::default()
        };
        let tasks = [(id(0), counters(2, 0)), (id(1), counters(1, 3))];
        meter.batch_done(tasks.iter().map(|(i, c)| (i, *c)));
        let e2e = metrics.task_e2e_seconds.with_label_values(&["0_0"]);
        assert_eq!(e2e.get_sample_count(), 2);
        assert!(e2e.get_sample_sum() >= 4.0, "{}", e2e.get_sample_sum());
        assert_eq!(
            metrics
                .task_dropped
                .with_label_values(&["0_1", "late"])
                .get(),
            3
        );
        assert_eq!(metrics.thread_processed.with_label_values(&["0"]).get(), 3);
        // A second publication with unchanged counters adds nothing.
        meter.batch_done(tasks.iter().map(|(i, c)| (i, *c)));
        assert_eq!(metrics.thread_processed.with_label_values(&["0"]).get(), 3);
        meter.output_gap("in", 3, 1.5);
        meter.output_gap("in", 3, 0.1);
        let gaps = metrics.partition_output_gap.with_label_values(&["in", "3"]);
        assert_eq!(gaps.get_sample_count(), 2);
        assert!((gaps.get_sample_sum() - 1.6).abs() < 1e-9);
        meter.forget_partitions(&[("in".to_string(), 3)]);
        assert!(
            !metrics
                .encode_text()
                .contains("weir_partition_output_gap_seconds_count")
        );
        meter.some_tasks_closed(&[id(1)]);
        let text = metrics.encode_text();
        assert!(text.contains("task=\"0_0\""), "0_0 stays open");
        assert!(!text.contains("task=\"0_1\""), "0_1 was closed");
        meter.tasks_closed();
        assert!(!metrics.encode_text().contains("task=\"0_0\""));
    }
}
