//! The wire format of the subscription and response topics and of the
//! subscription store, and the helpers the processors share.
//!
//! * subscription (value of `…-subscription-registration`):
//!   `instruction ++ hash ++ primary key`;
//! * subscription store entry: key `len(KO) ++ KO ++ K`, value
//!   `hash ++ instruction`;
//! * response (value of `…-subscription-response`): `hash ++ 0`, or
//!   `hash ++ 1 ++ right row`;
//! * hash: `0`, or `1 ++ be(u64)` (FNV-1a of the serialized left value).

use crate::processor::{KeyOrValue, ProcessorError};
use crate::serdes::Serde;

// Subscription instructions (Kafka Streams' `SubscriptionWrapper.Instruction`).

/// Remove the subscription; answer nothing (the foreign key changed).
pub(super) const DELETE_NO_PROPAGATE: u8 = 0;
/// Remove the subscription and answer (the left row was deleted).
pub(super) const DELETE_AND_PROPAGATE: u8 = 1;
/// Subscribe; answer when the right row exists (inner join).
pub(super) const PROPAGATE_IF_FOUND: u8 = 2;
/// Subscribe; answer always, without a row if missing (left join).
pub(super) const PROPAGATE_NULL_IF_MISSING: u8 = 3;

/// 64-bit FNV-1a.
pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

pub(super) fn put_hash(out: &mut Vec<u8>, hash: Option<u64>) {
    match hash {
        Some(h) => {
            out.push(1);
            out.extend_from_slice(&h.to_be_bytes());
        }
        None => out.push(0),
    }
}

pub(super) fn take_hash(raw: &[u8]) -> Option<(Option<u64>, &[u8])> {
    match raw.split_first()? {
        (0, rest) => Some((None, rest)),
        (_, rest) => {
            let (h, rest) = rest.split_first_chunk::<8>()?;
            Some((Some(u64::from_be_bytes(*h)), rest))
        }
    }
}

pub(super) fn corrupt(what: &str) -> ProcessorError {
    ProcessorError::StoreRead {
        what: KeyOrValue::Value,
        store: what.to_owned(),
        source: crate::serdes::SerdeError::Length {
            type_name: "foreign-key join message",
            expected: 1,
            actual: 0,
        },
    }
}

pub(super) fn ser<T: 'static>(
    serde: &dyn Serde<T>,
    target: &str,
    value: &T,
    what: KeyOrValue,
) -> Result<Vec<u8>, ProcessorError> {
    let mut out = Vec::new();
    serde
        .serialize(target, value, &mut out)
        .map_err(ProcessorError::serialize(what, target))?;
    Ok(out)
}

pub(super) fn de<T: 'static>(
    serde: &dyn Serde<T>,
    target: &str,
    bytes: &[u8],
    what: KeyOrValue,
) -> Result<T, ProcessorError> {
    serde
        .deserialize(target, bytes)
        .map_err(ProcessorError::store_read(what, target))
}

/// `len(ko) ++ ko`: the prefix of every subscription to `ko`.
pub(super) fn subscription_prefix(ko: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + ko.len());
    out.extend_from_slice(&(ko.len() as u32).to_be_bytes());
    out.extend_from_slice(ko);
    out
}

/// The smallest key greater than every key starting with `prefix`.
pub(super) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// A response carrying `hash` and the right row (`None`: no row).
pub(super) fn response(hash: Option<u64>, row: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(10 + row.map_or(0, <[u8]>::len));
    put_hash(&mut out, hash);
    match row {
        Some(v) => {
            out.push(1);
            out.extend_from_slice(v);
        }
        None => out.push(0),
    }
    out
}
