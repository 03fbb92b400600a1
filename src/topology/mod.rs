//! Topologies: the DSL that builds them and the data they are.
//!
//! A [`Topology`] is plain data produced by [`StreamsBuilder::build`]:
//!
//! * **nodes** — sources (topics → typed records), processors, sinks — with
//!   their edges, connected stores, and a *supplier* that makes one node
//!   instance per task;
//! * **stores** — name, kind, serdes, whether logged (the backend is chosen
//!   when a task is built, by its [`crate::processor::StoreProvider`]);
//! * **sub-topologies** — the connected components of the graph, where nodes
//!   sharing a store are connected and a repartition topic (a sink in one
//!   component, a source in another) separates components.
//!
//! A task ([`crate::processor::TaskInstance`]) is one sub-topology on one partition.
//!
//! # Repartitioning
//!
//! A key-changing operation (`map`, `flat_map`, `select_key`, `group_by`)
//! marks the stream as *repartition required*. When such a stream is grouped
//! and aggregated (or [`KStream::repartition`] is called) the builder inserts a
//! sink to the internal topic `<application_id>-<name>-repartition` and a new
//! source reading it, so all records of a key meet in one task. `<name>` is the
//! `Grouped` name, else the store name, else the generated store name.
//!
//! # Names
//!
//! Unnamed nodes and stores get Kafka Streams-style generated names
//! (`KSTREAM-FILTER-0000000003`): a prefix and a counter incremented by every
//! generated name in call order. The same builder code therefore yields the
//! same names on every run, which keeps store, changelog and repartition topic
//! names stable across deployments. Name a node with `.named("...")` before
//! the operation; name a store with [`Materialized::as_`].
//!
//! ```
//! use weir::topology::{Consumed, Materialized, Produced, StreamsBuilder};
//!
//! let builder = StreamsBuilder::new();
//! builder
//!     .stream::<(), String>("text", Consumed::new())
//!     .flat_map_values(|line: String| {
//!         line.split_whitespace().map(str::to_lowercase).collect::<Vec<_>>()
//!     })
//!     .group_by(|_, word: &String| word.clone(), Default::default())
//!     .count(Materialized::as_("counts"))
//!     .to_stream()
//!     .to("word-counts", Produced::new());
//! let topology = builder.build().unwrap();
//! assert_eq!(topology.subtopology_count(), 2);
//! ```

mod builder;
mod describe;
mod global;
mod grouped;
mod join;
mod kstream;
mod ktable;
mod options;
mod split;
mod windowed;

pub use builder::StreamsBuilder;
pub use describe::{
    NodeDescription, NodeKindDescription, SubtopologyDescription, TopologyDescription,
};
pub use global::{GlobalKTable, GlobalStore, GlobalStores};
pub use grouped::KGroupedStream;
pub use join::{JoinWindows, Joined, ListSerde};
pub use kstream::KStream;
pub use ktable::KTable;
pub use options::{Consumed, Grouped, Materialized, Produced, Repartitioned};
pub use split::BranchedKStream;
pub use windowed::{SessionWindowedKStream, TimeWindowedKStream};

use std::sync::Arc;

use crate::processor::node::ErasedNode;
use crate::processor::{Retention, StoreKind, StoreSerdes};

/// Marker for types that can flow through a topology: cloned when a record
/// is forwarded to several children.
pub trait Data: Clone + 'static {}
impl<T: Clone + 'static> Data for T {}

/// Chooses the partition of an output record (Kafka Streams' `StreamPartitioner`).
/// `None` leaves the choice to the producer's key hash.
pub trait StreamPartitioner<K, V>: Send + Sync + 'static {
    /// The partition in `0..num_partitions` for this record, or `None`.
    fn partition(&self, topic: &str, key: &K, value: &V, num_partitions: i32) -> Option<i32>;
}

impl<K, V, F> StreamPartitioner<K, V> for F
where
    F: Fn(&str, &K, &V, i32) -> Option<i32> + Send + Sync + 'static,
{
    fn partition(&self, topic: &str, key: &K, value: &V, num_partitions: i32) -> Option<i32> {
        self(topic, key, value, num_partitions)
    }
}

/// Why a topology could not be built. Raised by [`StreamsBuilder::build`].
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum TopologyError {
    /// No serde was given for a key or value and none is registered for its type.
    #[error(
        "{node}: no {what} serde for type {type_name}; pass one (Consumed/Produced/Grouped/Materialized) or register a default in the builder's SerdeRegistry"
    )]
    MissingSerde {
        /// The node or store needing it.
        node: String,
        /// "key" or "value".
        what: &'static str,
        /// The Rust type.
        type_name: &'static str,
    },
    /// A windowed aggregation was configured inconsistently.
    #[error("windowed aggregation '{store}': {source}")]
    Window {
        /// The aggregation's store.
        store: String,
        /// What is wrong.
        #[source]
        source: crate::windows::WindowError,
    },
    /// Two processors or two stores have the same name.
    #[error(
        "the name '{0}' is used twice; processor and store names must be unique within a topology"
    )]
    DuplicateName(String),
    /// A processor was connected to a store that was not added.
    #[error(
        "processor '{processor}' uses store '{store}', which was not added; call add_key_value_store first"
    )]
    UnknownStore {
        /// The processor.
        processor: String,
        /// The missing store.
        store: String,
    },
    /// A store added for the Processor API has no name.
    #[error("a store added with add_key_value_store needs a name: use Materialized::as_(\"name\")")]
    UnnamedStore,
    /// `split()` was not finished with `default_branch` or `no_default_branch`.
    #[error(
        "split node '{0}' was never finished; end the chain with default_branch(..) or no_default_branch()"
    )]
    UnfinishedSplit(String),
    /// The topology has no source.
    #[error("the topology has no source; add one with StreamsBuilder::stream or ::table")]
    Empty,
    /// A parameter of a shipped topology has a value it cannot use.
    #[error("config key 'topology.{name}' = '{value}': {requirement}")]
    InvalidParameter {
        /// The parameter.
        name: &'static str,
        /// The value given.
        value: String,
        /// What it must be.
        requirement: &'static str,
    },
}

/// A topic as the topology names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TopicName {
    /// A user topic, used as is.
    User(String),
    /// An internal repartition topic `<name>` (ending in `-repartition`),
    /// created and prefixed with `<application_id>-` by the runtime.
    Repartition(String),
}

impl TopicName {
    /// The name as described (repartition topics without the application id).
    pub fn name(&self) -> &str {
        match self {
            TopicName::User(n) | TopicName::Repartition(n) => n,
        }
    }

    /// The full Kafka topic name for `application_id`.
    pub fn resolve(&self, application_id: &str) -> String {
        match self {
            TopicName::User(n) => n.clone(),
            TopicName::Repartition(n) => format!("{application_id}-{n}"),
        }
    }

    /// Whether this is an internal repartition topic.
    pub fn is_internal(&self) -> bool {
        matches!(self, TopicName::Repartition(_))
    }
}

/// What a node of the topology is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NodeKind {
    Source { topics: Vec<TopicName> },
    Processor,
    Sink { topic: TopicName },
}

/// Arguments for making a node instance for a task.
pub(crate) struct NodeBuildContext<'a> {
    pub(crate) application_id: &'a str,
    /// The loaded global stores (read by stream–global-table joins).
    pub(crate) globals: &'a GlobalStores,
}

pub(crate) type NodeFactory =
    Arc<dyn Fn(&NodeBuildContext<'_>) -> Box<dyn ErasedNode> + Send + Sync>;

pub(crate) struct NodeDef {
    pub(crate) name: String,
    pub(crate) kind: NodeKind,
    pub(crate) parents: Vec<usize>,
    pub(crate) children: Vec<usize>,
    pub(crate) stores: Vec<usize>,
    pub(crate) factory: NodeFactory,
}

impl NodeDef {
    pub(crate) fn source_topics(&self) -> &[TopicName] {
        match &self.kind {
            NodeKind::Source { topics } => topics,
            _ => &[],
        }
    }
}

#[derive(Clone)]
pub(crate) struct StoreDef {
    pub(crate) name: String,
    pub(crate) kind: StoreKind,
    /// `Some` exactly for window and session stores.
    pub(crate) retention: Option<Retention>,
    pub(crate) logging: bool,
    pub(crate) serdes: StoreSerdes,
}

impl StoreDef {
    /// A key-value store, logged.
    pub(crate) fn key_value(name: String, serdes: StoreSerdes) -> Self {
        StoreDef {
            name,
            kind: StoreKind::KeyValue,
            retention: None,
            logging: true,
            serdes,
        }
    }

    /// A window or session store keeping entries `retention_ms`, logged;
    /// segments of half the retention (as Kafka Streams, so expiry drops
    /// whole segments at most half a retention late).
    pub(crate) fn timed(
        name: String,
        kind: StoreKind,
        retention_ms: i64,
        serdes: StoreSerdes,
    ) -> Self {
        debug_assert!(
            kind != StoreKind::KeyValue,
            "a key-value store has no retention"
        );
        StoreDef {
            name,
            kind,
            retention: Some(Retention {
                retention_ms,
                segment_interval_ms: crate::windows::segment_interval(retention_ms),
            }),
            logging: true,
            serdes,
        }
    }

    /// With changelog logging on or off.
    pub(crate) fn logged(mut self, logging: bool) -> Self {
        self.logging = logging;
        self
    }

    pub(crate) fn changelog_topic(&self, application_id: &str) -> String {
        format!("{application_id}-{}-changelog", self.name)
    }
}

pub(crate) struct SubtopologyDef {
    /// Global node indices, in creation (= topological) order.
    pub(crate) nodes: Vec<usize>,
    /// Global store indices.
    pub(crate) stores: Vec<usize>,
}

/// A built topology: immutable data shared (in an `Arc`) by all tasks. See the module docs.
pub struct Topology {
    pub(crate) nodes: Vec<NodeDef>,
    pub(crate) stores: Vec<StoreDef>,
    pub(crate) subtopologies: Vec<SubtopologyDef>,
    pub(crate) late_topics: Vec<String>,
    /// Global tables: outside every sub-topology, loaded by the runner.
    pub(crate) globals: Vec<global::GlobalDef>,
}

impl Topology {
    /// The number of sub-topologies; tasks are `(0..count) × partitions`.
    pub fn subtopology_count(&self) -> u32 {
        self.subtopologies.len() as u32
    }

    /// The topics sub-topology `subtopology` reads, as full names for `application_id`.
    pub fn source_topics(&self, subtopology: u32, application_id: &str) -> Vec<String> {
        let Some(sub) = self.subtopologies.get(subtopology as usize) else {
            return Vec::new();
        };
        sub.nodes
            .iter()
            .flat_map(|&n| self.nodes[n].source_topics())
            .map(|t| t.resolve(application_id))
            .collect()
    }

    /// Every internal repartition topic, as full names for `application_id`.
    pub fn repartition_topics(&self, application_id: &str) -> Vec<String> {
        let mut topics: Vec<String> = self
            .nodes
            .iter()
            .filter_map(|n| match &n.kind {
                NodeKind::Sink { topic } if topic.is_internal() => {
                    Some(topic.resolve(application_id))
                }
                _ => None,
            })
            .collect();
        topics.sort();
        topics.dedup();
        topics
    }

    /// `(store, changelog topic)` of every logged store, for `application_id`.
    pub fn changelog_topics(&self, application_id: &str) -> Vec<(String, String)> {
        self.stores
            .iter()
            .filter(|s| s.logging)
            .map(|s| (s.name.clone(), s.changelog_topic(application_id)))
            .collect()
    }

    /// The late-records topics of windowed aggregations
    /// (`late_records_to`), sorted; the runtime creates missing ones.
    pub fn late_topics(&self) -> &[String] {
        &self.late_topics
    }

    /// `(changelog topic, store retention in ms)` of every logged window or
    /// session store.
    pub fn changelog_retention_ms(&self, application_id: &str) -> Vec<(String, i64)> {
        self.stores
            .iter()
            .filter(|s| s.logging)
            .filter_map(|s| {
                let retention = s.retention?;
                Some((s.changelog_topic(application_id), retention.retention_ms))
            })
            .collect()
    }

    /// The sub-topology that owns store `store`.
    pub fn subtopology_of_store(&self, store: &str) -> Option<u32> {
        let index = self.stores.iter().position(|s| s.name == store)?;
        self.subtopologies
            .iter()
            .position(|sub| sub.stores.contains(&index))
            .map(|i| i as u32)
    }

    /// `(store, source topic)` of every global table.
    pub fn global_topics(&self) -> Vec<(String, String)> {
        self.globals
            .iter()
            .map(|g| (g.store.clone(), g.topic.clone()))
            .collect()
    }

    /// The names of all stores.
    pub fn store_names(&self) -> impl Iterator<Item = &str> {
        self.stores.iter().map(|s| s.name.as_str())
    }
}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.describe())
    }
}
