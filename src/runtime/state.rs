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
//! every thread processes.
//!
//! Listeners see every transition, in the order the transitions were made,
//! and run without the state lock held, so a listener may read the state.
//! A transition takes a ticket under the state lock; its listeners run once
//! the listeners of every earlier ticket have returned. A listener must not
//! itself cause a transition (for example by calling `close`): that
//! transition would wait for the listener that caused it.

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
    /// The state and the ticket of the next transition.
    state: Mutex<(AppState, u64)>,
    changed: Condvar,
    listeners: Mutex<Listeners>,
    /// Signalled when a transition's listeners have all returned.
    delivered: Condvar,
}

struct Listeners {
    /// Transitions whose listeners have returned (the next ticket to deliver).
    delivered: u64,
    all: Vec<StateListener>,
}

impl StateCell {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(StateCell {
            state: Mutex::new((AppState::Created, 0)),
            changed: Condvar::new(),
            listeners: Mutex::new(Listeners {
                delivered: 0,
                all: Vec::new(),
            }),
            delivered: Condvar::new(),
        })
    }

    pub(crate) fn get(&self) -> AppState {
        self.state.lock().expect("state lock").0
    }

    pub(crate) fn add_listener(&self, listener: StateListener) {
        self.listeners
            .lock()
            .expect("listener lock")
            .all
            .push(listener);
    }

    /// Moves to `next` if that transition is allowed; returns whether it moved.
    pub(crate) fn transition(&self, next: AppState) -> bool {
        let mut guard = self.state.lock().expect("state lock");
        let (old, ticket) = *guard;
        if old == next || !old.can_move_to(next) {
            return false;
        }
        *guard = (next, ticket + 1);
        drop(guard);
        tracing::info!(from = ?old, to = ?next, "application state");
        self.changed.notify_all();
        let mut listeners = self.listeners.lock().expect("listener lock");
        while listeners.delivered != ticket {
            listeners = self.delivered.wait(listeners).expect("listener lock");
        }
        for listener in &listeners.all {
            listener(old, next);
        }
        listeners.delivered += 1;
        drop(listeners);
        self.delivered.notify_all();
        true
    }

    /// Waits until `pred(state)` holds or `timeout` passes; returns the last state seen.
    pub(crate) fn wait_for(&self, timeout: Duration, pred: impl Fn(AppState) -> bool) -> AppState {
        let deadline = Instant::now() + timeout;
        let mut guard = self.state.lock().expect("state lock");
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

    #[test]
    fn a_listener_can_read_the_state() {
        let cell = StateCell::new();
        let (seen_tx, seen_rx) = std::sync::mpsc::channel();
        let reader = Arc::downgrade(&cell);
        cell.add_listener(Box::new(move |_, _| {
            if let Some(cell) = reader.upgrade() {
                let _ = seen_tx.send(cell.get());
            }
        }));
        let moving = cell.clone();
        std::thread::spawn(move || moving.transition(AppState::Rebalancing));
        let seen = seen_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the listener did not finish: it deadlocked on the state lock");
        assert_eq!(seen, AppState::Rebalancing);
    }

    #[test]
    fn listeners_see_transitions_in_order_across_threads() {
        let cell = StateCell::new();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        cell.add_listener(Box::new(move |old, new| {
            std::thread::sleep(Duration::from_millis(20));
            s.lock().unwrap().push((old, new));
        }));
        assert!(cell.transition(AppState::Rebalancing));
        let mut handles = Vec::new();
        for next in [AppState::Running, AppState::PendingShutdown] {
            let c = cell.clone();
            handles.push(std::thread::spawn(move || c.transition(next)));
            std::thread::sleep(Duration::from_millis(5));
        }
        for h in handles {
            h.join().unwrap();
        }
        let seen = seen.lock().unwrap();
        // Each listener call continues from where the previous one ended.
        for pair in seen.windows(2) {
            assert_eq!(pair[0].1, pair[1].0, "out of order: {seen:?}");
        }
        assert_eq!(seen.last().unwrap().1, cell.get());
    }
}
