//! The topology under construction (Kafka Streams'
//! `InternalTopologyBuilder`): the nodes and stores DSL calls add, name
//! generation, serde resolution, and `build`, which validates the result and
//! splits it into sub-topologies.
//!
//! The state is shared (`Rc<RefCell<_>>`, [`Shared`]) by the
//! [`StreamsBuilder`](super::StreamsBuilder) and every
//! `KStream`/`KTable`/grouped handle made from it, so handles can be used in
//! any order; it is single-threaded and lives only while the topology is
//! described. Errors in DSL calls (a missing serde, a duplicate name) are
//! recorded and reported by `build`, so the DSL methods stay infallible.

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;
use std::sync::Arc;

use crate::processor::node::{ErasedNode, SinkNode, SourceNode};
use crate::processor::{OutputKind, StoreSerdes};
use crate::serdes::{Serde, SerdeError, SerdeRegistry, SharedSerde, short_type_name};
use crate::time::RecordTimestamp;

use super::{
    Data, NodeBuildContext, NodeDef, NodeFactory, NodeKind, StoreDef, SubtopologyDef, TopicName,
    Topology, TopologyError,
};

/// A node while the topology is being built; the factory may come later (`split`).
pub(crate) struct PendingNode {
    pub(crate) name: String,
    pub(crate) kind: NodeKind,
    pub(crate) parents: Vec<usize>,
    pub(crate) children: Vec<usize>,
    pub(crate) stores: Vec<usize>,
    pub(crate) factory: Option<NodeFactory>,
}

pub(crate) struct BuilderInner {
    pub(crate) nodes: Vec<PendingNode>,
    pub(crate) stores: Vec<StoreDef>,
    counter: u32,
    pub(crate) serdes: SerdeRegistry,
    errors: Vec<TopologyError>,
    names: HashSet<String>,
    /// Late-records topics of windowed aggregations (user topics).
    pub(crate) late_topics: Vec<String>,
    globals: Vec<super::graph::GlobalDef>,
}

pub(crate) type Shared = Rc<RefCell<BuilderInner>>;

/// Placeholder for a serde that could not be resolved; `build` fails before
/// it could ever run.
struct MissingSerde;

impl<T: 'static> Serde<T> for MissingSerde {
    fn serialize(&self, _topic: &str, _data: &T, _out: &mut Vec<u8>) -> Result<(), SerdeError> {
        Err(SerdeError::Null {
            type_name: short_type_name::<T>(),
        })
    }
    fn deserialize(&self, _topic: &str, _data: &[u8]) -> Result<T, SerdeError> {
        Err(SerdeError::Null {
            type_name: short_type_name::<T>(),
        })
    }
}

impl BuilderInner {
    /// An empty builder whose default serdes come from `serdes`.
    pub(crate) fn new(serdes: SerdeRegistry) -> Self {
        BuilderInner {
            nodes: Vec::new(),
            stores: Vec::new(),
            counter: 0,
            serdes,
            errors: Vec::new(),
            late_topics: Vec::new(),
            names: HashSet::new(),
            globals: Vec::new(),
        }
    }

    /// The next generated name with `prefix` (`KSTREAM-FILTER-` → `KSTREAM-FILTER-0000000003`).
    pub(crate) fn generate(&mut self, prefix: &str) -> String {
        let name = format!("{prefix}{:010}", self.counter);
        self.counter += 1;
        name
    }

    /// `given`, or a generated name.
    pub(crate) fn name_or(&mut self, given: Option<String>, prefix: &str) -> String {
        match given {
            Some(n) => n,
            None => self.generate(prefix),
        }
    }

    fn claim(&mut self, name: &str) {
        if !self.names.insert(name.to_owned()) {
            self.errors
                .push(TopologyError::DuplicateName(name.to_owned()));
        }
    }

    pub(crate) fn error(&mut self, error: TopologyError) {
        self.errors.push(error);
    }

    /// Adds a node below `parents`.
    pub(crate) fn add_node(
        &mut self,
        name: String,
        kind: NodeKind,
        parents: &[usize],
        factory: Option<NodeFactory>,
    ) -> usize {
        self.claim(&name);
        let index = self.nodes.len();
        for &p in parents {
            self.nodes[p].children.push(index);
        }
        self.nodes.push(PendingNode {
            name,
            kind,
            parents: parents.to_vec(),
            children: Vec::new(),
            stores: Vec::new(),
            factory,
        });
        index
    }

    /// Adds a processor node made by `make` below `parent`.
    pub(crate) fn add_processor(
        &mut self,
        name: String,
        parents: &[usize],
        make: impl Fn() -> Box<dyn ErasedNode> + Send + Sync + 'static,
    ) -> usize {
        let factory: NodeFactory = Arc::new(move |_: &NodeBuildContext<'_>| make());
        self.add_node(name, NodeKind::Processor, parents, Some(factory))
    }

    /// Adds a key-value store definition; returns its index.
    pub(crate) fn add_store(&mut self, name: String, logging: bool, serdes: StoreSerdes) -> usize {
        self.add_store_def(StoreDef::key_value(name, serdes).logged(logging))
    }

    /// Adds a store definition of any kind; returns its index.
    pub(crate) fn add_store_def(&mut self, def: StoreDef) -> usize {
        self.claim(&def.name);
        self.stores.push(def);
        self.stores.len() - 1
    }

    /// Adds a global table (claims its store name).
    pub(crate) fn add_global(&mut self, global: super::graph::GlobalDef) {
        self.claim(&global.store);
        self.globals.push(global);
    }

    pub(crate) fn connect_store(&mut self, node: usize, store: usize) {
        if !self.nodes[node].stores.contains(&store) {
            self.nodes[node].stores.push(store);
        }
    }

    pub(crate) fn store_index(&self, name: &str) -> Option<usize> {
        self.stores.iter().position(|s| s.name == name)
    }

    /// `explicit`, else `upstream`, else the registered default for `T`;
    /// records an error naming `node` when there is none.
    pub(crate) fn serde<T: 'static>(
        &mut self,
        explicit: Option<SharedSerde<T>>,
        upstream: Option<SharedSerde<T>>,
        node: &str,
        what: &'static str,
    ) -> SharedSerde<T> {
        if let Some(s) = explicit.or(upstream).or_else(|| self.serdes.get::<T>()) {
            return s;
        }
        self.errors.push(TopologyError::MissingSerde {
            node: node.to_owned(),
            what,
            type_name: short_type_name::<T>(),
        });
        Arc::new(MissingSerde)
    }

    /// Adds a sink node writing to `topic`.
    pub(crate) fn add_sink<K: 'static, V: 'static>(
        &mut self,
        name: String,
        parent: usize,
        topic: TopicName,
        key_serde: SharedSerde<K>,
        value_serde: SharedSerde<V>,
        partitioner: Option<Arc<dyn super::StreamPartitioner<K, V>>>,
    ) -> usize {
        let kind = if topic.is_internal() {
            OutputKind::Repartition
        } else {
            OutputKind::Sink
        };
        let topic_for_factory = topic.clone();
        let factory: NodeFactory =
            Arc::new(move |ctx: &NodeBuildContext<'_>| -> Box<dyn ErasedNode> {
                Box::new(SinkNode {
                    topic: topic_for_factory.resolve(ctx.application_id),
                    kind,
                    key_serde: key_serde.clone(),
                    value_serde: value_serde.clone(),
                    partitioner: partitioner.clone(),
                    key_buf: Vec::new(),
                    value_buf: Vec::new(),
                })
            });
        self.add_node(name, NodeKind::Sink { topic }, &[parent], Some(factory))
    }

    /// Adds a source node reading `topics`.
    pub(crate) fn add_source<K: Data, V: Data>(
        &mut self,
        name: String,
        topics: Vec<TopicName>,
        key_serde: SharedSerde<K>,
        value_serde: SharedSerde<V>,
        extractor: Arc<dyn crate::time::TimestampExtractor<K, V>>,
    ) -> usize {
        let factory: NodeFactory =
            Arc::new(move |_: &NodeBuildContext<'_>| -> Box<dyn ErasedNode> {
                Box::new(SourceNode {
                    key_serde: key_serde.clone(),
                    value_serde: value_serde.clone(),
                    extractor: extractor.clone(),
                })
            });
        self.add_node(name, NodeKind::Source { topics }, &[], Some(factory))
    }

    /// Inserts `sink → <base>-repartition → source` below `parent`; returns the new source.
    pub(crate) fn add_repartition<K: Data, V: Data>(
        &mut self,
        parent: usize,
        base: &str,
        key_serde: SharedSerde<K>,
        value_serde: SharedSerde<V>,
    ) -> usize {
        let topic = TopicName::Repartition(format!("{base}-repartition"));
        self.add_sink(
            format!("{base}-repartition-sink"),
            parent,
            topic.clone(),
            key_serde.clone(),
            value_serde.clone(),
            None,
        );
        // The sink wrote the extracted timestamp as the record timestamp.
        self.add_source(
            format!("{base}-repartition-source"),
            vec![topic],
            key_serde,
            value_serde,
            Arc::new(RecordTimestamp),
        )
    }

    /// Finishes the topology: validates it and splits it into sub-topologies.
    pub(crate) fn build(&mut self) -> Result<Topology, TopologyError> {
        let b = self;
        if let Some(e) = b.errors.first() {
            return Err(e.clone());
        }
        if !b
            .nodes
            .iter()
            .any(|n| matches!(n.kind, NodeKind::Source { .. }))
            && b.globals.is_empty()
        {
            return Err(TopologyError::Empty);
        }
        let mut nodes = Vec::with_capacity(b.nodes.len());
        for n in &b.nodes {
            let Some(factory) = n.factory.clone() else {
                return Err(TopologyError::UnfinishedSplit(n.name.clone()));
            };
            nodes.push(NodeDef {
                name: n.name.clone(),
                kind: n.kind.clone(),
                parents: n.parents.clone(),
                children: n.children.clone(),
                stores: n.stores.clone(),
                factory,
            });
        }
        let stores = std::mem::take(&mut b.stores);
        // Keep the builder usable (build twice gives the same topology).
        b.stores = stores.clone();
        let subtopologies = split_subtopologies(&nodes, stores.len());
        let mut late_topics = b.late_topics.clone();
        late_topics.sort();
        late_topics.dedup();
        Ok(Topology {
            nodes,
            stores,
            subtopologies,
            late_topics,
            globals: b.globals.clone(),
        })
    }
}

/// Connected components of the graph (edges, plus nodes sharing a store),
/// numbered by their first node.
fn split_subtopologies(nodes: &[NodeDef], store_count: usize) -> Vec<SubtopologyDef> {
    let mut parent: Vec<usize> = (0..nodes.len()).collect();
    fn find(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    fn union(parent: &mut [usize], a: usize, b: usize) {
        let (ra, rb) = (find(parent, a), find(parent, b));
        if ra != rb {
            parent[ra.max(rb)] = ra.min(rb);
        }
    }
    let mut store_owner: Vec<Option<usize>> = vec![None; store_count];
    for (i, n) in nodes.iter().enumerate() {
        for &c in &n.children {
            union(&mut parent, i, c);
        }
        for &s in &n.stores {
            match store_owner[s] {
                Some(o) => union(&mut parent, i, o),
                None => store_owner[s] = Some(i),
            }
        }
    }
    let mut roots: Vec<usize> = Vec::new();
    let mut subs: Vec<SubtopologyDef> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let root = find(&mut parent, i);
        let sub = match roots.iter().position(|&r| r == root) {
            Some(p) => p,
            None => {
                roots.push(root);
                subs.push(SubtopologyDef {
                    nodes: Vec::new(),
                    stores: Vec::new(),
                });
                subs.len() - 1
            }
        };
        subs[sub].nodes.push(i);
        for &s in &n.stores {
            if !subs[sub].stores.contains(&s) {
                subs[sub].stores.push(s);
            }
        }
    }
    subs
}
