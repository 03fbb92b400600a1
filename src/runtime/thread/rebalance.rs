//! The consumer context that runs the rebalance protocol against the
//! [`StreamThread`]: commit (or abort) and close on revoke, open and restore
//! on assign, all before the callback returns.

use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};

use super::commit::{CommitScope, revoke};
use super::producer::TxnState;
use super::{Shared, StreamThread, ThreadState, lock};
use crate::metrics::LagMeter;

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
        self.assignment.clear();
        self.generation += 1;
    }

    /// Assignment: opens, restores and initializes the assigned tasks. A
    /// recoverable failure leaves the thread `Recovering`.
    fn on_assign(
        &mut self,
        consumer: &BaseConsumer<RebalanceContext>,
        assigned: Vec<(String, i32)>,
    ) {
        self.generation += 1;
        self.assignment = assigned;
        tracing::info!(partitions = self.assignment.len(), "assigned");
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
