//! The watches armed by the latest reads of the core's inputs (the party, the shared set, the placement record),
//! held until they fire: one at a time per input, never dropped unfired while the loop runs (dropping an unfired
//! watch makes the client ask the server to remove the path's watches, racing with the next read's).

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;

use zookeeper_client::SessionState;

use super::requests::Done;
use crate::zookeeper::WatchEvent;
use proto::decision::Event;

/// One of the core's inputs that a read watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Input {
    Party,
    Set,
    Placement,
}

impl Input {
    const ALL: [Input; 3] = [Input::Party, Input::Set, Input::Placement];

    /// What the core hears when this input's watch fires (unless it saw the session end).
    fn changed(self) -> Event {
        match self {
            Input::Party => Event::PartyChanged,
            Input::Set => Event::SetChanged,
            Input::Placement => Event::PlacementChanged,
        }
    }
}

/// One slot per input: the watch armed (`None` once fired: a fired future is never polled again), and, for a loop
/// that polls every source before it picks one (the simulation), what a watch fired with and was not yet handed on.
pub(crate) struct InputWatches<W> {
    armed: [Option<W>; 3],
    #[cfg(test)]
    fired: [Option<WatchEvent>; 3],
}

impl<W: Future<Output = WatchEvent> + Unpin> InputWatches<W> {
    pub fn new() -> Self {
        InputWatches {
            armed: [None, None, None],
            #[cfg(test)]
            fired: [None, None, None],
        }
    }

    /// Keeps the watches a request's read armed.
    pub fn keep(&mut self, done: &mut Done<W>) {
        for (slot, watch) in
            self.armed.iter_mut().zip([done.party_watch.take(), done.set_watch.take(), done.placement_watch.take()])
        {
            if watch.is_some() {
                *slot = watch;
            }
        }
    }

    /// The core stopped: nothing more is read.
    pub fn clear(&mut self) {
        self.armed = [None, None, None];
    }

    /// The next watch to fire, as the core's event, with the session's end if that is what it saw (a party watch's
    /// end is also published: the party watch is always armed). Cancel-safe: the watches stay here until they fire.
    pub async fn fired(&mut self) -> (Event, Option<SessionState>) {
        poll_fn(|cx| {
            for input in Input::ALL {
                let Some(watch) = &mut self.armed[input as usize] else { continue };
                if let Poll::Ready(event) = Pin::new(watch).poll(cx) {
                    self.armed[input as usize] = None;
                    return Poll::Ready(as_event(input, event));
                }
            }
            Poll::Pending
        })
        .await
    }

    /// Polls every armed watch whose input has nothing fired in waiting, and keeps what fired (the simulation's
    /// loop, which looks at every source before it picks one).
    #[cfg(test)]
    pub fn poll_each(&mut self, cx: &mut std::task::Context<'_>) {
        for input in Input::ALL {
            let slot = input as usize;
            if self.fired[slot].is_none()
                && let Some(watch) = &mut self.armed[slot]
                && let Poll::Ready(event) = Pin::new(watch).poll(cx)
            {
                self.armed[slot] = None;
                self.fired[slot] = Some(event);
            }
        }
    }

    /// Whether `input`'s watch fired and waits to be handed on ([`poll_each`](Self::poll_each)).
    #[cfg(test)]
    pub fn has_fired(&self, input: Input) -> bool {
        self.fired[input as usize].is_some()
    }

    /// What `input`'s watch fired with, as [`fired`](Self::fired) gives it, if it did.
    #[cfg(test)]
    pub fn take_fired(&mut self, input: Input) -> Option<(Event, Option<SessionState>)> {
        self.fired[input as usize].take().map(|event| as_event(input, event))
    }
}

/// A fired watch as the core's event, with the session's end if that is what it saw.
fn as_event(input: Input, event: WatchEvent) -> (Event, Option<SessionState>) {
    match event {
        WatchEvent::SessionEnded(state) => (super::publish::session_event(state), Some(state)),
        _ => (input.changed(), None),
    }
}
