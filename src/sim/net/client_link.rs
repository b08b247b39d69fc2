//! One session's connection, from the client's side: its state, what travels over it in order (replies, watch
//! events, session states), and what befalls it (cuts, a crashed client, reconnections, the session's end).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use zookeeper_client::SessionState;

use super::{ActorId, Delivery, Ev, Net, Request, Ticket};
use crate::sim::zk::{SessionId, WatchId};
use crate::zookeeper::{WatchEvent, ZkError};

/// One session's connection, from the client's side.
#[derive(Debug)]
pub(super) struct Conn {
    /// Whose futures wait on it.
    pub(super) owner: ActorId,
    pub(super) up: bool,
    /// Bumped at every cut: deliveries sent on an older connection are lost.
    pub(super) link: u64,
    /// Requests not yet taken by the server.
    pub(super) outbox: VecDeque<(Ticket, Request)>,
    /// Requests taken by the server whose replies have not arrived.
    pub(super) taken: BTreeSet<Ticket>,
    /// Requests on the wire at a cut that the server applies late: after this many more of the session's requests.
    pub(super) late: Vec<(Request, u32)>,
    pub(super) serving: bool,
    /// Deliveries to this client stay in order (one TCP connection).
    pub(super) last_delivery: Duration,
    /// Session states for the owner's state watcher, oldest first.
    pub(super) states: VecDeque<SessionState>,
    /// Model watch → the ticket its event answers.
    pub(super) watches: BTreeMap<WatchId, Ticket>,
    /// Watch events that fired while disconnected: delivered on reconnection (the client's SetWatches).
    pub(super) stashed: Vec<(Ticket, WatchEvent)>,
    /// Every watch the client has not yet seen fire (set, fired on the way, or stashed): at the session's end, each
    /// gets the end, as the client's watch registry does.
    pub(super) unseen: BTreeSet<Ticket>,
    /// The session's end, once known to the client.
    pub(super) ended: Option<SessionState>,
}

impl Net {
    /// A new session whose client belongs to `owner`.
    pub fn open_session(&mut self, owner: ActorId) -> SessionId {
        let session = self.zk.open_session();
        let conn = Conn {
            owner,
            up: true,
            link: 0,
            outbox: VecDeque::new(),
            taken: BTreeSet::new(),
            late: Vec::new(),
            serving: false,
            last_delivery: self.now,
            states: VecDeque::new(),
            watches: BTreeMap::new(),
            unseen: BTreeSet::new(),
            stashed: Vec::new(),
            ended: None,
        };
        self.conns.insert(session, conn);
        session
    }

    pub fn is_up(&self, session: SessionId) -> bool {
        self.conns.get(&session).is_some_and(|c| c.up && c.ended.is_none())
    }

    pub fn link(&self, session: SessionId) -> u64 {
        self.conns.get(&session).map_or(0, |c| c.link)
    }

    /// Takes the session states the client saw since the last call.
    pub fn take_states(&mut self, session: SessionId) -> Vec<SessionState> {
        self.conns.get_mut(&session).map(|c| c.states.drain(..).collect()).unwrap_or_default()
    }

    pub fn has_states(&self, session: SessionId) -> bool {
        self.conns.get(&session).is_some_and(|c| !c.states.is_empty())
    }

    // ---- Delivery ---------------------------------------------------------------------------------------------

    /// Sends something to a session's client over its current connection, after everything already sent to it.
    pub(super) fn deliver(&mut self, session: SessionId, what: Delivery) {
        let latency = self.latency();
        let now = self.now;
        let Some(conn) = self.conns.get_mut(&session) else { return };
        let when = (now + latency).max(conn.last_delivery);
        conn.last_delivery = when;
        let link = conn.link;
        self.at(when - now, Ev::Deliver { session, link, what });
    }

    /// Something reaches a client (lost if its connection was cut since it was sent: a reply then fails with the
    /// lost connection instead, which the cut already queued).
    pub fn arrive(&mut self, session: SessionId, link: u64, what: Delivery) {
        let Some(conn) = self.conns.get_mut(&session) else { return };
        if let Delivery::Lost(ticket) = what {
            // Even if the connection came back before the client noticed the cut (a reconnection bumps the link):
            // dropping it would leave the request's caller waiting forever, which no real client does.
            let error = conn.ended.map_or(ZkError::ConnectionLoss, session_error);
            self.answer(ticket, Err((None, error)));
            return;
        }
        if conn.link != link {
            // A watch event is not lost with its connection: the client sets its watches again on the next one, and
            // the server fires those whose node changed meanwhile.
            if let (Delivery::Watch(ticket, event), None) = (what, conn.ended) {
                if conn.up {
                    self.deliver(session, Delivery::Watch(ticket, event));
                } else {
                    conn.stashed.push((ticket, event));
                }
            }
            return;
        }
        let owner = conn.owner;
        match what {
            Delivery::Reply(ticket, answer) => {
                conn.taken.remove(&ticket);
                self.answer(ticket, answer);
            }
            Delivery::Watch(ticket, event) => {
                conn.unseen.remove(&ticket);
                self.watch_event(ticket, event);
            }
            Delivery::State(state) => {
                conn.states.push_back(state);
                self.dirty.insert(owner);
            }
            Delivery::Lost(_) => {}
        }
    }

    // ---- Faults -----------------------------------------------------------------------------------------------

    /// Cuts a session's connection; the client notices after `detect` (its read timeout, or at once for a reset).
    /// Requests whose replies are out fail with the lost connection (they were applied); a random prefix of those not
    /// yet taken was on the wire and fails too, unapplied, or applied late; the rest wait for the reconnection.
    pub fn cut(&mut self, session: SessionId, detect: Duration) {
        let late_share = self.rng.below(2);
        let Some(conn) = self.conns.get_mut(&session) else { return };
        if !conn.up || conn.ended.is_some() {
            return;
        }
        conn.up = false;
        conn.link += 1;
        conn.serving = false;
        let mut failed: Vec<Ticket> = std::mem::take(&mut conn.taken).into_iter().collect();
        let on_the_wire = self.rng.below(conn.outbox.len() as u64 + 1) as usize;
        for _ in 0..on_the_wire {
            if let Some((ticket, request)) = conn.outbox.pop_front() {
                failed.push(ticket);
                if late_share == 1 && self.rng.below(2) == 0 {
                    let countdown = 1 + self.rng.below(3) as u32;
                    conn.late.push((request, countdown));
                }
            }
        }
        // The client learns of it all at once, after `detect`, in order, over no connection.
        let link = conn.link;
        let at = (self.now + detect).max(conn.last_delivery);
        conn.last_delivery = at + Duration::from_micros(failed.len() as u64 + 1);
        let delay = at - self.now;
        self.at(delay, Ev::Deliver { session, link, what: Delivery::State(SessionState::Disconnected) });
        for (k, ticket) in failed.into_iter().enumerate() {
            let what = Delivery::Lost(ticket);
            self.at(delay + Duration::from_micros(k as u64 + 1), Ev::Deliver { session, link, what });
        }
    }

    /// The process is gone (crashed): its connection drops and nothing reaches its client any more.
    pub fn abandon(&mut self, session: SessionId) {
        if let Some(conn) = self.conns.get_mut(&session) {
            conn.up = false;
            conn.link += 1;
            conn.serving = false;
            conn.outbox.clear();
            conn.taken.clear();
            conn.late.clear();
            conn.ended = Some(SessionState::Closed);
        }
    }

    /// The sessions whose client is alive but disconnected.
    pub fn down(&self) -> Vec<(SessionId, u64)> {
        self.conns.iter().filter(|(_, c)| !c.up && c.ended.is_none()).map(|(&s, c)| (s, c.link)).collect()
    }

    /// The client's connection is back, if its session lives: watch events it missed arrive, queued requests go.
    /// Returns `false` if the session has expired (the client then learns so).
    pub fn reconnect(&mut self, session: SessionId) -> bool {
        let alive = self.zk.is_alive(session);
        let Some(conn) = self.conns.get_mut(&session) else { return false };
        if conn.up || conn.ended.is_some() {
            return alive;
        }
        conn.up = true;
        conn.link += 1;
        if !alive {
            self.end(session, SessionState::Expired);
            return false;
        }
        let stashed = std::mem::take(&mut conn.stashed);
        self.deliver(session, Delivery::State(SessionState::SyncConnected));
        for (ticket, event) in stashed {
            self.deliver(session, Delivery::Watch(ticket, event));
        }
        self.serve_soon(session);
        true
    }

    /// The client learns that its session ended: every request and watch of it fails with that end.
    pub fn end(&mut self, session: SessionId, state: SessionState) {
        let Some(conn) = self.conns.get_mut(&session) else { return };
        if conn.ended.is_some() {
            return;
        }
        conn.ended = Some(state);
        conn.up = true;
        conn.link += 1;
        conn.late.clear();
        let owner = conn.owner;
        let mut tickets: Vec<Ticket> = conn.outbox.drain(..).map(|(ticket, _)| ticket).collect();
        tickets.extend(std::mem::take(&mut conn.taken));
        conn.watches.clear();
        conn.stashed.clear();
        let watches = std::mem::take(&mut conn.unseen);
        conn.states.push_back(state);
        for ticket in tickets {
            self.answer(ticket, Err((None, session_error(state))));
        }
        for ticket in watches {
            self.watch_event(ticket, WatchEvent::SessionEnded(state));
        }
        self.dirty.insert(owner);
    }

    /// Closes a session (its process ended): the server deletes its ephemerals.
    pub fn close(&mut self, session: SessionId) {
        self.zk.expire(session);
        self.fire_watches();
        self.end(session, SessionState::Closed);
    }
}

/// The client's error for a session's end.
pub(super) fn session_error(state: SessionState) -> ZkError {
    match state {
        SessionState::Closed => ZkError::ClientClosed,
        SessionState::AuthFailed => ZkError::AuthFailed,
        _ => ZkError::SessionExpired,
    }
}
