//! The commit protocol of a stream thread, over its task manager and its
//! streams producer.
//!
//! Exactly-once, in this order (each step only after the previous one
//! succeeded):
//!
//! 1. flush the record caches: their updates join the open transaction;
//! 2. flush the producer: every record is acknowledged, and the delivery
//!    reports give each changelog partition's last offset; a failed delivery
//!    fails the commit;
//! 3. send the consumed offsets (each with its task's stream time as
//!    metadata) with the consumer's group metadata (KIP-447 fencing);
//! 4. commit the transaction;
//! 5. commit the stores, each with the changelog offset its writes reached.
//!
//! A store therefore never claims a changelog offset whose transaction did
//! not commit. An error in 1–4 leaves the stores' writes open; the thread
//! then aborts ([`super::StreamThread`]), which drops them.
//!
//! At-least-once: 1, 2, 5, then the offsets are committed to the group, so
//! a crash between 5 and the offset commit reprocesses (never loses) input.

use std::collections::BTreeMap;
use std::time::Instant;

use super::client::{GroupConsumer, TxnProducer};
use super::producer::StreamsProducer;
use super::tasks::{ConsumedOffsets, TaskCreator, TaskManager};
use crate::runtime::StreamsError;
use crate::runtime::topics::TopicLayout;

/// What a commit needs besides the tasks and the producer.
pub(crate) struct CommitScope<'a> {
    /// Partition counts of the topics the tasks write.
    pub(crate) partitions: &'a BTreeMap<String, i32>,
    /// Which topics belong to which sub-topology.
    pub(crate) layout: &'a TopicLayout,
}

/// Commits everything processed since the last commit (module docs) and
/// returns the consumed offsets it committed; `None` when there was nothing
/// to commit.
pub(crate) fn commit<P, C>(
    tasks: &mut TaskManager,
    producer: &mut StreamsProducer<P>,
    consumer: &C,
    scope: &CommitScope<'_>,
) -> Result<Option<ConsumedOffsets>, StreamsError>
where
    P: TxnProducer,
    C: GroupConsumer<Group = P::Group>,
{
    if !tasks.commit_needed() {
        return Ok(None);
    }
    let started = Instant::now();
    {
        let mut collector = producer.collector(scope.partitions);
        tasks.flush_caches(&mut collector)?;
    }
    let caches_done = Instant::now();
    producer.flush()?;
    let flush_done = Instant::now();
    let offsets = tasks.offsets_to_commit(scope.layout);
    let group = consumer.group_metadata();
    producer.commit_transaction(&offsets, group)?;
    let transaction_done = Instant::now();
    let committed =
        tasks.commit_stores(|topic, partition| producer.changelog_offset(topic, partition))?;
    if producer.state() == super::producer::TxnState::NonTransactional
        && offsets.count() > 0
        && let Err(e) = consumer.commit_offsets(&offsets)
    {
        return Err(StreamsError::kafka("committing offsets", e));
    }
    let us = |from: Instant, to: Instant| to.duration_since(from).as_micros() as u64;
    tracing::debug!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        caches_us = us(started, caches_done),
        flush_us = us(caches_done, flush_done),
        transaction_us = us(flush_done, transaction_done),
        stores_us = us(transaction_done, Instant::now()),
        partitions = offsets.count(),
        "committed"
    );
    Ok(Some(committed))
}

/// Revocation: commits what was processed (or, when the assignment was lost
/// and another member may own the partitions already, aborts instead), then
/// closes every task. A failed commit aborts; its error is returned after
/// the tasks closed.
pub(crate) fn revoke<P, C>(
    tasks: &mut TaskManager,
    producer: &mut StreamsProducer<P>,
    consumer: &C,
    scope: &CommitScope<'_>,
    lost: bool,
    creator: &mut dyn TaskCreator,
) -> Result<(), StreamsError>
where
    P: TxnProducer,
    C: GroupConsumer<Group = P::Group>,
{
    let outcome = if lost {
        tracing::warn!("assignment lost: aborting instead of committing");
        abort(tasks, producer);
        Ok(())
    } else {
        commit(tasks, producer, consumer, scope)
            .map(|_| ())
            .inspect_err(|e| {
                tracing::warn!(error = %e, "commit on revoke failed; aborting");
                abort(tasks, producer);
            })
    };
    tasks.close_all(creator);
    outcome
}

/// Aborts the open transaction and drops every task's uncommitted writes.
/// An abort that cannot finish now stays pending in the producer and is
/// retried before tasks open again.
pub(crate) fn abort<P: TxnProducer>(tasks: &mut TaskManager, producer: &mut StreamsProducer<P>) {
    if let Err(e) = producer.abort() {
        tracing::warn!(error = %e, "aborting the transaction failed; retried before tasks reopen");
    }
    tasks.abort_all();
}
