//! The states of a stream thread and the transitions between them, checked
//! in one place ([`ThreadState::can_become`]); the diagram is in the
//! module docs of `thread/mod.rs`.

/// Where a stream thread is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ThreadState {
    /// Built, not yet subscribed.
    Created,
    /// Subscribed; waiting for the first assignment.
    Starting,
    /// Inside a rebalance: tasks revoked or being assigned and restored.
    Rebalancing,
    /// Tasks open, processing.
    Running,
    /// An error aborted the tasks; reopening them is retried with backoff.
    Recovering,
    /// Shutting down: final commit, closing tasks, leaving the group.
    PendingShutdown,
    /// Stopped.
    Dead,
}

impl ThreadState {
    /// Whether the thread counts as rebalancing for the application state.
    pub(crate) fn in_rebalance(self) -> bool {
        matches!(self, ThreadState::Starting | ThreadState::Rebalancing)
    }

    /// Whether `self → next` is a transition of the state machine.
    pub(crate) fn can_become(self, next: ThreadState) -> bool {
        use ThreadState::*;
        match (self, next) {
            (Dead, _) => false,
            (_, Dead) => true,
            (PendingShutdown, _) => false,
            (_, PendingShutdown) => true,
            (Created, Starting) => true,
            (Starting | Running | Recovering, Rebalancing) => true,
            (Starting | Rebalancing | Recovering, Running) => true,
            (Starting | Rebalancing | Running, Recovering) => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ThreadState::*;

    #[test]
    fn a_thread_recovers_only_into_running_or_a_rebalance() {
        assert!(Recovering.can_become(Running));
        assert!(Recovering.can_become(Rebalancing));
        assert!(!Recovering.can_become(Starting));
        assert!(!Created.can_become(Running));
    }

    #[test]
    fn nothing_follows_dead_and_shutdown_only_ends() {
        assert!(!Dead.can_become(Running));
        assert!(PendingShutdown.can_become(Dead));
        assert!(!PendingShutdown.can_become(Running));
        assert!(Running.can_become(PendingShutdown));
    }

    #[test]
    fn only_starting_and_rebalancing_count_as_rebalancing() {
        let states = [
            Created,
            Starting,
            Rebalancing,
            Running,
            Recovering,
            PendingShutdown,
            Dead,
        ];
        let rebalancing: Vec<_> = states.into_iter().filter(|s| s.in_rebalance()).collect();
        assert_eq!(rebalancing, [Starting, Rebalancing]);
    }
}
