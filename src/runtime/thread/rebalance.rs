//! The consumer context that runs the rebalance protocol against [`Core`]:
//! commit (or abort) and close on revoke, open and restore on assign, all
//! before the callback returns.

use super::*;

/// The consumer's context: runs the rebalance protocol against [`Core`].
pub(crate) struct RebalanceContext {
    pub(super) core: Arc<Mutex<Option<Core>>>,
    pub(super) env: Arc<ThreadEnv>,
    pub(super) lag: LagMeter,
}

impl ClientContext for RebalanceContext {
    fn stats(&self, statistics: rdkafka::Statistics) {
        self.lag.update(&statistics);
    }
}

impl RebalanceContext {
    fn lock(&self) -> MutexGuard<'_, Option<Core>> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn enter_rebalance(&self, core: &mut Core) {
        core.meter.rebalance_started();
        if !core.in_rebalance {
            core.in_rebalance = true;
            self.env.rebalancing.fetch_add(1, Ordering::SeqCst);
            self.env.state.transition(AppState::Rebalancing);
        }
    }

    fn leave_rebalance(&self, core: &mut Core) {
        core.meter.rebalance_finished();
        if core.in_rebalance {
            core.in_rebalance = false;
            if self.env.rebalancing.fetch_sub(1, Ordering::SeqCst) == 1 {
                self.env.state.transition(AppState::Running);
            }
        }
    }
}

impl ConsumerContext for RebalanceContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let mut guard = self.lock();
        let Some(core) = guard.as_mut() else { return };
        match rebalance {
            Rebalance::Revoke(_) => {
                let _span =
                    tracing::info_span!("rebalance", thread = core.thread, phase = "revoke")
                        .entered();
                self.enter_rebalance(core);
                if consumer.assignment_lost() {
                    tracing::warn!("assignment lost: aborting instead of committing");
                    core.abort();
                } else {
                    match core.commit(consumer) {
                        Ok(()) => {}
                        Err(TxnError::Abort(e)) => {
                            tracing::warn!(error = %e, "commit on revoke failed; aborting");
                            core.abort();
                        }
                        Err(TxnError::Fatal(e)) => {
                            core.abort();
                            core.fatal.get_or_insert(e);
                        }
                    }
                }
                core.close_tasks();
                core.assignment.clear();
                core.generation += 1;
            }
            Rebalance::Assign(_) => self.enter_rebalance(core),
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let mut guard = self.lock();
        let Some(core) = guard.as_mut() else { return };
        if let Rebalance::Assign(tpl) = rebalance {
            let _span =
                tracing::info_span!("rebalance", thread = core.thread, phase = "assign").entered();
            core.generation += 1;
            core.assignment = tpl
                .elements()
                .iter()
                .map(|e| (e.topic().to_string(), e.partition()))
                .collect();
            tracing::info!(partitions = core.assignment.len(), "assigned");
            if let Err(e) = core.open_tasks(consumer) {
                core.fatal.get_or_insert(e);
            }
            self.leave_rebalance(core);
        }
    }
}
