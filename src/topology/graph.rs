//! The built topology: the plain data [`super::StreamsBuilder::build`]
//! produces and every task of the application shares (see the module docs
//! of [`super`]): node definitions with their edges, stores and node
//! factories, store definitions, sub-topologies and global tables.
//!
//! This module sits below both the DSL (which builds it) and the task
//! (which instantiates it): it depends on the processor layer's call frame
//! (the erased node a factory makes) and store serdes only, never on the
//! DSL or on `TaskInstance`.

use std::sync::Arc;

use crate::processor::node::ErasedNode;
use crate::processor::{Retention, StoreKind, StoreSerdes};

use super::global_store::GlobalStores;

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
    pub(crate) globals: Vec<GlobalDef>,
}

impl Topology {
    /// The number of sub-topologies; tasks are `(0..count) × partitions`.
    pub fn subtopology_count(&self) -> u32 {
        self.subtopologies.len() as u32
    }

    /// The sub-topologies with a logged store (the ones standby replicas
    /// follow).
    pub(crate) fn logged_subtopologies(&self) -> std::collections::BTreeSet<u32> {
        self.subtopologies
            .iter()
            .enumerate()
            .filter(|(_, sub)| sub.stores.iter().any(|&s| self.stores[s].logging))
            .map(|(i, _)| i as u32)
            .collect()
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

/// A global table of a topology: its store and source topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GlobalDef {
    pub(crate) store: String,
    pub(crate) topic: String,
}
