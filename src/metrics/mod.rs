//! Prometheus metrics of one [`crate::runtime::KafkaStreams`] instance.
//!
//! Every instance owns one [`Metrics`]: a private Prometheus registry (so
//! several instances in one process never share or clash) whose series all
//! carry the constant label `application_id`. The HTTP server
//! ([`crate::http`]) serves it at `/metrics`.
//!
//! # Families
//!
//! | family | type | labels | what |
//! | --- | --- | --- | --- |
//! | `weir_thread_polls_total` | counter | `thread` | consumer polls |
//! | `weir_thread_poll_duration_seconds` | histogram | `thread` | one poll for a batch, including the wait for records |
//! | `weir_thread_process_duration_seconds` | histogram | `thread` | processing one polled batch |
//! | `weir_thread_processed_records_total` | counter | `thread` | input records processed |
//! | `weir_thread_commit_duration_seconds` | histogram | `thread` | one commit (flush, offsets, transaction, stores); `_count` = commits |
//! | `weir_transactions_total` | counter | `thread`, `result` (`committed`, `aborted`) | Kafka transactions ended |
//! | `weir_rebalances_total` | counter | `thread` | rebalances this thread took part in |
//! | `weir_rebalance_duration_seconds` | histogram | `thread` | from revocation (or join) until the new tasks are created (their stores restore afterwards: `weir_restore_*`) |
//! | `weir_rebalance_tasks_total` | counter | `thread`, `change` (`revoked`, `assigned`, `kept`) | per rebalance, the thread's tasks that moved away, that are new to it, and that it owned before and owns again |
//! | `weir_partition_output_gap_seconds` | histogram | `topic`, `partition` | per input partition, time between two commits that carried its progress (under exactly-once: time its output was not visible); across a move, measured on the new owner from the previous owner's last commit (kept in the offset metadata) |
//! | `weir_task_processed_records_total` | counter | `task` | input records processed by the task |
//! | `weir_task_e2e_latency_seconds` | histogram | `task` | end of processing of the record (its outputs handed to the producer) − record timestamp; one sample per record the task finished, skipped ones included |
//! | `weir_task_dropped_records_total` | counter | `task`, `reason` (`late`, `shed`, `deserialization_error`, `processing_error`) | records not processed (`shed`: by load shedding, `processor::task::shed`) |
//! | `weir_task_busy_ratio` | gauge | `task` | time processing ÷ wall time over the last window of ≥ 1 s |
//! | `weir_task_busy_seconds_total` | counter | `task` | time spent processing records; `rate(processed) / rate(busy)` is the task's true processing rate |
//! | `weir_node_processed_records_total` | counter | `subtopology`, `node` | records a processor node took (over the instance's tasks) |
//! | `weir_node_busy_seconds_total` | counter | `subtopology`, `node` | time in the node itself, children excluded, estimated from one record in 16; `rate(processed) / rate(busy)` is the node's true rate |
//! | `weir_subtopology_input_rate_records_per_second` | gauge | `subtopology` | input arriving at the sub-topology's partitions owned here (processed rate + lag growth), over the last scaling window ([`scaling`]) |
//! | `weir_subtopology_true_rate_records_per_second` | gauge | `subtopology` | records processed per busy second by its tasks here: one thread's capacity |
//! | `weir_recommended_instances` | gauge | – | instances needed to keep up with the input plus headroom ([`scaling`], `GET /scaling`); 0 before the first window |
//! | `weir_store_puts_total` | counter | `task`, `store` | writes and deletes of key-value, window and session stores (records applied by restoring or by a standby included) |
//! | `weir_store_gets_total` | counter | `task`, `store` | reads: point gets, window fetches, session lookups (one per call) |
//! | `weir_store_entries` | gauge | `task`, `store` | approximate number of entries, refreshed at each commit |
//! | `weir_restore_restored_records_total` | counter | `task`, `store` | changelog records applied while restoring |
//! | `weir_restore_remaining_records` | gauge | `task`, `store` | changelog records still to restore |
//! | `weir_restore_rate_records_per_second` | gauge | `task`, `store` | records restored per second during the last restore |
//! | `weir_restoring_tasks` | gauge | – | tasks restoring right now (the instance is not ready while > 0) |
//! | `weir_standby_tasks` | gauge | – | standby tasks this instance keeps warm |
//! | `weir_standby_applied_records_total` | counter | – | changelog records applied to standby tasks |
//! | `weir_standby_takeovers_total` | counter | – | standby copies a stream thread took over as active tasks (restoring only their tail) |
//! | `weir_task_open_waits_total` | counter | – | assigned tasks a stream thread could not open yet because another thread of this instance still had them open (its group membership was dropped); each is retried after a backoff |
//! | `weir_consumer_lag_records` | gauge | `topic`, `partition` | log end (last stable offset under exactly-once) − position, from librdkafka statistics |
//!
//! # Invariants
//!
//! * Label values are resolved into handles once per thread, task or store
//!   ([`ThreadMeter`], the stores in [`store`]); the per-record path
//!   never looks up a label.
//! * The per-record path touches only thread-local state (a timestamp pushed
//!   to a reused buffer); shared metrics are updated once per batch
//!   ([`ThreadMeter::batch_done`]), once per commit, once per restore
//!   progress step (1,000 records) and once per statistics interval. Store
//!   puts/gets are the exception: one uncontended atomic add per store call,
//!   which is small next to the store call itself.
//! * Series of a task are removed when the task closes, so a task that moved
//!   to another instance does not linger here (its counters restart at 0 on
//!   the new owner; `rate()` handles that).

mod lag;
pub mod live;
mod restore;
pub mod sample;
pub mod scaling;
pub mod store;
mod thread;

pub use lag::LagMeter;
pub use restore::RestoreMeter;
pub use thread::ThreadMeter;

use std::collections::HashMap;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder, exponential_buckets,
};

/// The registry and metric families of one instance; see the module docs.
pub struct Metrics {
    registry: Registry,
    /// (family name, is a histogram), in registration order.
    families: Vec<(String, bool)>,
    pub(crate) thread_polls: IntCounterVec,
    pub(crate) thread_poll_seconds: HistogramVec,
    pub(crate) thread_process_seconds: HistogramVec,
    pub(crate) thread_processed: IntCounterVec,
    pub(crate) thread_commit_seconds: HistogramVec,
    pub(crate) transactions: IntCounterVec,
    pub(crate) rebalances: IntCounterVec,
    pub(crate) rebalance_seconds: HistogramVec,
    pub(crate) rebalance_tasks: IntCounterVec,
    pub(crate) partition_output_gap: HistogramVec,
    pub(crate) task_processed: IntCounterVec,
    pub(crate) task_e2e_seconds: HistogramVec,
    pub(crate) task_dropped: IntCounterVec,
    pub(crate) task_busy_ratio: prometheus::GaugeVec,
    pub(crate) task_busy_seconds: prometheus::CounterVec,
    pub(crate) node_processed: IntCounterVec,
    pub(crate) node_busy_seconds: prometheus::CounterVec,
    pub(crate) subtopology_input_rate: prometheus::GaugeVec,
    pub(crate) subtopology_true_rate: prometheus::GaugeVec,
    pub(crate) recommended_instances: IntGauge,
    pub(crate) store_puts: IntCounterVec,
    pub(crate) store_gets: IntCounterVec,
    pub(crate) store_entries: IntGaugeVec,
    pub(crate) restore_restored: IntCounterVec,
    pub(crate) restore_remaining: IntGaugeVec,
    pub(crate) restore_rate: prometheus::GaugeVec,
    pub(crate) restoring_tasks: IntGauge,
    pub(crate) standby_tasks: IntGauge,
    pub(crate) standby_applied: IntCounter,
    pub(crate) standby_takeovers: IntCounter,
    pub(crate) task_open_waits: IntCounter,
    pub(crate) consumer_lag: IntGaugeVec,
    /// The last lag and end offset of each (topic, partition) and when
    /// its statistics came (the scaling signal needs the time: statistics
    /// lag the gauge readers by up to an interval).
    pub(crate) lag_seen: std::sync::Mutex<LagSeen>,
    pub(crate) produced: IntCounterVec,
}

/// Per (topic, partition): the last lag, end offset and statistics time.
pub(crate) type LagSeen = std::collections::BTreeMap<(String, i32), (i64, i64, std::time::Instant)>;

/// Latency buckets from 100 µs to about 105 s, doubling.
fn latency_buckets() -> Vec<f64> {
    exponential_buckets(0.0001, 2.0, 21).expect("valid buckets")
}

/// Output gap buckets from 50 ms to about 7 min, doubling.
fn gap_buckets() -> Vec<f64> {
    exponential_buckets(0.05, 2.0, 14).expect("valid buckets")
}

/// End-to-end latency buckets from 1 ms to about 17 min, doubling.
fn e2e_buckets() -> Vec<f64> {
    exponential_buckets(0.001, 2.0, 21).expect("valid buckets")
}

impl Metrics {
    /// A fresh registry for the instance of `application_id`, with every
    /// family registered (families with labels show up once a series exists).
    pub fn new(application_id: &str) -> Self {
        let mut constant = HashMap::new();
        constant.insert("application_id".to_string(), application_id.to_string());
        let registry =
            Registry::new_custom(None, Some(constant)).expect("constant labels are valid");
        let families = std::cell::RefCell::new(Vec::new());
        let register = |collector: Box<dyn prometheus::core::Collector>, histogram: bool| {
            families
                .borrow_mut()
                .push((family_name(collector.as_ref()), histogram));
            registry.register(collector).expect("unique family name");
        };
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let family = IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter");
            register(Box::new(family.clone()), false);
            family
        };
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            let family = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid gauge");
            register(Box::new(family.clone()), false);
            family
        };
        let float_gauge = |name: &str, help: &str, labels: &[&str]| {
            let family =
                prometheus::GaugeVec::new(Opts::new(name, help), labels).expect("valid gauge");
            register(Box::new(family.clone()), false);
            family
        };
        let histogram = |name: &str, help: &str, labels: &[&str], buckets: Vec<f64>| {
            let family = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
                .expect("valid histogram");
            register(Box::new(family.clone()), true);
            family
        };
        let restoring_tasks = IntGauge::new(
            "weir_restoring_tasks",
            "Tasks restoring their stores right now; the instance is not ready while > 0.",
        )
        .expect("valid gauge");
        register(Box::new(restoring_tasks.clone()), false);
        let standby_tasks = IntGauge::new(
            "weir_standby_tasks",
            "Standby tasks this instance keeps warm.",
        )
        .expect("valid gauge");
        register(Box::new(standby_tasks.clone()), false);
        let recommended_instances = IntGauge::new(
            "weir_recommended_instances",
            "Instances the application needs to keep up with its input rate plus scaling_headroom_percent (GET /scaling shows the computation); 0 until the first scaling window has passed.",
        )
        .expect("valid gauge");
        register(Box::new(recommended_instances.clone()), false);
        let plain_counter = |name: &str, help: &str| {
            let counter = IntCounter::new(name, help).expect("valid counter");
            register(Box::new(counter.clone()), false);
            counter
        };
        let standby_applied = plain_counter(
            "weir_standby_applied_records_total",
            "Changelog records applied to standby tasks.",
        );
        let standby_takeovers = plain_counter(
            "weir_standby_takeovers_total",
            "Standby copies a stream thread took over as active tasks.",
        );
        let task_open_waits = plain_counter(
            "weir_task_open_waits_total",
            "Assigned tasks a stream thread could not open yet because another thread of this instance still had them open.",
        );
        let t = &["thread"];
        let mut metrics = Metrics {
            thread_polls: counter("weir_thread_polls_total", "Consumer polls.", t),
            thread_poll_seconds: histogram(
                "weir_thread_poll_duration_seconds",
                "Time of one poll for a batch, including the wait for records.",
                t,
                latency_buckets(),
            ),
            thread_process_seconds: histogram(
                "weir_thread_process_duration_seconds",
                "Time processing one polled batch.",
                t,
                latency_buckets(),
            ),
            thread_processed: counter(
                "weir_thread_processed_records_total",
                "Input records processed by the thread.",
                t,
            ),
            thread_commit_seconds: histogram(
                "weir_thread_commit_duration_seconds",
                "Time of one commit: flush, offsets, transaction commit, store commit.",
                t,
                latency_buckets(),
            ),
            transactions: counter(
                "weir_transactions_total",
                "Kafka transactions ended, by result (committed, aborted).",
                &["thread", "result"],
            ),
            rebalances: counter(
                "weir_rebalances_total",
                "Rebalances the thread took part in.",
                t,
            ),
            rebalance_seconds: histogram(
                "weir_rebalance_duration_seconds",
                "Time from revocation (or joining) until the new tasks are created; their stores restore afterwards, between processing rounds (weir_restore_*).",
                t,
                latency_buckets(),
            ),
            rebalance_tasks: counter(
                "weir_rebalance_tasks_total",
                "Tasks per rebalance by change: revoked (owned before, not after), assigned (new to the thread), kept (owned before and after).",
                &["thread", "change"],
            ),
            partition_output_gap: histogram(
                "weir_partition_output_gap_seconds",
                "Per input partition, the time between two commits that carried its progress (under exactly-once, the time its output was not visible). The first commit after the partition moves here is measured from the previous owner's last commit (its time is kept in the offset metadata), so a rebalance pause shows up on the new owner.",
                &["topic", "partition"],
                gap_buckets(),
            ),
            task_processed: counter(
                "weir_task_processed_records_total",
                "Input records processed by the task.",
                &["task"],
            ),
            task_e2e_seconds: histogram(
                "weir_task_e2e_latency_seconds",
                "End of processing of a record (outputs handed to the producer) minus the record's timestamp.",
                &["task"],
                e2e_buckets(),
            ),
            task_dropped: counter(
                "weir_task_dropped_records_total",
                "Records not processed, by reason (late, shed, deserialization_error, processing_error).",
                &["task", "reason"],
            ),
            task_busy_ratio: float_gauge(
                "weir_task_busy_ratio",
                "Time the task spent processing divided by wall time, over the last window of at least 1 s.",
                &["task"],
            ),
            task_busy_seconds: {
                let family = prometheus::CounterVec::new(
                    Opts::new(
                        "weir_task_busy_seconds_total",
                        "Time the task spent processing records (its busy time); processed records divided by busy seconds is the task's true processing rate.",
                    ),
                    &["task"],
                )
                .expect("valid counter");
                register(Box::new(family.clone()), false);
                family
            },
            node_processed: counter(
                "weir_node_processed_records_total",
                "Records a processor node took, over the instance's tasks.",
                &["subtopology", "node"],
            ),
            node_busy_seconds: {
                let family = prometheus::CounterVec::new(
                    Opts::new(
                        "weir_node_busy_seconds_total",
                        "Time spent in a processor node itself (its children excluded), over the instance's tasks; estimated from one record in 16. Records divided by busy seconds is the node's true processing rate.",
                    ),
                    &["subtopology", "node"],
                )
                .expect("valid counter");
                register(Box::new(family.clone()), false);
                family
            },
            subtopology_input_rate: float_gauge(
                "weir_subtopology_input_rate_records_per_second",
                "Records per second arriving at the sub-topology's partitions this instance owns (processed rate plus lag growth) over the last scaling window.",
                &["subtopology"],
            ),
            subtopology_true_rate: float_gauge(
                "weir_subtopology_true_rate_records_per_second",
                "Records the sub-topology's tasks on this instance process per second of busy time (one thread's capacity) over the last scaling window.",
                &["subtopology"],
            ),
            recommended_instances,
            store_puts: counter(
                "weir_store_puts_total",
                "Store writes and deletes (key-value, window, session; restored records included).",
                &["task", "store"],
            ),
            store_gets: counter(
                "weir_store_gets_total",
                "Store reads: point gets, window fetches, session lookups (one per call).",
                &["task", "store"],
            ),
            store_entries: gauge(
                "weir_store_entries",
                "Approximate number of entries in the store, refreshed at each commit.",
                &["task", "store"],
            ),
            restore_restored: counter(
                "weir_restore_restored_records_total",
                "Changelog records applied to the store while restoring.",
                &["task", "store"],
            ),
            restore_remaining: gauge(
                "weir_restore_remaining_records",
                "Changelog records still to restore into the store.",
                &["task", "store"],
            ),
            restore_rate: float_gauge(
                "weir_restore_rate_records_per_second",
                "Records restored per second during the store's last restore.",
                &["task", "store"],
            ),
            restoring_tasks,
            standby_tasks,
            standby_applied,
            standby_takeovers,
            task_open_waits,
            consumer_lag: gauge(
                "weir_consumer_lag_records",
                "Records between the consumer's position and the end of the partition (last stable offset under exactly-once), from librdkafka statistics.",
                &["topic", "partition"],
            ),
            produced: counter(
                "weir_produced_records_total",
                "Records the broker acknowledged on output topics (sinks, repartition and dead-letter topics; not changelogs), by topic. Under exactly-once, records of aborted transactions are included.",
                &["topic"],
            ),
            lag_seen: Default::default(),
            registry: registry.clone(),
            families: Vec::new(),
        };
        metrics.families = families.into_inner();
        metrics
    }

    /// The underlying registry (to add application metrics of your own).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Every series in the Prometheus text exposition format (version 0.0.4).
    pub fn encode_text(&self) -> String {
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for the families registered here.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    /// The names of every registered family, with the names Prometheus
    /// derives from histograms (`_bucket`, `_sum`, `_count`); what a PromQL
    /// query against Weir may name.
    pub fn exported_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for (name, histogram) in &self.families {
            if *histogram {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.push(format!("{name}{suffix}"));
                }
            } else {
                names.push(name.clone());
            }
        }
        names.sort();
        names
    }

    /// The number of tasks restoring right now.
    pub fn restoring_tasks(&self) -> i64 {
        self.restoring_tasks.get()
    }
}

fn family_name(collector: &dyn prometheus::core::Collector) -> String {
    collector
        .desc()
        .first()
        .map(|d| d.fq_name.clone())
        .unwrap_or_default()
}

/// Records one duration in seconds.
pub(crate) fn observe(histogram: &Histogram, started: std::time::Instant) {
    histogram.observe(started.elapsed().as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exported_names_cover_every_registered_family() {
        let metrics = Metrics::new("app");
        let names = metrics.exported_names();
        assert_eq!(metrics.families.len(), 33, "{names:?}");
        let exported: Vec<String> = metrics
            .registry()
            .gather()
            .iter()
            .map(|f| f.name().to_string())
            .collect();
        for name in &exported {
            assert!(names.contains(name), "{name} missing from exported_names");
        }
        assert!(names.contains(&"weir_task_e2e_latency_seconds_bucket".to_string()));
        assert!(names.iter().all(|n| n.starts_with("weir_")), "{names:?}");
    }

    #[test]
    fn text_carries_the_application_id() {
        let metrics = Metrics::new("my-app");
        metrics.thread_polls.with_label_values(&["0"]).inc();
        let text = metrics.encode_text();
        assert!(
            text.contains("weir_thread_polls_total{thread=\"0\",application_id=\"my-app\"} 1"),
            "{text}"
        );
    }
}
