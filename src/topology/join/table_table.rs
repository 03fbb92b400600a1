//! Table–table joins: [`KTable::join`], [`KTable::left_join`], [`KTable::outer_join`].
//!
//! Kafka Streams semantics. Two join nodes — one below each table, each
//! reading the *other* table's store — feed one merge node. A change
//! `{new, old}` of one side, with the other side's current row `other`,
//! emits `Change { new: join(new, other), old: join(old, other) }`, where
//! `join` gives `None` when the kind of join has no result for that pair
//! (inner: either side absent; left: left absent; outer: both absent).
//! When both are `None` nothing is emitted; a result that disappears is
//! emitted as `new: None` (a tombstone once written to a topic).
//!
//! Invariants: both tables are materialized (an unmaterialized side gets a
//! store, see [`super`]) and co-partitioned; the result is not materialized
//! (a later join materializes it on demand). The result's timestamp is the
//! timestamp of the change that caused it.

use std::sync::Arc;

use crate::processor::node::fn_node;
use crate::processor::{Change, ProcessorContext, Record};

use super::{join_name, materialized_store};
use crate::topology::{Data, KTable};

/// `(left, right) → result` for one kind of join; `None` = no row.
type PairJoin<V, VO, VR> = Arc<dyn Fn(Option<&V>, Option<&VO>) -> Option<VR> + Send + Sync>;

impl<K: Data, V: Data> KTable<K, V> {
    /// Inner join: a row for every key present in both tables,
    /// `joiner(left, right)`; updates as either side changes.
    ///
    /// ```
    /// use weir::topology::{Consumed, Materialized, Produced, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// let a = builder.table::<String, i64>("a", Consumed::new(), Materialized::as_("a"));
    /// let b = builder.table::<String, i64>("b", Consumed::new(), Materialized::as_("b"));
    /// a.join(&b, |x: &i64, y: &i64| x + y).to_stream().to("sums", Produced::new());
    /// assert_eq!(builder.build().unwrap().subtopology_count(), 1);
    /// ```
    pub fn join<VO: Data, VR: Data>(
        &self,
        other: &KTable<K, VO>,
        joiner: impl Fn(&V, &VO) -> VR + Send + Sync + 'static,
    ) -> KTable<K, VR> {
        let join: PairJoin<V, VO, VR> = Arc::new(move |l, r| match (l, r) {
            (Some(l), Some(r)) => Some(joiner(l, r)),
            _ => None,
        });
        self.table_table_join(other, join, "KTABLE-JOIN-")
    }

    /// Left join: a row for every key of this table, `joiner(left, right)`
    /// with `None` when the other table has no row.
    pub fn left_join<VO: Data, VR: Data>(
        &self,
        other: &KTable<K, VO>,
        joiner: impl Fn(&V, Option<&VO>) -> VR + Send + Sync + 'static,
    ) -> KTable<K, VR> {
        let join: PairJoin<V, VO, VR> = Arc::new(move |l, r| l.map(|l| joiner(l, r)));
        self.table_table_join(other, join, "KTABLE-LEFTJOIN-")
    }

    /// Outer join: a row for every key of either table.
    pub fn outer_join<VO: Data, VR: Data>(
        &self,
        other: &KTable<K, VO>,
        joiner: impl Fn(Option<&V>, Option<&VO>) -> VR + Send + Sync + 'static,
    ) -> KTable<K, VR> {
        let join: PairJoin<V, VO, VR> = Arc::new(move |l, r| {
            if l.is_none() && r.is_none() {
                None
            } else {
                Some(joiner(l, r))
            }
        });
        self.table_table_join(other, join, "KTABLE-OUTERJOIN-")
    }

    fn table_table_join<VO: Data, VR: Data>(
        &self,
        other: &KTable<K, VO>,
        join: PairJoin<V, VO, VR>,
        prefix: &str,
    ) -> KTable<K, VR> {
        let name = join_name(&self.builder, self.name.clone(), prefix);
        let this_store = materialized_store(self, &format!("{name}-LEFT"));
        let other_store = materialized_store(other, &format!("{name}-RIGHT"));
        let mut b = self.builder.borrow_mut();
        let this_index = b.store_index(&this_store).expect("store was added");
        let other_index = b.store_index(&other_store).expect("store was added");

        // Left changes look up the right store.
        let (j, store) = (join.clone(), other_store.clone());
        let left = b.add_processor(format!("{name}-LEFT"), &[self.node], move || {
            let (join, store) = (j.clone(), store.clone());
            fn_node(
                move |ctx: &ProcessorContext<'_, K, Change<VR>>, r: Record<K, Change<V>>| {
                    let right = ctx.key_value_store::<K, VO>(&store)?.get(&r.key)?;
                    let change = Change {
                        new: join(r.value.new.as_ref(), right.as_ref()),
                        old: join(r.value.old.as_ref(), right.as_ref()),
                    };
                    forward_change(ctx, r.with_value(change))
                },
            )
        });
        b.connect_store(left, other_index);

        // Right changes look up the left store.
        let (j, store) = (join, this_store);
        let right = b.add_processor(format!("{name}-RIGHT"), &[other.node], move || {
            let (join, store) = (j.clone(), store.clone());
            fn_node(
                move |ctx: &ProcessorContext<'_, K, Change<VR>>, r: Record<K, Change<VO>>| {
                    let left = ctx.key_value_store::<K, V>(&store)?.get(&r.key)?;
                    let change = Change {
                        new: join(left.as_ref(), r.value.new.as_ref()),
                        old: join(left.as_ref(), r.value.old.as_ref()),
                    };
                    forward_change(ctx, r.with_value(change))
                },
            )
        });
        b.connect_store(right, this_index);

        let merge = b.add_processor(format!("{name}-MERGE"), &[left, right], || {
            fn_node(
                |ctx: &ProcessorContext<'_, K, Change<VR>>, r: Record<K, Change<VR>>| {
                    ctx.forward(r)
                },
            )
        });
        drop(b);
        KTable::new(
            self.builder.clone(),
            merge,
            self.key_serde.clone(),
            None,
            None,
        )
    }
}

/// Forwards a result change unless it says nothing (no old, no new row).
fn forward_change<K: Data, VR: Data>(
    ctx: &ProcessorContext<'_, K, Change<VR>>,
    r: Record<K, Change<VR>>,
) -> Result<(), crate::processor::ProcessorError> {
    if r.value.new.is_none() && r.value.old.is_none() {
        return Ok(());
    }
    ctx.forward(r)
}
