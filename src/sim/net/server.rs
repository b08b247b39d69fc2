//! The server's side of the network: each session's requests served in order, one at a time, on the model; the
//! model's answers and fired watches translated into what the client sees.

use super::client_link::session_error;
use super::{Answer, Delivery, Ev, Net, Request, Response, Ticket, Write};
use crate::sim::zk::{self as model, SessionId, WatchEvent as ModelEvent, WatchId, ZkErr};
use crate::zookeeper::{ReadResult, Stat, WatchEvent, Written, ZkError};

impl Net {
    /// Queues a request on the session's connection (the client sends it in order).
    pub(super) fn submit(&mut self, session: SessionId, request: Request) -> Ticket {
        let ticket = self.ticket();
        let Some(conn) = self.conns.get_mut(&session) else {
            self.answer(ticket, Err((None, ZkError::SessionExpired)));
            return ticket;
        };
        if let Some(state) = conn.ended {
            self.answer(ticket, Err((None, session_error(state))));
            return ticket;
        }
        conn.outbox.push_back((ticket, request));
        self.serve_soon(session);
        ticket
    }

    pub fn serve_soon(&mut self, session: SessionId) {
        let frozen = self.frozen;
        let Some(conn) = self.conns.get_mut(&session) else { return };
        if conn.serving || !conn.up || conn.ended.is_some() || frozen || conn.outbox.is_empty() {
            return;
        }
        conn.serving = true;
        let delay = self.latency();
        self.at(delay, Ev::Serve(session));
    }

    /// The server takes the session's next request and applies it.
    pub fn serve(&mut self, session: SessionId) {
        let frozen = self.frozen;
        let Some(conn) = self.conns.get_mut(&session) else { return };
        conn.serving = false;
        if !conn.up || conn.ended.is_some() || frozen {
            return;
        }
        // Requests from an old connection that the server reads late land before this one.
        let mut late = Vec::new();
        conn.late.retain_mut(|(request, countdown)| {
            *countdown = countdown.saturating_sub(1);
            if *countdown == 0 {
                late.push(request.clone());
                false
            } else {
                true
            }
        });
        let Some((ticket, request)) = conn.outbox.pop_front() else { return };
        conn.taken.insert(ticket);
        // A `sync` is a barrier: the leader answers it once everything proposed before it is applied, and a late
        // write from an old connection that reaches the leader after the session has moved is refused
        // (SessionMoved). So whatever of the old connection lands, lands before it (writers that resolve a lost reply
        // by reading rely on this, as on a real ensemble).
        if matches!(request, Request::Sync) {
            late.extend(conn.late.drain(..).map(|(request, _)| request));
        }
        for request in late {
            let _ = self.apply(session, &request);
        }
        let answer = self.apply(session, &request);
        self.fire_watches();
        self.deliver(session, Delivery::Reply(ticket, answer));
        self.serve_soon(session);
    }

    /// Applies one request to the model.
    fn apply(&mut self, s: SessionId, request: &Request) -> Answer {
        let err = |e: ZkErr| (None, zk_error(e));
        Ok(match request {
            Request::Create { path, data, mode } => {
                let (path, stat) = self.zk.create(s, path, data, *mode).map_err(err)?;
                Response::Created(path, stat_of(&stat))
            }
            Request::Delete { path, version } => {
                self.zk.delete_versioned(s, path, *version).map_err(err)?;
                Response::Done
            }
            Request::SetData { path, data, version } => {
                Response::Stat(stat_of(&self.zk.set_data(s, path, data, *version).map_err(err)?))
            }
            Request::GetData { path, watch } => {
                let (data, stat, id) = self.zk.get_data(s, path, watch.is_some()).map_err(err)?;
                self.register(s, id, *watch);
                Response::Data(data, stat_of(&stat))
            }
            Request::Exists { path, watch } => {
                let (stat, id) = self.zk.exists_watch(s, path, watch.is_some()).map_err(err)?;
                self.register(s, id, *watch);
                Response::Exists(stat.as_ref().map(stat_of))
            }
            Request::Children { path, watch } => {
                let (children, id) = self.zk.children(s, path, watch.is_some()).map_err(err)?;
                self.register(s, id, *watch);
                let stat = self.zk.exists(path).unwrap_or_default();
                Response::Children(children, stat_of(&stat))
            }
            Request::Ephemerals { prefix } => {
                if !self.zk.is_alive(s) {
                    return Err(err(ZkErr::SessionExpired));
                }
                Response::Paths(self.zk.ephemerals(s, prefix))
            }
            Request::Sync => {
                if !self.zk.is_alive(s) {
                    return Err(err(ZkErr::SessionExpired));
                }
                Response::Done
            }
            Request::MultiWrite(ops) => {
                // A checkpoint's fence, judged at the instant the server applies it (its lock node's check: the
                // other check, of the checkpoints in force, is no lock).
                let lowest = ops.iter().all(|op| match op {
                    model::WriteOp::Check { path, .. } if path.contains("/locks/") => self.lowest_contender(path),
                    _ => true,
                });
                let result = self.zk.multi_write(s, ops);
                self.writes.push(Write {
                    session: s,
                    ops: ops.clone(),
                    result: result.as_ref().map(drop).map_err(|&(_, e)| e),
                    checks_lowest: lowest,
                });
                match result {
                    Ok(results) => Response::Written(
                        results
                            .into_iter()
                            .map(|r| match r {
                                model::WriteResult::Created { path, stat } => {
                                    Written::Created { path, stat: stat_of(&stat) }
                                }
                                model::WriteResult::Deleted => Written::Deleted,
                                model::WriteResult::Set(stat) => Written::Set(stat_of(&stat)),
                                model::WriteResult::Checked => Written::Checked,
                            })
                            .collect(),
                    ),
                    // A dead session fails the request as a whole.
                    Err((_, ZkErr::SessionExpired)) => return Err((None, ZkError::SessionExpired)),
                    Err((index, e)) => return Err((Some(index), zk_error(e))),
                }
            }
            Request::MultiRead(ops) => {
                let results = self.zk.multi_read(s, ops).map_err(err)?;
                Response::Read(
                    results
                        .into_iter()
                        .map(|r| match r {
                            model::ReadResult::Children(children) => ReadResult::Children(children),
                            model::ReadResult::Data(data, stat) => ReadResult::Data(data, stat_of(&stat)),
                            model::ReadResult::Error(e) => ReadResult::Failed(zk_error(e)),
                        })
                        .collect(),
                )
            }
        })
    }

    /// Whether `path` is the lowest lock contender (by kazoo's rule) of its directory.
    fn lowest_contender(&self, path: &str) -> bool {
        let Some((dir, node)) = path.rsplit_once('/') else { return false };
        let lowest = self
            .zk
            .children_of(dir)
            .into_iter()
            .filter_map(|c| proto::layout::sequence(&c).map(|seq| (seq.to_owned(), c.clone())))
            .min()
            .map(|(_, c)| c);
        lowest.as_deref() == Some(node)
    }

    fn register(&mut self, s: SessionId, id: Option<WatchId>, ticket: Option<Ticket>) {
        if let (Some(id), Some(ticket), Some(conn)) = (id, ticket, self.conns.get_mut(&s)) {
            conn.watches.insert(id, ticket);
            conn.unseen.insert(ticket);
        }
    }

    /// Routes the watches the model fired to their clients (held back while a client is disconnected).
    pub fn fire_watches(&mut self) {
        for fired in self.zk.take_fired() {
            let Some(conn) = self.conns.get_mut(&fired.session) else { continue };
            let Some(ticket) = conn.watches.remove(&fired.watch) else { continue };
            let event = match fired.event {
                ModelEvent::NodeCreated => WatchEvent::Created,
                ModelEvent::NodeDeleted => WatchEvent::Deleted,
                ModelEvent::NodeDataChanged => WatchEvent::DataChanged,
                ModelEvent::NodeChildrenChanged => WatchEvent::ChildrenChanged,
            };
            if conn.up {
                self.deliver(fired.session, Delivery::Watch(ticket, event));
            } else {
                conn.stashed.push((ticket, event));
            }
        }
    }
}

fn zk_error(e: ZkErr) -> ZkError {
    match e {
        ZkErr::NoNode => ZkError::NoNode,
        ZkErr::NodeExists => ZkError::NodeExists,
        ZkErr::BadVersion => ZkError::BadVersion,
        ZkErr::NotEmpty => ZkError::NotEmpty,
        ZkErr::SessionExpired => ZkError::SessionExpired,
        ZkErr::NoChildrenForEphemerals => ZkError::NoChildrenForEphemerals,
    }
}

fn stat_of(stat: &model::Stat) -> Stat {
    Stat {
        czxid: stat.czxid,
        mzxid: stat.mzxid,
        pzxid: stat.mzxid,
        ctime: 0,
        mtime: 0,
        version: stat.version,
        cversion: stat.cversion as i32,
        aversion: 0,
        ephemeral_owner: stat.ephemeral_owner as i64,
        data_length: 0,
        num_children: stat.num_children as i32,
    }
}
