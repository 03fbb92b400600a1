//! The plain data types of a task: its id, its input, settings, state and counters.

use crate::handler::ErrorHandling;
use crate::processor::Headers;

/// Identifies a task: sub-topology and partition. Displayed as `0_3` like Kafka Streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId {
    /// The sub-topology.
    pub subtopology: u32,
    /// The input partition.
    pub partition: i32,
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}_{}", self.subtopology, self.partition)
    }
}

/// A consumed record as the task receives it. Bytes are borrowed from the
/// consumer's message.
#[derive(Clone, Copy, Debug)]
pub struct InputRecord<'a> {
    /// Full topic name.
    pub topic: &'a str,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Kafka record timestamp (ms).
    pub timestamp: i64,
    /// Record headers.
    pub headers: &'a Headers,
    /// Key bytes; `None` is a null key.
    pub key: Option<&'a [u8]>,
    /// Value bytes; `None` is a null value.
    pub value: Option<&'a [u8]>,
}

/// Per-task settings the runtime or driver passes in.
#[derive(Clone, Debug)]
pub struct TaskConfig {
    /// The application id: prefix of internal topic names.
    pub application_id: String,
    /// Handler for undecodable records and invalid timestamps.
    pub deserialization_handler: ErrorHandling,
    /// Handler for errors while processing and punctuating.
    pub processing_handler: ErrorHandling,
    /// The application's loaded global tables (empty when it has none).
    pub globals: crate::topology::GlobalStores,
    /// The record cache shared by the instance's aggregations (see
    /// [`crate::state::CacheBudget`]); updates held there go downstream and
    /// to the changelog at [`TaskInstance::flush`](super::TaskInstance::flush)
    /// or when the budget is full.
    pub cache: std::sync::Arc<crate::state::CacheBudget>,
    /// Load shedding of the source topics' records, when on (see
    /// `processor::task::shed`).
    pub shedding: Option<Shedding>,
    /// The instance's shedding decisions since each task's last commit
    /// (see `processor::task::shed`), shared by its tasks.
    pub shed_memo: std::sync::Arc<ShedMemo>,
}

impl TaskConfig {
    /// Settings with the default handlers (`LogAndFail`) and no record
    /// cache (every update goes downstream at once).
    pub fn new(application_id: impl Into<String>) -> Self {
        TaskConfig {
            application_id: application_id.into(),
            deserialization_handler: ErrorHandling::LogAndFail,
            processing_handler: ErrorHandling::LogAndFail,
            globals: Default::default(),
            cache: Default::default(),
            shedding: None,
            shed_memo: Default::default(),
        }
    }
}

/// The task's lifecycle state; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    /// Built, stores open, processors not initialized.
    Created,
    /// Processing.
    Running,
    /// Closed; no further calls.
    Closed,
}

/// Counters of one task. Read them once per batch, not per record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskMetrics {
    /// Input records processed to completion.
    pub processed: u64,
    /// Records skipped by `LogAndContinue` for deserialization errors or invalid timestamps.
    pub skipped_deserialization: u64,
    /// Records (or punctuations) skipped by `LogAndContinue`/`DeadLetter` for processing errors.
    pub skipped_processing: u64,
    /// Records written to a dead-letter topic.
    pub dead_lettered: u64,
    /// Punctuator invocations.
    pub punctuations: u64,
    /// Records dropped by windowed operations because they arrived after
    /// their window closed (stream time past window end + grace).
    pub late_dropped: u64,
    /// Records shed by load shedding (see `processor::task::shed`).
    pub shed: u64,
}

/// What one processor node of a task did since the task opened (see
/// [`super::TaskInstance::node_metrics`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodeMetrics<'a> {
    /// The node's name in the topology.
    pub name: &'a str,
    /// Records it took.
    pub records: u64,
    /// Time spent in the node itself (children excluded), estimated from
    /// one record in [`super::NODE_SAMPLE`].
    pub busy_seconds: f64,
}

/// Which records are shed first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShedPolicy {
    /// A uniform sample, chosen by a hash of the record's coordinates.
    Sample,
    /// Lowest priority first: the JSON value's numeric `field`, 0 to 9.
    Priority {
        /// The field of the JSON value that holds the priority.
        field: String,
    },
}

/// Load shedding settings (`shed_max_lag_ms`, `shed_policy`, `shed_topic`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shedding {
    /// The bound on a record's lag (wall clock − timestamp), in ms, above
    /// which shedding starts.
    pub max_lag_ms: i64,
    /// Which records go first.
    pub policy: ShedPolicy,
    /// Where shed records are written, if anywhere (the topic must exist).
    pub topic: Option<String>,
}

impl std::str::FromStr for ShedPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "sample" => Ok(ShedPolicy::Sample),
            other => match other.strip_prefix("priority:") {
                Some(field) if !field.is_empty() => Ok(ShedPolicy::Priority {
                    field: field.to_string(),
                }),
                _ => Err(format!(
                    "'{s}' is not a shedding policy; use sample or priority:<json field>"
                )),
            },
        }
    }
}

/// The shedding decisions of each task since its last commit, and its
/// level (see `processor::task::shed`). One per instance, shared by its tasks
/// through [`TaskConfig::shed_memo`].
#[derive(Debug, Default)]
pub struct ShedMemo {
    tasks: std::sync::Mutex<std::collections::HashMap<TaskId, TaskMemo>>,
}

#[derive(Debug, Default)]
struct TaskMemo {
    level: f64,
    /// Per (topic, partition): the last offset decided and the offsets
    /// shed up to it.
    decided: std::collections::HashMap<(String, i32), (i64, std::collections::BTreeSet<i64>)>,
}

impl ShedMemo {
    fn with<T>(&self, task: TaskId, f: impl FnOnce(&mut TaskMemo) -> T) -> T {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        f(tasks.entry(task).or_default())
    }

    /// The decision made for `input` since the task's last commit, if any:
    /// `true` when it was shed.
    pub(crate) fn recall(&self, task: TaskId, input: &InputRecord<'_>) -> Option<bool> {
        self.with(task, |m| {
            let (last, shed) = m.decided.get(&(input.topic.to_string(), input.partition))?;
            (input.offset <= *last).then(|| shed.contains(&input.offset))
        })
    }

    /// Notes the decision for `input` and the level after it.
    pub(crate) fn note(&self, task: TaskId, input: &InputRecord<'_>, shed: bool, level: f64) {
        self.with(task, |m| {
            m.level = level;
            let entry = m
                .decided
                .entry((input.topic.to_string(), input.partition))
                .or_insert_with(|| (input.offset, std::collections::BTreeSet::new()));
            entry.0 = entry.0.max(input.offset);
            if shed {
                entry.1.insert(input.offset);
            }
        })
    }

    /// The task's last level (0 for a task not seen).
    pub(crate) fn level(&self, task: TaskId) -> f64 {
        self.with(task, |m| m.level)
    }

    /// The task committed: its decisions are final and forgotten.
    pub(crate) fn committed(&self, task: TaskId) {
        self.with(task, |m| m.decided.clear())
    }
}
