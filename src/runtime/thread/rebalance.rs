//! The consumer context that runs the rebalance protocol against the
//! [`StreamThread`]: commit (or abort) and close on revoke, create the tasks
//! on assign (counting the tasks revoked, assigned and kept), all before
//! the callback returns; the new tasks restore afterwards, in slices
//! between processing rounds.

use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};

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
        let moves = TaskMoves::between(&before, &now);
        self.meter
            .tasks_moved(moves.revoked, moves.assigned, moves.kept);
        tracing::info!(
            partitions = self.assignment.len(),
            revoked = moves.revoked,
            assigned = moves.assigned,
            kept = moves.kept,
            "assigned"
        );
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

impl ConsumerContext for RebalanceContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let mut thread = lock(&self.thread);
        match rebalance {
            Rebalance::Revoke(_) => {
                let _span =
                    tracing::info_span!("rebalance", thread = thread.index, phase = "revoke")
                        .entered();
                thread.on_revoke(consumer);
            }
            Rebalance::Assign(_) => thread.enter_rebalance(),
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let mut thread = lock(&self.thread);
            let _span =
                tracing::info_span!("rebalance", thread = thread.index, phase = "assign").entered();
            let assigned = tpl
                .elements()
                .iter()
                .map(|e| (e.topic().to_string(), e.partition()))
                .collect();
            thread.on_assign(consumer, assigned);
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
