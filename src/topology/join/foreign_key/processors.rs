//! The processors of a foreign-key join, one per step of the module docs,
//! named after the Kafka Streams suppliers they correspond to.
//!
//! | node | processor | Kafka Streams |
//! | --- | --- | --- |
//! | `<name>-SUBSCRIBE` | [`SubscriptionSend`] | `SubscriptionSendProcessorSupplier` |
//! | `<name>-RECEIVE` | [`SubscriptionReceive`] | `SubscriptionReceiveProcessorSupplier` + `SubscriptionJoinProcessorSupplier` |
//! | `<name>-RIGHT-CHANGES` | [`ForeignTableJoin`] | `ForeignTableJoinProcessorSupplier` |
//! | `<name>-RESPONSES` | [`PassThrough`](super::super::PassThrough) | — |
//! | `<name>-RESOLVE` | [`ResponseJoin`] | `ResponseJoinProcessorSupplier` |

use std::sync::Arc;

use crate::processor::{Change, KeyOrValue, Processor, ProcessorContext, ProcessorError, Record};
use crate::serdes::SharedSerde;

use super::wire::{
    DELETE_AND_PROPAGATE, DELETE_NO_PROPAGATE, PROPAGATE_IF_FOUND, PROPAGATE_NULL_IF_MISSING,
    corrupt, de, fnv1a, prefix_end, put_hash, response, ser, subscription_prefix, take_hash,
};
use crate::topology::Data;

/// The serdes the processors need.
pub(super) struct Serdes<K, V, KO, VO> {
    pub(super) key: SharedSerde<K>,
    pub(super) value: SharedSerde<V>,
    pub(super) foreign_key: SharedSerde<KO>,
    pub(super) foreign_value: SharedSerde<VO>,
}

impl<K, V, KO, VO> Clone for Serdes<K, V, KO, VO> {
    fn clone(&self) -> Self {
        Serdes {
            key: self.key.clone(),
            value: self.value.clone(),
            foreign_key: self.foreign_key.clone(),
            foreign_value: self.foreign_value.clone(),
        }
    }
}

/// The left value's foreign key.
pub(super) type ForeignKeyFn<V, KO> = Arc<dyn Fn(&V) -> Result<KO, ProcessorError> + Send + Sync>;

/// `(left, right row)` → the result row; `None` deletes the result.
pub(super) type JoinFn<V, VO, VR> =
    Arc<dyn Fn(&V, Option<&VO>) -> Result<Option<VR>, ProcessorError> + Send + Sync>;

/// Step 1 (left task): a left-table change becomes subscriptions keyed by
/// foreign key — an unsubscription of the old foreign key when it changed,
/// then a subscription of the new one.
pub(super) struct SubscriptionSend<K, V, KO, VO> {
    pub(super) serdes: Serdes<K, V, KO, VO>,
    pub(super) foreign_key: ForeignKeyFn<V, KO>,
    pub(super) left_join: bool,
}

impl<K: Data, V: Data, KO: Data, VO: Data> Processor<K, Change<V>, KO, Vec<u8>>
    for SubscriptionSend<K, V, KO, VO>
{
    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, KO, Vec<u8>>,
        r: Record<K, Change<V>>,
    ) -> Result<(), ProcessorError> {
        let s = &self.serdes;
        let target = ctx.processor_name();
        let pk = ser(s.key.as_ref(), target, &r.key, KeyOrValue::Key)?;
        let hash = match &r.value.new {
            Some(v) => Some(fnv1a(&ser(s.value.as_ref(), target, v, KeyOrValue::Value)?)),
            None => None,
        };
        let foreign_key = |v: &Option<V>| v.as_ref().map(|v| (self.foreign_key)(v)).transpose();
        let new_fk = foreign_key(&r.value.new)?;
        let old_fk = foreign_key(&r.value.old)?;
        let message = |instruction: u8| {
            let mut out = vec![instruction];
            put_hash(&mut out, hash);
            out.extend_from_slice(&pk);
            out
        };
        // A moved foreign key must answer even without a row (Kafka
        // Streams' inner join too): the result of the old one is replaced.
        let mut moved = false;
        if let Some(old_fk) = old_fk {
            let old_bytes = ser(s.foreign_key.as_ref(), target, &old_fk, KeyOrValue::Key)?;
            let new_bytes = match &new_fk {
                Some(k) => Some(ser(s.foreign_key.as_ref(), target, k, KeyOrValue::Key)?),
                None => None,
            };
            if new_bytes.as_deref() != Some(old_bytes.as_slice()) {
                moved = new_fk.is_some();
                let instruction = if new_fk.is_some() {
                    DELETE_NO_PROPAGATE
                } else {
                    DELETE_AND_PROPAGATE
                };
                ctx.forward(Record {
                    key: old_fk,
                    value: message(instruction),
                    timestamp: r.timestamp,
                    headers: r.headers.clone(),
                })?;
            }
        }
        if let Some(new_fk) = new_fk {
            let instruction = if self.left_join || moved {
                PROPAGATE_NULL_IF_MISSING
            } else {
                PROPAGATE_IF_FOUND
            };
            ctx.forward(Record {
                key: new_fk,
                value: message(instruction),
                timestamp: r.timestamp,
                headers: r.headers,
            })?;
        }
        Ok(())
    }
}

/// Step 2a (right task): stores (or removes) a subscription in the
/// subscription store and answers it with the right row, keyed by the
/// primary key.
pub(super) struct SubscriptionReceive<K, V, KO, VO> {
    pub(super) serdes: Serdes<K, V, KO, VO>,
    /// The subscription store.
    pub(super) subscriptions: String,
    /// The right table's store.
    pub(super) right_store: String,
}

impl<K: Data, V: Data, KO: Data, VO: Data> Processor<KO, Vec<u8>, Vec<u8>, Vec<u8>>
    for SubscriptionReceive<K, V, KO, VO>
{
    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, Vec<u8>, Vec<u8>>,
        r: Record<KO, Vec<u8>>,
    ) -> Result<(), ProcessorError> {
        let (s, subs) = (&self.serdes, self.subscriptions.as_str());
        let store = ctx.key_value_store::<Vec<u8>, Vec<u8>>(subs)?;
        let (&instruction, rest) = r.value.split_first().ok_or_else(|| corrupt(subs))?;
        let (hash, pk) = take_hash(rest).ok_or_else(|| corrupt(subs))?;
        let ko = ser(s.foreign_key.as_ref(), subs, &r.key, KeyOrValue::Key)?;
        let mut entry = subscription_prefix(&ko);
        entry.extend_from_slice(pk);
        let respond = |right: Option<&VO>| -> Result<(), ProcessorError> {
            let row = match right {
                Some(v) => Some(ser(s.foreign_value.as_ref(), subs, v, KeyOrValue::Value)?),
                None => None,
            };
            ctx.forward(Record {
                key: pk.to_vec(),
                value: response(hash, row.as_deref()),
                timestamp: r.timestamp,
                headers: r.headers.clone(),
            })
        };
        match instruction {
            DELETE_NO_PROPAGATE | DELETE_AND_PROPAGATE => {
                if store.get(&entry)?.is_some() {
                    store.delete(&entry)?;
                }
                if instruction == DELETE_AND_PROPAGATE {
                    respond(None)?;
                }
            }
            _ => {
                let mut stored = Vec::new();
                put_hash(&mut stored, hash);
                stored.push(instruction);
                store.put(&entry, &stored)?;
                let row = ctx
                    .key_value_store::<KO, VO>(&self.right_store)?
                    .get(&r.key)?;
                if row.is_some() || instruction == PROPAGATE_NULL_IF_MISSING {
                    respond(row.as_ref())?;
                }
            }
        }
        Ok(())
    }
}

/// Step 2b (right task): a right-table change answers every subscriber of
/// its key (a prefix scan of the subscription store).
pub(super) struct ForeignTableJoin<K, V, KO, VO> {
    pub(super) serdes: Serdes<K, V, KO, VO>,
    /// The subscription store.
    pub(super) subscriptions: String,
}

impl<K: Data, V: Data, KO: Data, VO: Data> Processor<KO, Change<VO>, Vec<u8>, Vec<u8>>
    for ForeignTableJoin<K, V, KO, VO>
{
    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, Vec<u8>, Vec<u8>>,
        r: Record<KO, Change<VO>>,
    ) -> Result<(), ProcessorError> {
        let (s, subs) = (&self.serdes, self.subscriptions.as_str());
        let store = ctx.key_value_store::<Vec<u8>, Vec<u8>>(subs)?;
        let ko = ser(s.foreign_key.as_ref(), subs, &r.key, KeyOrValue::Key)?;
        let prefix = subscription_prefix(&ko);
        let end = prefix_end(&prefix);
        let value = match &r.value.new {
            Some(v) => Some(ser(s.foreign_value.as_ref(), subs, v, KeyOrValue::Value)?),
            None => None,
        };
        for (entry, stored) in store.range(Some(&prefix), end.as_ref())? {
            let (hash, _) = take_hash(&stored).ok_or_else(|| corrupt(subs))?;
            ctx.forward(Record {
                key: entry[prefix.len()..].to_vec(),
                value: response(hash, value.as_deref()),
                timestamp: r.timestamp,
                headers: r.headers.clone(),
            })?;
        }
        Ok(())
    }
}

/// Step 3 (left task): drops a response whose hash is not the current left
/// value's (stale) and joins the rest with the current left row.
pub(super) struct ResponseJoin<K, V, KO, VO, VR> {
    pub(super) serdes: Serdes<K, V, KO, VO>,
    /// The left table's store.
    pub(super) left_store: String,
    pub(super) join: JoinFn<V, VO, VR>,
}

impl<K: Data, V: Data, KO: Data, VO: Data, VR: Data> Processor<Vec<u8>, Vec<u8>, K, Change<VR>>
    for ResponseJoin<K, V, KO, VO, VR>
{
    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, K, Change<VR>>,
        r: Record<Vec<u8>, Vec<u8>>,
    ) -> Result<(), ProcessorError> {
        let (s, left) = (&self.serdes, self.left_store.as_str());
        let key = de(s.key.as_ref(), left, &r.key, KeyOrValue::Key)?;
        let (hash, rest) = take_hash(&r.value).ok_or_else(|| corrupt(left))?;
        let (&has_row, row) = rest.split_first().ok_or_else(|| corrupt(left))?;
        let current = ctx.key_value_store::<K, V>(left)?.get(&key)?;
        let current_hash = match &current {
            Some(v) => Some(fnv1a(&ser(s.value.as_ref(), left, v, KeyOrValue::Value)?)),
            None => None,
        };
        if current_hash != hash {
            return Ok(()); // answers a left value that was replaced since
        }
        let row = if has_row == 1 {
            Some(de(s.foreign_value.as_ref(), left, row, KeyOrValue::Value)?)
        } else {
            None
        };
        let new = match current {
            Some(v) => (self.join)(&v, row.as_ref())?,
            None => None,
        };
        ctx.forward(Record {
            key,
            value: Change { new, old: None },
            timestamp: r.timestamp,
            headers: r.headers,
        })
    }
}
