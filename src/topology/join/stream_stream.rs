//! Windowed stream–stream joins: [`KStream::join_stream`],
//! [`KStream::left_join_stream`], [`KStream::outer_join_stream`].
//!
//! # Stores
//!
//! * `<name>-this-join-store`, `<name>-other-join-store`: logged window
//!   stores holding each side's records by key and timestamp (a list per
//!   key and timestamp), kept [`JoinWindows::retention_ms`].
//! * `<name>-outer-shared-join-store` (left and outer joins): a logged
//!   key-value store with one entry per (timestamp, side, key) whose records
//!   have not matched yet; the records themselves stay in the side's window
//!   store. Keys are `be(timestamp) ++ side ++ key`, so a scan meets them in
//!   timestamp order.
//!
//! # Processing a record at `t` on one side (stream time `st`, both sides)
//!
//! 1. Late (its window closed, see [`JoinWindows`]): dropped and counted in
//!    `late_dropped`; nothing else happens.
//! 2. Unmatched entries whose window has closed are emitted with no partner
//!    (timestamp: their own) and removed — before any expiry, so their
//!    records are still in the window stores.
//! 3. The record is added to its side's window store; both window stores
//!    then expire what is older than the retention.
//! 4. It joins every record of the other side with the same key in its
//!    range; each result has timestamp `max(t, t_other)`. Matched entries of
//!    the other side leave the shared store.
//! 5. Unmatched, and its side emits unmatched records (left side of a left
//!    join, both sides of an outer join): it gets a shared-store entry. So a
//!    `None` partner is emitted only once the window closed, never before a
//!    match that could still come (no spurious results).

use std::sync::Arc;

use crate::processor::{Processor, ProcessorContext, ProcessorError, ProcessorNode, Record};
use crate::processor::{StoreKind, StoreSerdes};
use crate::serdes::{BytesSerde, SharedSerde};

use super::{JoinWindows, Joined, ListSerde, PassThrough, copartitioned, join_name};
use crate::topology::{Data, KStream, StoreDef};

/// `(this, other) → result`; `None` when this kind of join has no result.
type SideJoiner<T, O, VR> = Arc<dyn Fn(Option<&T>, Option<&O>) -> Option<VR> + Send + Sync>;

const LEFT: u8 = 0;
const RIGHT: u8 = 1;

/// The shared-store key of `key`'s records at `timestamp` on `side`.
fn shared_key(timestamp: i64, side: u8, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + key.len());
    out.extend_from_slice(&(timestamp.max(0) as u64).to_be_bytes());
    out.push(side);
    out.extend_from_slice(key);
    out
}

fn parse_shared_key(raw: &[u8]) -> Option<(i64, u8, &[u8])> {
    let (ts, rest) = raw.split_first_chunk::<8>()?;
    let (&side, key) = rest.split_first()?;
    Some((u64::from_be_bytes(*ts) as i64, side, key))
}

/// One side's join processor (see the module docs): the `-this` node runs
/// it for the left side, the `-other` node for the right (Kafka Streams'
/// `KStreamKStreamJoinLeftSide` and `KStreamKStreamJoinRightSide`).
struct SideJoin<K, T, O, VR> {
    side: u8,
    /// This side's range: other records in `[t - before, t + after]` match.
    before: i64,
    after: i64,
    /// The other side's `after` (when its unmatched records close).
    other_after: i64,
    grace: i64,
    this_store: String,
    other_store: String,
    /// The shared store and whether this side's unmatched records go there.
    shared: Option<(String, bool)>,
    key_serde: SharedSerde<K>,
    joiner: SideJoiner<T, O, VR>,
}

impl<K: Data, T: Data, O: Data, VR: Data> SideJoin<K, T, O, VR> {
    fn encode_key(&self, key: &K) -> Result<Vec<u8>, ProcessorError> {
        let mut out = Vec::new();
        self.key_serde
            .serialize(&self.this_store, key, &mut out)
            .map_err(ProcessorError::serialize(
                crate::processor::KeyOrValue::Key,
                &self.this_store,
            ))?;
        Ok(out)
    }

    /// Step 2: emits and removes the shared entries whose window closed.
    fn emit_closed(
        &self,
        ctx: &ProcessorContext<'_, K, VR>,
        shared: &str,
        st: i64,
    ) -> Result<(), ProcessorError> {
        let (this_after, other_after) = (self.after, self.other_after);
        let bound = st - this_after.min(other_after) - self.grace;
        if bound <= 0 {
            return Ok(());
        }
        let store = ctx.key_value_store::<Vec<u8>, Vec<u8>>(shared)?;
        let upper = shared_key(bound, 0, &[]);
        for (raw, _) in store.range(None, Some(&upper))? {
            let Some((ts, side, key_bytes)) = parse_shared_key(&raw) else {
                continue;
            };
            let side_after = if side == self.side {
                this_after
            } else {
                other_after
            };
            if ts + side_after + self.grace >= st {
                continue;
            }
            let key = self.key_serde.deserialize(shared, key_bytes).map_err(
                ProcessorError::store_read(crate::processor::KeyOrValue::Key, shared),
            )?;
            let results: Vec<VR> = if side == self.side {
                let values = ctx
                    .window_store::<K, Vec<T>>(&self.this_store)?
                    .fetch(&key, ts)?;
                values
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|v| (self.joiner)(Some(v), None))
                    .collect()
            } else {
                let values = ctx
                    .window_store::<K, Vec<O>>(&self.other_store)?
                    .fetch(&key, ts)?;
                values
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|v| (self.joiner)(None, Some(v)))
                    .collect()
            };
            store.delete(&raw)?;
            for value in results {
                ctx.forward(Record::new(key.clone(), value, ts))?;
            }
        }
        Ok(())
    }
}

impl<K: Data, T: Data, O: Data, VR: Data> Processor<K, T, K, VR> for SideJoin<K, T, O, VR> {
    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, K, VR>,
        r: Record<K, T>,
    ) -> Result<(), ProcessorError> {
        let (st, t) = (ctx.stream_time(), r.timestamp);
        if t.saturating_add(self.after).saturating_add(self.grace) < st {
            ctx.record_late();
            return Ok(());
        }
        if let Some((shared, _)) = &self.shared {
            self.emit_closed(ctx, shared, st)?;
        }
        let this = ctx.window_store::<K, Vec<T>>(&self.this_store)?;
        let mut list = this.fetch(&r.key, t)?.unwrap_or_default();
        list.push(r.value.clone());
        this.put(&r.key, t, Some(&list))?;
        this.expire(st)?;

        let other = ctx.window_store::<K, Vec<O>>(&self.other_store)?;
        other.expire(st)?;
        let matches = other.fetch_range(
            &r.key,
            t.saturating_sub(self.before),
            t.saturating_add(self.after),
        )?;
        let key_bytes = match &self.shared {
            Some(_) => Some(self.encode_key(&r.key)?),
            None => None,
        };
        for (other_t, values) in &matches {
            if let (Some((shared, _)), Some(key_bytes)) = (&self.shared, &key_bytes) {
                let store = ctx.key_value_store::<Vec<u8>, Vec<u8>>(shared)?;
                let entry = shared_key(*other_t, 1 - self.side, key_bytes);
                if store.get(&entry)?.is_some() {
                    store.delete(&entry)?;
                }
            }
            for v in values {
                if let Some(value) = (self.joiner)(Some(&r.value), Some(v)) {
                    ctx.forward(Record {
                        key: r.key.clone(),
                        value,
                        timestamp: t.max(*other_t),
                        headers: r.headers.clone(),
                    })?;
                }
            }
        }
        if let (true, Some((shared, true)), Some(key_bytes)) =
            (matches.is_empty(), &self.shared, &key_bytes)
        {
            ctx.key_value_store::<Vec<u8>, Vec<u8>>(shared)?
                .put(&shared_key(t, self.side, key_bytes), &Vec::new())?;
        }
        Ok(())
    }
}

/// Which records emit without a partner.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Inner,
    Left,
    Outer,
}

impl<K: Data, V: Data> KStream<K, V> {
    /// Windowed inner join: `joiner(left, right)` for every pair of records
    /// with equal keys and timestamps within `windows`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::topology::{Consumed, JoinWindows, Joined, Produced, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// let views = builder.stream::<String, String>("views", Consumed::new());
    /// let clicks = builder.stream::<String, String>("clicks", Consumed::new());
    /// views
    ///     .join_stream(
    ///         &clicks,
    ///         |v: &String, c: &String| format!("{v}+{c}"),
    ///         JoinWindows::of_time_difference_and_grace(Duration::from_secs(10), Duration::from_secs(2)),
    ///         Joined::as_("view-click"),
    ///     )
    ///     .to("view-clicks", Produced::new());
    /// assert_eq!(builder.build().unwrap().subtopology_count(), 1);
    /// ```
    pub fn join_stream<VO: Data, VR: Data>(
        &self,
        other: &KStream<K, VO>,
        joiner: impl Fn(&V, &VO) -> VR + Send + Sync + 'static,
        windows: JoinWindows,
        joined: Joined<K, V>,
    ) -> KStream<K, VR> {
        let join = Arc::new(move |l: Option<&V>, r: Option<&VO>| match (l, r) {
            (Some(l), Some(r)) => Some(joiner(l, r)),
            _ => None,
        });
        self.stream_stream_join(other, join, windows, joined, Kind::Inner)
    }

    /// Windowed left join: like [`KStream::join_stream`], and every left
    /// record that matched nothing is emitted as `joiner(left, None)` once
    /// its window closed.
    pub fn left_join_stream<VO: Data, VR: Data>(
        &self,
        other: &KStream<K, VO>,
        joiner: impl Fn(&V, Option<&VO>) -> VR + Send + Sync + 'static,
        windows: JoinWindows,
        joined: Joined<K, V>,
    ) -> KStream<K, VR> {
        let join = Arc::new(move |l: Option<&V>, r: Option<&VO>| l.map(|l| joiner(l, r)));
        self.stream_stream_join(other, join, windows, joined, Kind::Left)
    }

    /// Windowed outer join: like [`KStream::left_join_stream`], and right
    /// records that matched nothing are emitted as `joiner(None, right)`.
    pub fn outer_join_stream<VO: Data, VR: Data>(
        &self,
        other: &KStream<K, VO>,
        joiner: impl Fn(Option<&V>, Option<&VO>) -> VR + Send + Sync + 'static,
        windows: JoinWindows,
        joined: Joined<K, V>,
    ) -> KStream<K, VR> {
        let join = Arc::new(move |l: Option<&V>, r: Option<&VO>| {
            (l.is_some() || r.is_some()).then(|| joiner(l, r))
        });
        self.stream_stream_join(other, join, windows, joined, Kind::Outer)
    }

    fn stream_stream_join<VO: Data, VR: Data>(
        &self,
        other: &KStream<K, VO>,
        join: SideJoiner<V, VO, VR>,
        windows: JoinWindows,
        joined: Joined<K, V>,
        kind: Kind,
    ) -> KStream<K, VR> {
        let prefix = match kind {
            Kind::Inner => "KSTREAM-JOIN-",
            Kind::Left => "KSTREAM-LEFTJOIN-",
            Kind::Outer => "KSTREAM-OUTERJOIN-",
        };
        let name = join_name(
            &self.builder,
            joined.name.or_else(|| self.name.clone()),
            prefix,
        );
        let left = copartitioned(
            self,
            &format!("{name}-left"),
            joined.key_serde.clone(),
            joined.value_serde,
        );
        let right = copartitioned(other, &format!("{name}-right"), joined.key_serde, None);

        let mut b = self.builder.borrow_mut();
        let key = b.serde(left.key_serde.clone(), None, &name, "key");
        let left_value = b.serde(left.value_serde.clone(), None, &name, "value");
        let right_value = b.serde(right.value_serde.clone(), None, &name, "other value");
        let retention_ms = windows.retention_ms();
        let this_store = format!("{name}-this-join-store");
        let other_store = format!("{name}-other-join-store");
        let this_index = b.add_store_def(StoreDef::timed(
            this_store.clone(),
            StoreKind::Window,
            retention_ms,
            StoreSerdes::new(key.clone(), Arc::new(ListSerde::new(left_value))),
        ));
        let other_index = b.add_store_def(StoreDef::timed(
            other_store.clone(),
            StoreKind::Window,
            retention_ms,
            StoreSerdes::new(key.clone(), Arc::new(ListSerde::new(right_value))),
        ));
        let shared_store = (kind != Kind::Inner).then(|| format!("{name}-outer-shared-join-store"));
        let shared_index = shared_store.as_ref().map(|s| {
            b.add_store(
                s.clone(),
                true,
                StoreSerdes::new::<Vec<u8>, Vec<u8>>(Arc::new(BytesSerde), Arc::new(BytesSerde)),
            )
        });

        let (k, j, w) = (key.clone(), join.clone(), windows);
        let (ts, os, ss) = (
            this_store.clone(),
            other_store.clone(),
            shared_store.clone(),
        );
        let this_node = b.add_processor(format!("{name}-this"), &[left.node], move || {
            ProcessorNode::<_, K, V, K, VR>::boxed(SideJoin::<K, V, VO, VR> {
                side: LEFT,
                before: w.before_ms,
                after: w.after_ms,
                other_after: w.before_ms,
                grace: w.grace_ms,
                this_store: ts.clone(),
                other_store: os.clone(),
                shared: ss.clone().map(|s| (s, true)),
                key_serde: k.clone(),
                joiner: j.clone(),
            })
        });
        let (k, w) = (key.clone(), windows);
        let j: SideJoiner<VO, V, VR> = Arc::new(move |r, l| join(l, r));
        let (ts, os, ss) = (other_store, this_store, shared_store);
        let other_node = b.add_processor(format!("{name}-other"), &[right.node], move || {
            ProcessorNode::<_, K, VO, K, VR>::boxed(SideJoin::<K, VO, V, VR> {
                side: RIGHT,
                before: w.after_ms,
                after: w.before_ms,
                other_after: w.after_ms,
                grace: w.grace_ms,
                this_store: ts.clone(),
                other_store: os.clone(),
                shared: ss.clone().map(|s| (s, kind == Kind::Outer)),
                key_serde: k.clone(),
                joiner: j.clone(),
            })
        });
        for node in [this_node, other_node] {
            b.connect_store(node, this_index);
            b.connect_store(node, other_index);
            if let Some(shared) = shared_index {
                b.connect_store(node, shared);
            }
        }
        let merge = b.add_processor(
            format!("{name}-merge"),
            &[this_node, other_node],
            PassThrough::<K, VR>::boxed,
        );
        drop(b);
        KStream::new(self.builder.clone(), merge, Some(key), None, false)
    }
}
