//! [`BranchedKStream`]: `split()` routes each record to exactly one branch.
//!
//! The split node evaluates the branch predicates in the order the branches
//! were added and forwards the record to the first that holds; if none holds
//! it goes to the default branch, or is dropped when there is none. Each
//! branch is a pass-through child node named `<split name><branch name>`.

use std::collections::HashMap;
use std::sync::Arc;

use crate::processor::node::fn_node;
use crate::processor::{ProcessorContext, Record};

use super::internal::Shared;
use super::{Data, KStream, NodeBuildContext, NodeFactory};

type Predicate<K, V> = Arc<dyn Fn(&K, &V) -> bool + Send + Sync>;

/// The branches of a `split()` being declared (Kafka Streams' `BranchedKStream`).
///
/// ```
/// use weir::topology::{Consumed, StreamsBuilder};
/// let builder = StreamsBuilder::new();
/// let branches = builder
///     .stream::<String, i64>("numbers", Consumed::new())
///     .named("split-")
///     .split()
///     .branch("negative", |_, v| *v < 0)
///     .branch("zero", |_, v| *v == 0)
///     .default_branch("positive");
/// assert_eq!(branches.len(), 3);
/// assert!(branches.contains_key("split-negative"));
/// ```
pub struct BranchedKStream<K, V> {
    parent: KStream<K, V>,
    builder: Shared,
    node: usize,
    prefix: String,
    predicates: Vec<Predicate<K, V>>,
    branches: HashMap<String, KStream<K, V>>,
}

impl<K: Data, V: Data> BranchedKStream<K, V> {
    pub(crate) fn new(parent: &KStream<K, V>) -> Self {
        let builder = parent.builder.clone();
        let mut b = builder.borrow_mut();
        let prefix = b.name_or(parent.name.clone(), "KSTREAM-BRANCH-");
        let node = b.add_node(
            prefix.clone(),
            super::NodeKind::Processor,
            &[parent.node],
            None,
        );
        drop(b);
        BranchedKStream {
            parent: parent.clone(),
            builder,
            node,
            prefix,
            predicates: Vec::new(),
            branches: HashMap::new(),
        }
    }

    fn add_branch(&mut self, name: &str) {
        let full = format!("{}{}", self.prefix, name);
        let node = self
            .builder
            .borrow_mut()
            .add_processor(full.clone(), &[self.node], || {
                fn_node(|ctx: &ProcessorContext<'_, K, V>, r: Record<K, V>| ctx.forward(r))
            });
        let stream = KStream::new(
            self.builder.clone(),
            node,
            self.parent.key_serde.clone(),
            self.parent.value_serde.clone(),
            self.parent.repartition_required,
        );
        self.branches.insert(full, stream);
    }

    /// Adds a branch taking the records for which `predicate` holds (and no
    /// earlier predicate did).
    pub fn branch(
        mut self,
        name: &str,
        predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.add_branch(name);
        self.predicates.push(Arc::new(predicate));
        self
    }

    /// Ends the split with a branch taking all remaining records. Returns the
    /// branches by full name (`<split name><branch name>`).
    pub fn default_branch(mut self, name: &str) -> HashMap<String, KStream<K, V>> {
        self.add_branch(name);
        self.finish(true)
    }

    /// Ends the split; records matching no predicate are dropped.
    pub fn no_default_branch(self) -> HashMap<String, KStream<K, V>> {
        self.finish(false)
    }

    fn finish(self, has_default: bool) -> HashMap<String, KStream<K, V>> {
        let predicates: Arc<Vec<Predicate<K, V>>> = Arc::new(self.predicates);
        let factory: NodeFactory = Arc::new(move |_: &NodeBuildContext<'_>| {
            let predicates = predicates.clone();
            fn_node(move |ctx: &ProcessorContext<'_, K, V>, r: Record<K, V>| {
                // Children are the branches, in the order they were added.
                match predicates.iter().position(|p| p(&r.key, &r.value)) {
                    Some(i) => ctx.forward_to_index(i, r),
                    None if has_default => ctx.forward_to_index(predicates.len(), r),
                    None => Ok(()),
                }
            })
        });
        self.builder.borrow_mut().nodes[self.node].factory = Some(factory);
        self.branches
    }
}

impl<K: Data, V: Data> KStream<K, V> {
    /// Starts routing each record to the first branch whose predicate holds
    /// (see [`BranchedKStream`]). Branch names are prefixed with this node's
    /// name (set it with [`KStream::named`], e.g. `"split-"`).
    pub fn split(&self) -> BranchedKStream<K, V> {
        BranchedKStream::new(self)
    }
}
