//! `datacenter-monitor`: real-time anomaly detection for a datacenter, in
//! the manner of SAQL (Gao et al., USENIX Security '18).
//!
//! It reads two topics:
//!
//! * `task-usage` (key: the machine id, UTF-8; value: JSON [`TaskUsage`], one
//!   sample of one task's resource usage in the shape of Google's
//!   cluster-usage trace; event time = `start_time`);
//! * `system-events` (key: the host, UTF-8; value: JSON [`SystemEvent`], a
//!   process acting on a file, a process or a network address; event time =
//!   `ts`).
//!
//! and writes JSON [`Alert`]s (key: the alert's entity) to `alerts`. Four
//! detections, each emitting **once** per window or sequence (the state that
//! says what was already evaluated lives in changelogged stores, so under
//! `exactly_once_v2` a crash replays to the same alerts):
//!
//! 1. [`Rule::MachineMetric`] ([`machines`], store `dc-machines`): a
//!    machine's mean CPU rate or canonical memory over a `window_ms` window
//!    deviates from its own exponentially weighted moving baseline by more
//!    than `machine_k` deviations, where a deviation is the baseline's
//!    standard deviation, at least `machine_min_std_fraction` × its mean.
//!    The baseline learns only from windows that did not alert.
//! 2. [`Rule::OutlierTask`] ([`jobs`], store `dc-jobs`, behind the
//!    repartition topic `<application_id>-usage-by-job-repartition`): within
//!    a job with at least `outlier_min_tasks` tasks, a task whose mean CPU
//!    rate in a window is more than `outlier_k` × max(MAD,
//!    `outlier_min_mad_fraction` × median) from the job's median: runaways
//!    and stragglers.
//! 3. Suspicious sequences per host ([`hosts`], store `dc-sequences`), both
//!    within `sequence_window_ms` of the first event:
//!    [`Rule::DropperConnect`] — a process writes a file, a process is started
//!    from that file, and that process connects to an address outside the
//!    datacenter (not starting with one of `internal_prefixes`);
//!    [`Rule::SecretExfiltration`] — a process reads a sensitive file (path
//!    starting with one of `sensitive_paths`) and then connects outside.
//! 4. [`Rule::ConnectionBurst`] ([`hosts`], store `dc-connections`): a
//!    host's outbound connections in a window exceed its moving baseline by
//!    more than `burst_k` deviations (at least `burst_min_std_fraction` × the
//!    mean, and at least 1).
//!
//! Windows are tumbling, aligned to the epoch, per key, and close when the
//! key's first record of a later window arrives (records of one machine or
//! host are in order in their partition); a record for a window that already
//! closed is dropped and counted as late. Per-job windows close when every
//! task the job has shown has reported for the window, or `outlier_grace_windows`
//! windows after the newest window seen for the job — so instances that run
//! at different speeds upstream of the repartition topic do not lose tasks.
//!
//! `weir generate datacenter-monitor` writes background traffic with injected
//! anomalies of every kind and their ground truth ([`generate`]).

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::{Param, Params, ShippedTopology};
use crate::serdes::{JsonSerde, StringSerde};
use crate::time::ValueTimestamp;
use crate::topology::{
    Consumed, Materialized, Produced, Repartitioned, StreamsBuilder, Topology, TopologyError,
};

pub mod generate;
pub mod hosts;
pub mod jobs;
pub mod machines;
pub mod stats;

/// The store of per-machine windows and baselines.
pub const MACHINE_STORE: &str = "dc-machines";
/// The store of per-job windows of task means.
pub const JOB_STORE: &str = "dc-jobs";
/// The store of per-host partial sequences.
pub const SEQUENCE_STORE: &str = "dc-sequences";
/// The store of per-host connection windows and baselines.
pub const CONNECTION_STORE: &str = "dc-connections";

/// One sample of a task's resource usage (Google cluster-usage trace shape;
/// times in ms since the epoch, rates and memory normalized as in the trace).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskUsage {
    /// Start of the measurement interval (the event time).
    pub start_time: i64,
    /// End of the measurement interval.
    pub end_time: i64,
    /// The machine the task ran on (also the record key).
    pub machine_id: String,
    /// The job.
    pub job_id: String,
    /// The task's index within its job.
    pub task_index: u32,
    /// Mean CPU rate (core-seconds per second).
    pub cpu_rate: f64,
    /// Canonical memory usage (normalized).
    pub canonical_memory_usage: f64,
    /// Assigned memory usage (normalized).
    pub assigned_memory_usage: f64,
    /// Disk I/O time (seconds per second).
    pub disk_io_time: f64,
}

/// A process as the subject or object of a system event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    /// Process id.
    pub pid: u32,
    /// Path of the executable it was started from.
    pub exe: String,
}

/// What a system event does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// The subject started the object process.
    Start,
    /// The subject read the object file.
    Read,
    /// The subject wrote the object file.
    Write,
    /// The subject executed the object file.
    Execute,
    /// The subject connected to the object address.
    Connect,
}

/// What a system event acts on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Object {
    /// A file.
    File {
        /// Its path.
        path: String,
    },
    /// A process.
    Process {
        /// Process id.
        pid: u32,
        /// Its executable.
        exe: String,
    },
    /// A network endpoint.
    Network {
        /// IPv4 address.
        address: String,
        /// Port.
        port: u16,
    },
}

/// A system monitoring event (SAQL's subject–operation–object shape).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemEvent {
    /// The host (also the record key).
    pub host: String,
    /// When (event time, ms since the epoch).
    pub ts: i64,
    /// The acting process.
    pub subject: Process,
    /// What it did.
    pub op: Operation,
    /// To what.
    pub object: Object,
}

/// The detection that raised an alert.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// A machine's CPU or memory far from its baseline.
    MachineMetric,
    /// A task far from its job's median.
    OutlierTask,
    /// Write a file, start it, connect outside.
    DropperConnect,
    /// Read a sensitive file, connect outside.
    SecretExfiltration,
    /// Far more outbound connections than the host's baseline.
    ConnectionBurst,
}

/// An alert: the output value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    /// The detection.
    pub rule: Rule,
    /// What it is about: a machine, `job/task`, or a host (also the key).
    pub entity: String,
    /// Start of the window (ms), or the time of a sequence's first event.
    pub window_start: i64,
    /// End of the window (exclusive), or the time of a sequence's last event.
    pub window_end: i64,
    /// How far out it is, in the rule's deviations (sequences: 1).
    pub score: f64,
    /// The measurements or events behind it.
    pub evidence: Vec<serde_json::Value>,
    /// The event time of the alert (the record timestamp).
    pub event_time: i64,
}

impl Alert {
    /// What identifies one anomaly: rule, entity and window start.
    pub fn identity(&self) -> (Rule, String, i64) {
        (self.rule, self.entity.clone(), self.window_start)
    }
}

/// The checked parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Tumbling window size (ms) of every windowed detection.
    pub window_ms: i64,
    /// Weight of the newest window in the moving baselines (0 < α ≤ 1).
    pub baseline_alpha: f64,
    /// Windows a baseline learns before it may alert.
    pub warmup_windows: u32,
    /// Machine metric threshold (deviations).
    pub machine_k: f64,
    /// Smallest deviation of a machine baseline, as a fraction of its mean.
    pub machine_min_std_fraction: f64,
    /// Outlier threshold (× MAD).
    pub outlier_k: f64,
    /// Smallest MAD, as a fraction of the median.
    pub outlier_min_mad_fraction: f64,
    /// Jobs with fewer tasks in a window are not judged.
    pub outlier_min_tasks: usize,
    /// Windows after which an incomplete job window is judged anyway.
    pub outlier_grace_windows: i64,
    /// Span (ms) of a suspicious sequence.
    pub sequence_window_ms: i64,
    /// Address prefixes inside the datacenter.
    pub internal_prefixes: Vec<String>,
    /// Path prefixes of sensitive files.
    pub sensitive_paths: Vec<String>,
    /// Connection burst threshold (deviations).
    pub burst_k: f64,
    /// Smallest deviation of a connection baseline, as a fraction of its mean.
    pub burst_min_std_fraction: f64,
}

impl Settings {
    /// Parses `params`; a malformed value is an error naming the parameter.
    pub fn from_params(params: &Params) -> Result<Settings, TopologyError> {
        let list = |name: &str| -> Vec<String> {
            params
                .get(name)
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        };
        Ok(Settings {
            window_ms: positive(params, "window_ms")?,
            baseline_alpha: fraction(params, "baseline_alpha")?,
            warmup_windows: positive(params, "warmup_windows")? as u32,
            machine_k: number(params, "machine_k")?,
            machine_min_std_fraction: number(params, "machine_min_std_fraction")?,
            outlier_k: number(params, "outlier_k")?,
            outlier_min_mad_fraction: number(params, "outlier_min_mad_fraction")?,
            outlier_min_tasks: positive(params, "outlier_min_tasks")? as usize,
            outlier_grace_windows: positive(params, "outlier_grace_windows")?,
            sequence_window_ms: positive(params, "sequence_window_ms")?,
            internal_prefixes: list("internal_prefixes"),
            sensitive_paths: list("sensitive_paths"),
            burst_k: number(params, "burst_k")?,
            burst_min_std_fraction: number(params, "burst_min_std_fraction")?,
        })
    }

    /// The defaults.
    pub fn defaults() -> &'static Settings {
        static DEFAULTS: OnceLock<Settings> = OnceLock::new();
        DEFAULTS.get_or_init(|| {
            let params = DATACENTER_MONITOR
                .params(&Default::default())
                .expect("no parameters given");
            Settings::from_params(&params).expect("the defaults parse")
        })
    }

    /// Whether `address` is outside the datacenter.
    pub fn is_external(&self, address: &str) -> bool {
        !self
            .internal_prefixes
            .iter()
            .any(|p| address.starts_with(p.as_str()))
    }

    /// Whether `path` is a sensitive file.
    pub fn is_sensitive(&self, path: &str) -> bool {
        self.sensitive_paths
            .iter()
            .any(|p| path.starts_with(p.as_str()))
    }

    /// Start of the window holding `ts`.
    pub fn window_of(&self, ts: i64) -> i64 {
        ts - ts.rem_euclid(self.window_ms)
    }
}

fn invalid(name: &'static str, params: &Params, requirement: &'static str) -> TopologyError {
    TopologyError::InvalidParameter {
        name,
        value: params.get(name).to_string(),
        requirement,
    }
}

fn positive(params: &Params, name: &'static str) -> Result<i64, TopologyError> {
    params
        .get(name)
        .parse::<i64>()
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| invalid(name, params, "it must be a whole number > 0"))
}

fn number(params: &Params, name: &'static str) -> Result<f64, TopologyError> {
    params
        .get(name)
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| invalid(name, params, "it must be a number >= 0, e.g. 4.0"))
}

fn fraction(params: &Params, name: &'static str) -> Result<f64, TopologyError> {
    number(params, name)?;
    params
        .get(name)
        .parse::<f64>()
        .ok()
        .filter(|v| *v > 0.0 && *v <= 1.0)
        .ok_or_else(|| invalid(name, params, "it must be a number in (0, 1], e.g. 0.2"))
}

/// The registry entry.
pub const DATACENTER_MONITOR: ShippedTopology = ShippedTopology {
    name: "datacenter-monitor",
    description: "datacenter anomaly detection (SAQL-style): abnormal machine metrics, outlier \
                  tasks, suspicious event sequences and connection bursts, as JSON alerts",
    params: &[
        Param {
            name: "usage_topic",
            default: "task-usage",
            doc: "task usage samples (key: machine id, value: JSON TaskUsage)",
        },
        Param {
            name: "events_topic",
            default: "system-events",
            doc: "system events (key: host, value: JSON SystemEvent)",
        },
        Param {
            name: "alerts_topic",
            default: "alerts",
            doc: "alerts (key: entity, value: JSON Alert)",
        },
        Param {
            name: "window_ms",
            default: "60000",
            doc: "tumbling window of the windowed detections (ms)",
        },
        Param {
            name: "baseline_alpha",
            default: "0.2",
            doc: "weight of the newest window in the moving baselines",
        },
        Param {
            name: "warmup_windows",
            default: "5",
            doc: "windows a baseline learns before it may alert",
        },
        Param {
            name: "machine_k",
            default: "4",
            doc: "machine metric threshold in baseline deviations",
        },
        Param {
            name: "machine_min_std_fraction",
            default: "0.15",
            doc: "smallest machine baseline deviation, as a fraction of its mean",
        },
        Param {
            name: "outlier_k",
            default: "3",
            doc: "outlier-task threshold in median absolute deviations",
        },
        Param {
            name: "outlier_min_mad_fraction",
            default: "0.1",
            doc: "smallest MAD, as a fraction of the job's median",
        },
        Param {
            name: "outlier_min_tasks",
            default: "4",
            doc: "jobs with fewer tasks in a window are not judged",
        },
        Param {
            name: "outlier_grace_windows",
            default: "10",
            doc: "windows after which an incomplete job window is judged anyway",
        },
        Param {
            name: "sequence_window_ms",
            default: "300000",
            doc: "span of a suspicious event sequence (ms)",
        },
        Param {
            name: "internal_prefixes",
            default: "10.,192.168.,127.",
            doc: "comma-separated address prefixes inside the datacenter",
        },
        Param {
            name: "sensitive_paths",
            default: "/etc/shadow,/root/.ssh/,/etc/kubernetes/pki/",
            doc: "comma-separated path prefixes of sensitive files",
        },
        Param {
            name: "burst_k",
            default: "5",
            doc: "connection burst threshold in baseline deviations",
        },
        Param {
            name: "burst_min_std_fraction",
            default: "0.5",
            doc: "smallest connection baseline deviation, as a fraction of its mean",
        },
    ],
    input_params: &["usage_topic", "events_topic"],
    output_params: &["alerts_topic"],
    build,
    sample: generate::sample,
    dataset: Some(&generate::SAMPLE_DATASET),
};

/// Builds the datacenter-monitor topology.
///
/// ```
/// let t = weir::topologies::find("datacenter-monitor").unwrap();
/// let params = t.params(&Default::default()).unwrap();
/// let topology = weir::topologies::datacenter_monitor::build(&params).unwrap();
/// // usage by machine → repartition by job; events by host
/// assert_eq!(topology.subtopology_count(), 3);
/// ```
pub fn build(params: &Params) -> Result<Topology, TopologyError> {
    let settings = Settings::from_params(params)?;
    let builder = StreamsBuilder::new();
    builder.add_key_value_store(
        Materialized::<String, machines::MachineState>::as_(MACHINE_STORE)
            .with_key_serde(StringSerde)
            .with_value_serde(JsonSerde::new()),
    );
    builder.add_key_value_store(
        Materialized::<String, jobs::JobState>::as_(JOB_STORE)
            .with_key_serde(StringSerde)
            .with_value_serde(JsonSerde::new()),
    );
    builder.add_key_value_store(
        Materialized::<String, hosts::SequenceState>::as_(SEQUENCE_STORE)
            .with_key_serde(StringSerde)
            .with_value_serde(JsonSerde::new()),
    );
    builder.add_key_value_store(
        Materialized::<String, hosts::BurstState>::as_(CONNECTION_STORE)
            .with_key_serde(StringSerde)
            .with_value_serde(JsonSerde::new()),
    );

    let usage = builder.stream::<String, TaskUsage>(
        params.get("usage_topic"),
        Consumed::with(StringSerde, JsonSerde::new())
            .with_timestamp_extractor(ValueTimestamp::new(|u: &TaskUsage| u.start_time)),
    );
    let s = settings.clone();
    let per_machine = usage.process(
        move || machines::MachineMonitor::new(s.clone()),
        &[MACHINE_STORE],
    );
    let machine_alerts =
        per_machine.flat_map(|key: String, out: machines::MachineOutput| match out {
            machines::MachineOutput::Alert(a) => Some((key, a)),
            machines::MachineOutput::TaskMean(_) => None,
        });
    let s = settings.clone();
    let outlier_alerts = per_machine
        .flat_map(|_, out: machines::MachineOutput| match out {
            machines::MachineOutput::TaskMean(m) => Some((m.job_id.clone(), m)),
            machines::MachineOutput::Alert(_) => None,
        })
        .repartition(
            Repartitioned::as_("usage-by-job")
                .with_key_serde(StringSerde)
                .with_value_serde(JsonSerde::new()),
        )
        .process(move || jobs::JobOutliers::new(s.clone()), &[JOB_STORE]);

    let events = builder.stream::<String, SystemEvent>(
        params.get("events_topic"),
        Consumed::with(StringSerde, JsonSerde::new())
            .with_timestamp_extractor(ValueTimestamp::new(|e: &SystemEvent| e.ts)),
    );
    let s = settings.clone();
    let sequence_alerts = events.process(
        move || hosts::SequenceDetector::new(s.clone()),
        &[SEQUENCE_STORE],
    );
    let s = settings;
    let burst_alerts = events.process(
        move || hosts::BurstDetector::new(s.clone()),
        &[CONNECTION_STORE],
    );

    // Each detection writes to the alerts topic itself: merging them first
    // would join the usage, job and event paths into one sub-topology (and
    // require the input topics to be co-partitioned).
    let alerts_topic = params.get("alerts_topic");
    let produced = || Produced::with(StringSerde, JsonSerde::<Alert>::new());
    machine_alerts.to(alerts_topic, produced());
    outlier_alerts.to(alerts_topic, produced());
    sequence_alerts.to(alerts_topic, produced());
    burst_alerts.to(alerts_topic, produced());
    builder.build()
}
