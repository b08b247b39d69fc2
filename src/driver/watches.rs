//! The watches armed by the latest reads of the core's inputs (the party, the shared set, the placement record),
//! held until they fire: one at a time per input, never dropped unfired while the loop runs (dropping an unfired
//! watch makes the client ask the server to remove the path's watches, racing with the next read's).

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;

use zookeeper_client::SessionState;

use super::requests::Done;
use crate::decision::Event;
use crate::zookeeper::WatchEvent;

/// One slot per input; `None` once fired (a fired future is never polled again).
pub(super) struct InputWatches<W> {
    party: Option<W>,
    set: Option<W>,
    placement: Option<W>,
}

impl<W: Future<Output = WatchEvent> + Unpin> InputWatches<W> {
    pub fn new() -> Self {
        InputWatches { party: None, set: None, placement: None }
    }

    /// Keeps the watches a request's read armed.
    pub fn keep(&mut self, done: &mut Done<W>) {
        for (slot, watch) in [
            (&mut self.party, done.party_watch.take()),
            (&mut self.set, done.set_watch.take()),
            (&mut self.placement, done.placement_watch.take()),
        ] {
            if watch.is_some() {
                *slot = watch;
            }
        }
    }

    /// The core stopped: nothing more is read.
    pub fn clear(&mut self) {
        (self.party, self.set, self.placement) = (None, None, None);
    }

    /// The next watch to fire, as the core's event, with the session's end if that is what it saw (a party watch's
    /// end is also published: the party watch is always armed). Cancel-safe: the watches stay here until they fire.
    pub async fn fired(&mut self) -> (Event, Option<SessionState>) {
        poll_fn(|cx| {
            for (slot, changed) in [
                (&mut self.party, Event::PartyChanged),
                (&mut self.set, Event::SetChanged),
                (&mut self.placement, Event::PlacementChanged),
            ] {
                let Some(watch) = slot else { continue };
                if let Poll::Ready(event) = Pin::new(watch).poll(cx) {
                    *slot = None;
                    return Poll::Ready(match event {
                        WatchEvent::SessionEnded(state) => (super::publish::session_event(state), Some(state)),
                        _ => (changed, None),
                    });
                }
            }
            Poll::Pending
        })
        .await
    }
}
