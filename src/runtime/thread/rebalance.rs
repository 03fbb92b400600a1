//! The consumer context that runs the rebalance protocol against the
//! [`StreamThread`]: commit (or abort) and close on revoke, create the tasks
//! on assign (counting the tasks revoked, assigned and kept), all before
//! the callback returns; the new tasks restore afterwards, in slices
//! between processing rounds.
//!
//! Two kinds of rebalance, by the consumer's rebalance protocol:
//!
//! * **eager** (the classic protocol): a revoke takes the whole assignment
//!   and the next assign gives the whole new one; every task closes and the
//!   kept ones reopen (cheaply: their stores are current).
//! * **incremental** (KIP-848's `consumer` protocol): a revoke names only
//!   the partitions that move away and an assign only those that arrive.
//!   A revoke commits everything processed (one transaction covers all
//!   tasks), then closes only the revoked tasks; an assign only creates
//!   the new ones. The other tasks keep their state, their buffered
//!   records and the consumer's fetch positions, and go on processing.

use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance, RebalanceProtocol};

use super::commit::{CommitScope, revoke};
use super::producer::TxnState;
use super::tasks::task_ids;
use super::{Shared, StreamThread, ThreadState, lock};
use crate::metrics::LagMeter;
use crate::processor::TaskId;

/// The consumer's context: runs the rebalance protocol against the thread.
pub(crate) struct RebalanceContext {
    pub(super) thread: Shared,
    pub(super) lag: LagMeter,
}

impl ClientContext for RebalanceContext {
    fn stats(&self, statistics: rdkafka::Statistics) {
        self.lag.update(&statistics);
    }

    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, message: &str) {
        crate::runtime::client_log::client_log(level, facility, message);
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        crate::runtime::client_log::client_error(&error, reason);
    }
}

/// How one rebalance changed a thread's tasks.
#[derive(Debug, PartialEq, Eq)]
struct TaskMoves {
    /// Owned before, not after.
    revoked: usize,
    /// Owned after, not before.
    assigned: usize,
    /// Owned before and after (under the eager protocol they were still
    /// closed and reopened).
    kept: usize,
}

impl TaskMoves {
    /// The change from tasks `before` to `after` (each sorted, distinct).
    fn between(before: &[TaskId], after: &[TaskId]) -> TaskMoves {
        let kept = after
            .iter()
            .filter(|id| before.binary_search(id).is_ok())
            .count();
        TaskMoves {
            revoked: before.len() - kept,
            assigned: after.len() - kept,
            kept,
        }
    }
}

impl StreamThread {
    fn enter_rebalance(&mut self) {
        self.meter.rebalance_started();
        if matches!(self.state, ThreadState::Running | ThreadState::Recovering) {
            self.set_state(ThreadState::Rebalancing);
        }
    }

    /// Revocation: commits (or aborts, when the assignment was lost) and
    /// closes every task (`commit::revoke`).
    fn on_revoke(&mut self, consumer: &BaseConsumer<RebalanceContext>) {
        self.enter_rebalance();
        let lost = consumer.assignment_lost();
        if lost && self.producer.state() == TxnState::InTransaction {
            self.meter.transaction_aborted();
        }
        let scope = CommitScope {
            partitions: &self.env.layout.partitions,
            layout: &self.env.layout,
        };
        let revoked = revoke(
            &mut self.tasks,
            &mut self.producer,
            consumer,
            &scope,
            lost,
            &mut self.creator,
        );
        if let Err(e) = revoked
            && e.recovery() == crate::runtime::Recovery::Fatal
        {
            self.fatal.get_or_insert(e);
        }
        self.meter.tasks_closed();
        self.revoked_tasks = task_ids(&self.assignment, &self.env.layout);
        self.assignment.clear();
        self.forget_output_times();
        self.generation += 1;
    }

    /// Assignment: creates the assigned tasks (they restore and start in
    /// the main loop). A recoverable failure leaves the thread `Recovering`.
    fn on_assign(
        &mut self,
        consumer: &BaseConsumer<RebalanceContext>,
        assigned: Vec<(String, i32)>,
    ) {
        self.generation += 1;
        self.assignment = assigned;
        let now = task_ids(&self.assignment, &self.env.layout);
        let before = std::mem::take(&mut self.revoked_tasks);
        self.record_moves(TaskMoves::between(&before, &now), "assigned");
        let opened = self
            .producer
            .abort()
            .and_then(|()| self.producer.reset())
            .and_then(|()| self.open_tasks(consumer));
        self.meter.rebalance_finished();
        match opened {
            Ok(()) => {
                self.recovery_attempts = 0;
                self.set_state(ThreadState::Running);
            }
            Err(e) => {
                if let Err(fatal) = self.handle_error(e) {
                    self.fatal.get_or_insert(fatal);
                }
            }
        }
    }
}

impl StreamThread {
    /// Incremental revocation of `revoked`: commits everything processed
    /// (or, when the assignment was lost, aborts and closes every task),
    /// then closes the revoked tasks; the others go on. A failed commit
    /// aborts and rebuilds the kept tasks from the last commit
    /// ([`StreamThread::handle_error`]).
    fn on_revoke_incremental(
        &mut self,
        consumer: &BaseConsumer<RebalanceContext>,
        revoked: Vec<(String, i32)>,
    ) {
        let recovering = self.enter_incremental();
        let before = task_ids(&self.assignment, &self.env.layout);
        let gone = task_ids(&revoked, &self.env.layout);
        if consumer.assignment_lost() {
            tracing::warn!("assignment lost: aborting instead of committing");
            self.abort();
            self.close_tasks();
            self.generation += 1;
        } else if !recovering {
            match self.commit(consumer) {
                Ok(_) => {
                    self.tasks.close(&gone, &mut self.creator);
                    self.meter.some_tasks_closed(&gone);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "commit on revoke failed; aborting");
                    if let Err(fatal) = self.handle_error(e) {
                        self.fatal.get_or_insert(fatal);
                    }
                }
            }
        }
        self.assignment.retain(|p| !revoked.contains(p));
        self.forget_output_times();
        self.dropped.extend(revoked);
        self.assignment_version += 1;
        let after = task_ids(&self.assignment, &self.env.layout);
        self.finish_incremental(TaskMoves::between(&before, &after));
    }

    /// Incremental assignment of `added`: creates their tasks (they restore
    /// in slices); the running ones are not touched. While the thread is
    /// recovering, the recovery opens them with the rest.
    fn on_assign_incremental(
        &mut self,
        consumer: &BaseConsumer<RebalanceContext>,
        added: Vec<(String, i32)>,
    ) {
        let recovering = self.enter_incremental();
        let before = task_ids(&self.assignment, &self.env.layout);
        for p in added {
            if !self.assignment.contains(&p) {
                self.assignment.push(p);
            }
        }
        self.assignment_version += 1;
        let after = task_ids(&self.assignment, &self.env.layout);
        if !recovering
            && let Err(e) = self.open_tasks(consumer)
            && let Err(fatal) = self.handle_error(e)
        {
            self.fatal.get_or_insert(fatal);
        }
        self.finish_incremental(TaskMoves::between(&before, &after));
    }

    /// Counts a rebalance's task moves (`weir_rebalance_tasks_total`) and
    /// logs them with `what` as the message.
    fn record_moves(&mut self, moves: TaskMoves, what: &str) {
        self.meter
            .tasks_moved(moves.revoked, moves.assigned, moves.kept);
        tracing::info!(
            partitions = self.assignment.len(),
            revoked = moves.revoked,
            assigned = moves.assigned,
            kept = moves.kept,
            "{what}"
        );
    }

    /// Leaves `Starting` once the consumer is in the group with no
    /// partitions. Under KIP-848 a member whose assignment is empty from
    /// the start gets no rebalance callback (librdkafka calls it only when
    /// the assignment changes), so without this an instance beyond the
    /// partition count would never be ready. The consumer counts as joined
    /// when its member epoch is positive and no assignment has followed
    /// for [`EMPTY_JOIN_SETTLE`] (the callback of a non-empty first
    /// assignment comes within milliseconds of the epoch).
    pub(super) fn note_empty_join(&mut self, consumer: &BaseConsumer<RebalanceContext>) {
        if !self.assignment.is_empty() || !incremental(consumer) {
            return;
        }
        if crate::runtime::group_describe::member_epoch(consumer.client()) <= 0 {
            self.joined_empty_at = None;
            return;
        }
        let since = *self.joined_empty_at.get_or_insert_with(Instant::now);
        if since.elapsed() >= EMPTY_JOIN_SETTLE {
            tracing::info!("joined the group with no partitions (more members than partitions)");
            self.set_state(ThreadState::Running);
        }
    }

    /// Starts an incremental rebalance; returns whether the thread is
    /// recovering (its tasks are closed; the recovery reopens them).
    fn enter_incremental(&mut self) -> bool {
        self.meter.rebalance_started();
        if self.state == ThreadState::Running {
            self.set_state(ThreadState::Rebalancing);
        }
        self.state == ThreadState::Recovering
    }

    /// Counts and logs an incremental rebalance and leaves `Rebalancing`.
    fn finish_incremental(&mut self, moves: TaskMoves) {
        self.record_moves(moves, "incremental rebalance");
        self.meter.rebalance_finished();
        if matches!(self.state, ThreadState::Rebalancing | ThreadState::Starting) {
            self.set_state(ThreadState::Running);
        }
    }
}

/// How long a KIP-848 member waits, in the group with no partitions, before
/// it counts as started without any ([`StreamThread::note_empty_join`]).
const EMPTY_JOIN_SETTLE: Duration = Duration::from_millis(500);

/// Whether the consumer's rebalances are incremental (KIP-848's protocol
/// reports itself as cooperative).
fn incremental(consumer: &BaseConsumer<RebalanceContext>) -> bool {
    matches!(
        consumer.rebalance_protocol(),
        RebalanceProtocol::Cooperative
    )
}

/// The partitions of a rebalance event.
fn partitions(tpl: &rdkafka::TopicPartitionList) -> Vec<(String, i32)> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_string(), e.partition()))
        .collect()
}

impl ConsumerContext for RebalanceContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let mut thread = lock(&self.thread);
        match rebalance {
            Rebalance::Revoke(tpl) => {
                let _span =
                    tracing::info_span!("rebalance", thread = thread.index, phase = "revoke")
                        .entered();
                if incremental(consumer) {
                    thread.on_revoke_incremental(consumer, partitions(tpl));
                } else {
                    thread.on_revoke(consumer);
                }
            }
            Rebalance::Assign(_) => {
                if !incremental(consumer) {
                    thread.enter_rebalance();
                }
            }
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let mut thread = lock(&self.thread);
            let _span =
                tracing::info_span!("rebalance", thread = thread.index, phase = "assign").entered();
            if incremental(consumer) {
                thread.on_assign_incremental(consumer, partitions(tpl));
            } else {
                thread.on_assign(consumer, partitions(tpl));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TaskMoves;
    use crate::processor::TaskId;

    fn ids(list: &[(u32, i32)]) -> Vec<TaskId> {
        list.iter()
            .map(|&(subtopology, partition)| TaskId {
                subtopology,
                partition,
            })
            .collect()
    }

    #[test]
    fn task_moves_count_revoked_assigned_and_kept() {
        let before = ids(&[(0, 0), (0, 1), (1, 0), (1, 1)]);
        let after = ids(&[(0, 1), (1, 1), (1, 2)]);
        let moves = TaskMoves::between(&before, &after);
        assert_eq!(
            moves,
            TaskMoves {
                revoked: 2,
                assigned: 1,
                kept: 2
            }
        );
        // Joining: everything is new; leaving: everything is revoked.
        assert_eq!(TaskMoves::between(&[], &after).assigned, 3);
        assert_eq!(TaskMoves::between(&before, &[]).revoked, 4);
    }
}
