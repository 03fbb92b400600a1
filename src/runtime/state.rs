//! The application's state machine (Kafka Streams' `KafkaStreams.State`).
//!
//! ```text
//!  Created ──start()──► Rebalancing ◄──► Running
//!                           │               │
//!                           └──close()──────┴──► PendingShutdown ──► NotRunning
//!  any state ──fatal error──► PendingError ──► Error
//! ```
//!
//! The application is `Rebalancing` while any stream thread is between a
//! revocation and the end of restoring its new tasks, and `Running` once
//! every thread processes. Listeners see every transition in order.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The state of an application instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AppState {
    /// Built, not started.
    Created,
    /// Joining the group, or restoring the tasks of a new assignment.
    Rebalancing,
    /// Every thread processes its tasks.
    Running,
    /// `close` was called; threads commit and leave the group.
    PendingShutdown,
    /// Stopped cleanly.
    NotRunning,
    /// A fatal error happened; threads are stopping.
    PendingError,
    /// Stopped after a fatal error (see [`super::KafkaStreams::error`]).
    Error,
}

impl AppState {
    fn can_move_to(self, next: AppState) -> bool {
        use AppState::*;
        matches!(
            (self, next),
            (Created, Rebalancing)
                | (Created, PendingShutdown)
                | (Rebalancing, Running)
                | (Running, Rebalancing)
                | (Rebalancing, PendingShutdown)
                | (Running, PendingShutdown)
                | (PendingShutdown, NotRunning)
                | (Created | Rebalancing | Running, PendingError)
                | (PendingError, Error)
        )
    }
}

/// Called on every state change with `(old, new)`.
pub type StateListener = Box<dyn Fn(AppState, AppState) + Send + Sync>;

pub(crate) struct StateCell {
    inner: Mutex<(AppState, Vec<StateListener>)>,
    changed: Condvar,
}

impl StateCell {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(StateCell {
            inner: Mutex::new((AppState::Created, Vec::new())),
            changed: Condvar::new(),
        })
    }

    pub(crate) fn get(&self) -> AppState {
        self.inner.lock().expect("state lock").0
    }

    pub(crate) fn add_listener(&self, listener: StateListener) {
        self.inner.lock().expect("state lock").1.push(listener);
    }

    /// Moves to `next` if that transition is allowed; returns whether it moved.
    pub(crate) fn transition(&self, next: AppState) -> bool {
        let mut guard = self.inner.lock().expect("state lock");
        let old = guard.0;
        if old == next || !old.can_move_to(next) {
            return false;
        }
        guard.0 = next;
        tracing::info!(from = ?old, to = ?next, "application state");
        for listener in &guard.1 {
            listener(old, next);
        }
        drop(guard);
        self.changed.notify_all();
        true
    }

    /// Waits until `pred(state)` holds or `timeout` passes; returns the last state seen.
    pub(crate) fn wait_for(&self, timeout: Duration, pred: impl Fn(AppState) -> bool) -> AppState {
        let deadline = Instant::now() + timeout;
        let mut guard = self.inner.lock().expect("state lock");
        while !pred(guard.0) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            guard = self
                .changed
                .wait_timeout(guard, deadline - now)
                .expect("state lock")
                .0;
        }
        guard.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn only_documented_transitions_happen() {
        let cell = StateCell::new();
        let seen = Arc::new(AtomicUsize::new(0));
        let s = seen.clone();
        cell.add_listener(Box::new(move |_, _| {
            s.fetch_add(1, Ordering::SeqCst);
        }));
        assert!(
            !cell.transition(AppState::Running),
            "Created cannot jump to Running"
        );
        assert!(cell.transition(AppState::Rebalancing));
        assert!(cell.transition(AppState::Running));
        assert!(cell.transition(AppState::PendingShutdown));
        assert!(
            !cell.transition(AppState::Running),
            "no way back from shutdown"
        );
        assert!(cell.transition(AppState::NotRunning));
        assert_eq!(seen.load(Ordering::SeqCst), 4);
        assert_eq!(cell.get(), AppState::NotRunning);
    }
}
