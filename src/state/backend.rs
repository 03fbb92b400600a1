//! The commit/abort machinery shared by every store kind and backend.
//!
//! A backend ([`Backend`]) holds *committed* data: a sorted byte map split
//! into numbered *segments* (key-value stores use segment 0 only; window and
//! session stores use one segment per time interval) plus [`Meta`], the
//! changelog offset and the lowest live segment. It changes only through
//! [`Backend::apply`], which must be atomic, and durable when asked to.
//!
//! [`Core`] puts the *open* writes of the current commit interval in front of
//! a backend, in one sorted map keyed by `segment ++ key` (segment as 8
//! order-preserving bytes). Invariants:
//!
//! * the backend is never written between two commits;
//! * reads merge the overlay over the backend, tombstones (`None`) hide
//!   committed entries;
//! * segments below the pending `min_live_segment` are invisible and take no
//!   writes (they are expired), and `commit` drops them in the backend;
//! * `abort` restores the overlay to empty and `min_live_segment` to the
//!   committed one;
//! * while a commit's writes are [in flight](Backend::in_flight) to the
//!   backend, they stay readable in a second, *pending* overlay between the
//!   open writes and the backend; the next commit, a restore and `close`
//!   wait for them first. They are committed: `abort` leaves them alone.

use std::collections::BTreeMap;
use std::iter::Peekable;
use std::ops::Bound;

use super::{ChangelogRecord, KeyValue, KvIter, StoreError};

/// What a backend stores next to its data, written atomically with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// The changelog offset the committed data reflects.
    pub changelog_offset: Option<i64>,
    /// Segments below this one are expired and deleted.
    pub min_live_segment: i64,
}

impl Default for Meta {
    fn default() -> Self {
        Meta {
            changelog_offset: None,
            min_live_segment: i64::MIN,
        }
    }
}

/// One write handed to [`Backend::apply`]: segment, key, value or tombstone.
pub type Write<'a> = (i64, &'a [u8], Option<&'a [u8]>);

/// Storage of committed data for one store. Implemented by
/// [`MemoryBackend`](super::MemoryBackend) and
/// [`RocksDbBackend`](super::RocksDbBackend); not meant to be implemented
/// elsewhere.
pub trait Backend: Send {
    /// The committed value of `key` in `segment`.
    fn get(&self, segment: i64, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;

    /// Committed entries of `segment` with keys in the bounds, in key order,
    /// read lazily.
    fn range<'a>(
        &'a self,
        segment: i64,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
    ) -> Result<KvIter<'a>, StoreError>;

    /// The segments that hold committed data, ascending.
    fn segments(&self) -> Vec<i64>;

    /// The committed metadata.
    fn meta(&self) -> Meta;

    /// Applies `writes` and `meta` atomically; afterwards drops every
    /// segment below `meta.min_live_segment`. With `durable`, the data
    /// survives a crash of the process once `apply` returns (commits), or,
    /// when the writes are [`in_flight`](Backend::in_flight), once
    /// [`wait`](Backend::wait) returns; without, a crash may lose this and
    /// later applies, but never splits one (restore batches, which are
    /// simply restored again). `meta` is this backend's metadata from the
    /// call on.
    fn apply(
        &mut self,
        writes: &mut dyn Iterator<Item = Write<'_>>,
        meta: Meta,
        durable: bool,
    ) -> Result<(), StoreError>;

    /// Whether the last `apply` is still being written in the background:
    /// until [`wait`](Backend::wait), reads may not see its writes yet, and
    /// [`Core`] serves them from its pending overlay.
    fn in_flight(&self) -> bool {
        false
    }

    /// Waits until the last `apply` is written (and its expired segments
    /// dropped); its error, if it failed.
    fn wait(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    /// An estimate of the number of committed entries.
    fn approximate_num_entries(&self) -> Result<u64, StoreError>;

    /// Releases resources (flushes nothing: committed data is durable).
    fn close(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Encodes `v` into 8 bytes whose byte order equals the numeric order.
pub(crate) fn encode_i64(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

/// Inverse of [`encode_i64`]; `bytes` must be 8 bytes long.
pub(crate) fn decode_i64(bytes: &[u8]) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[..8]);
    (u64::from_be_bytes(b) ^ (1 << 63)) as i64
}

fn overlay_key(segment: i64, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + key.len());
    k.extend_from_slice(&encode_i64(segment));
    k.extend_from_slice(key);
    k
}

/// The smallest key greater than every key starting with `prefix`, or `None`
/// when there is none (the prefix is empty or all `0xff`).
pub(crate) fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last < 0xff {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

/// True when the bounds describe an empty range (`BTreeMap::range` panics
/// on those, so they are filtered first).
pub(crate) fn empty_bounds(from: Bound<&[u8]>, to: Bound<&[u8]>) -> bool {
    match (from, to) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b))
        | (Bound::Excluded(a), Bound::Excluded(b)) => a >= b,
        _ => false,
    }
}

/// Open writes in front of a backend. See the module docs.
pub(crate) struct Core<B> {
    pub(crate) name: String,
    pub(crate) backend: B,
    overlay: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// The last commit's writes while the backend writes them.
    pending: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    min_live_segment: i64,
    /// Restore batches were applied without flushing since the last commit.
    unflushed_restore: bool,
}

impl<B: Backend> Core<B> {
    pub(crate) fn new(name: String, backend: B) -> Self {
        let min_live_segment = backend.meta().min_live_segment;
        Core {
            name,
            backend,
            overlay: BTreeMap::new(),
            pending: BTreeMap::new(),
            min_live_segment,
            unflushed_restore: false,
        }
    }

    pub(crate) fn has_open_writes(&self) -> bool {
        !self.overlay.is_empty() || self.min_live_segment != self.backend.meta().min_live_segment
    }

    pub(crate) fn get(&self, segment: i64, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        if segment < self.min_live_segment {
            return Ok(None);
        }
        if self.overlay.is_empty() && self.pending.is_empty() {
            return self.backend.get(segment, key);
        }
        let k = overlay_key(segment, key);
        match self.overlay.get(&k).or_else(|| self.pending.get(&k)) {
            Some(v) => Ok(v.clone()),
            None => self.backend.get(segment, key),
        }
    }

    /// Buffers a write; returns `false` (and ignores it) when `segment` is expired.
    pub(crate) fn put(&mut self, segment: i64, key: &[u8], value: Option<&[u8]>) -> bool {
        if segment < self.min_live_segment {
            return false;
        }
        self.overlay
            .insert(overlay_key(segment, key), value.map(<[u8]>::to_vec));
        true
    }

    pub(crate) fn range<'a>(
        &'a self,
        segment: i64,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
    ) -> Result<KvIter<'a>, StoreError> {
        if segment < self.min_live_segment || empty_bounds(from, to) {
            return Ok(Box::new(std::iter::empty()));
        }
        let lo = match from {
            Bound::Included(k) => Bound::Included(overlay_key(segment, k)),
            Bound::Excluded(k) => Bound::Excluded(overlay_key(segment, k)),
            Bound::Unbounded => Bound::Included(overlay_key(segment, &[])),
        };
        let hi = match to {
            Bound::Included(k) => Bound::Included(overlay_key(segment, k)),
            Bound::Excluded(k) => Bound::Excluded(overlay_key(segment, k)),
            Bound::Unbounded => match segment.checked_add(1) {
                Some(next) => Bound::Excluded(overlay_key(next, &[])),
                None => Bound::Unbounded,
            },
        };
        let open = |map: &'a BTreeMap<Vec<u8>, Option<Vec<u8>>>| -> OpenIter<'a> {
            Box::new(
                map.range::<Vec<u8>, _>((lo.clone(), hi.clone()))
                    .map(|(k, v)| (&k[8..], v.as_deref())),
            )
        };
        let mut committed = self.backend.range(segment, from, to)?;
        if !self.pending.is_empty() {
            committed = Box::new(MergeIter::new(committed, open(&self.pending)));
        }
        Ok(Box::new(MergeIter::new(committed, open(&self.overlay))))
    }

    /// Live segments (committed or written in the open interval), ascending.
    pub(crate) fn segments(&self) -> Vec<i64> {
        let mut segs: Vec<i64> = self
            .backend
            .segments()
            .into_iter()
            .filter(|s| *s >= self.min_live_segment)
            .collect();
        // Distinct segments of the overlays, one seek per segment.
        for map in [&self.overlay, &self.pending] {
            let mut cursor = encode_i64(self.min_live_segment).to_vec();
            while let Some((k, _)) = map.range(cursor.clone()..).next() {
                let seg = decode_i64(k);
                segs.push(seg);
                match seg.checked_add(1) {
                    Some(next) => cursor = encode_i64(next).to_vec(),
                    None => break,
                }
            }
        }
        segs.sort_unstable();
        segs.dedup();
        segs
    }

    /// Expires every segment below `segment` (takes effect for reads now,
    /// in the backend at commit).
    pub(crate) fn expire_below(&mut self, segment: i64) {
        self.min_live_segment = self.min_live_segment.max(segment);
    }

    pub(crate) fn commit(&mut self, changelog_offset: Option<i64>) -> Result<(), StoreError> {
        let committed = self.backend.meta();
        let meta = Meta {
            changelog_offset: changelog_offset.or(committed.changelog_offset),
            min_live_segment: self.min_live_segment,
        };
        if self.overlay.is_empty() && meta == committed && !self.unflushed_restore {
            return Ok(());
        }
        self.wait()?;
        let min_live = encode_i64(self.min_live_segment);
        let mut writes = self
            .overlay
            .range::<[u8], _>((Bound::Included(&min_live[..]), Bound::Unbounded))
            .map(|(k, v)| (decode_i64(k), &k[8..], v.as_deref()));
        self.backend.apply(&mut writes, meta, true)?;
        if self.backend.in_flight() {
            self.pending = std::mem::take(&mut self.overlay);
        } else {
            self.overlay.clear();
        }
        self.unflushed_restore = false;
        Ok(())
    }

    /// Waits until the last commit's writes are in the backend.
    pub(crate) fn wait(&mut self) -> Result<(), StoreError> {
        if self.pending.is_empty() && !self.backend.in_flight() {
            return Ok(());
        }
        self.backend.wait()?;
        self.pending.clear();
        Ok(())
    }

    pub(crate) fn abort(&mut self) {
        self.overlay.clear();
        self.min_live_segment = self.backend.meta().min_live_segment;
    }

    pub(crate) fn committed_offset(&self) -> Option<i64> {
        self.backend.meta().changelog_offset
    }

    /// Applies already decoded changelog writes as committed state.
    pub(crate) fn restore(
        &mut self,
        writes: &mut dyn Iterator<Item = Write<'_>>,
        changelog_offset: i64,
    ) -> Result<(), StoreError> {
        if self.has_open_writes() {
            return Err(StoreError::InvalidState {
                store: self.name.clone(),
                message: "restore_batch called while the store has open writes; \
                          commit or abort them before restoring"
                    .into(),
            });
        }
        self.wait()?;
        let min_live = self.min_live_segment;
        let mut live = writes.filter(|(seg, _, _)| *seg >= min_live);
        let meta = Meta {
            changelog_offset: Some(changelog_offset),
            min_live_segment: min_live,
        };
        self.backend.apply(&mut live, meta, false)?;
        self.unflushed_restore = true;
        Ok(())
    }

    /// Number of open writes (puts and deletes) in the overlay.
    pub(crate) fn open_write_count(&self) -> usize {
        self.overlay.len()
    }

    /// Number of committed writes still on their way to the backend.
    pub(crate) fn pending_write_count(&self) -> usize {
        self.pending.len()
    }

    pub(crate) fn close(&mut self) -> Result<(), StoreError> {
        self.abort();
        self.wait()?;
        self.backend.close()
    }
}

/// Decodes a batch of plain key-value changelog records into segment-0 writes.
pub(crate) fn kv_writes<'a>(
    records: &'a [ChangelogRecord<'a>],
) -> impl Iterator<Item = Write<'a>> + 'a {
    records.iter().map(|r| (0, r.key, r.value))
}

/// Open writes in key order: key and value, `None` for a tombstone.
pub(crate) type OpenIter<'a> = Box<dyn Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + 'a>;

/// Merges committed entries with open writes; open writes win, tombstones
/// hide committed entries. Both inputs must be in key order.
pub(crate) struct MergeIter<'a> {
    committed: Peekable<KvIter<'a>>,
    open: Peekable<OpenIter<'a>>,
}

impl<'a> MergeIter<'a> {
    pub(crate) fn new(committed: KvIter<'a>, open: OpenIter<'a>) -> Self {
        MergeIter {
            committed: committed.peekable(),
            open: open.peekable(),
        }
    }
}

impl Iterator for MergeIter<'_> {
    type Item = Result<KeyValue, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let order = match (self.committed.peek(), self.open.peek()) {
                (None, None) => return None,
                (Some(Err(_)), _) => return self.committed.next(),
                (Some(Ok(_)), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some(Ok((ck, _))), Some((ok, _))) => ck.as_slice().cmp(ok),
            };
            match order {
                std::cmp::Ordering::Less => return self.committed.next(),
                std::cmp::Ordering::Equal => {
                    self.committed.next();
                }
                std::cmp::Ordering::Greater => {}
            }
            let (k, v) = self.open.next().expect("peeked");
            if let Some(v) = v {
                return Some(Ok((k.to_vec(), v.to_vec())));
            }
        }
    }
}
