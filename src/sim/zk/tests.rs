//! The model's own tests: each checks one ZooKeeper rule against the answers the model gives.

use super::*;

/// (session, watch, path, event) of each fired watch, for compact assertions.
fn fired(zk: &mut Zk) -> Vec<(SessionId, WatchId, String, WatchEvent)> {
    zk.take_fired().into_iter().map(|f| (f.session, f.watch, f.path, f.event)).collect()
}

fn create(path: &str, mode: Mode) -> WriteOp {
    WriteOp::Create { path: path.to_owned(), data: path.as_bytes().to_vec(), mode }
}

fn delete(path: &str) -> WriteOp {
    WriteOp::Delete { path: path.to_owned(), version: None }
}

#[test]
fn new_tree_and_sessions() {
    let mut zk = Zk::default();
    assert_eq!(zk.exists("/"), Some(Stat::default()));
    assert_eq!(zk.zxid(), 0);
    let (a, b) = (zk.open_session(), zk.open_session());
    assert_eq!((a, b), (1, 2));
    assert!(zk.is_alive(a) && zk.is_alive(b) && !zk.is_alive(0) && !zk.is_alive(3));
    // createSession is a transaction.
    assert_eq!(zk.zxid(), 2);
}

#[test]
fn create_errors_and_paths() {
    let mut zk = Zk::new();
    let s = zk.open_session();
    assert_eq!(zk.create(s, "/a/b", b"", Mode::Persistent), Err(ZkErr::NoNode));
    let (path, stat) = zk.create(s, "/a", b"x", Mode::Persistent).unwrap();
    assert_eq!(path, "/a");
    assert_eq!((stat.czxid, stat.mzxid, stat.ephemeral_owner, stat.num_children), (zk.zxid(), zk.zxid(), 0, 0));
    assert_eq!(zk.create(s, "/a", b"", Mode::Persistent), Err(ZkErr::NodeExists));
    assert_eq!(zk.create(s, "/", b"", Mode::Persistent), Err(ZkErr::NodeExists));
    for bad in ["a", "/a/", "//a", "/a//b", "/a/.", "/a/..", ""] {
        assert_eq!(zk.create(s, bad, b"", Mode::Persistent), Err(ZkErr::NoNode), "{bad:?}");
        assert_eq!(zk.children(s, bad, true), Err(ZkErr::NoNode), "{bad:?}");
    }
    let (eph, stat) = zk.create(s, "/a/e-", b"", Mode::EphemeralSequential).unwrap();
    assert_eq!(stat.ephemeral_owner, s);
    assert_eq!(zk.create(s, &format!("{eph}/c"), b"", Mode::Persistent), Err(ZkErr::NoChildrenForEphemerals));
    // The server checks NodeExists before NoChildrenForEphemerals; a sequential "/a/" names a child of "/a".
    assert_eq!(zk.create(s, &eph, b"", Mode::Persistent), Err(ZkErr::NodeExists));
    assert_eq!(zk.create(s, "/a/", b"", Mode::EphemeralSequential).unwrap().0, "/a/0000000001");
    assert_eq!(zk.delete(s, "/a"), Err(ZkErr::NotEmpty));
    assert_eq!(zk.delete(s, "/missing"), Err(ZkErr::NoNode));
    assert_eq!(zk.delete(s, "/"), Err(ZkErr::NoNode));
    assert_eq!(zk.data_of("/a"), Some(b"x".to_vec()));
    assert_eq!(zk.children_of("/a"), ["0000000001", "e-0000000000"]);
    assert_eq!(zk.children_of("/missing"), Vec::<String>::new());
    assert_eq!(zk.exists("/a").unwrap().num_children, 2);
    assert_eq!(zk.get_data(s, "/a", false), Ok((b"x".to_vec(), zk.exists("/a").unwrap(), None)));
}

#[test]
fn sequential_numbering_across_deletes() {
    let mut zk = Zk::new();
    let s = zk.open_session();
    zk.mkdir(s, "/a/locks/x").unwrap();
    let lock = "/a/locks/x/abc__lock__";
    let first = zk.create(s, lock, b"", Mode::EphemeralSequential).unwrap().0;
    let second = zk.create(s, lock, b"", Mode::EphemeralSequential).unwrap().0;
    assert_eq!(
        (first.as_str(), second.as_str()),
        ("/a/locks/x/abc__lock__0000000000", "/a/locks/x/abc__lock__0000000001")
    );
    zk.delete(s, &first).unwrap();
    zk.delete(s, &second).unwrap();
    // Deletes leave the suffix counter alone (only pzxid moves on the server); numbers are never reused. The
    // cversion a client sees counts the deletes too (2 × creates − children, as the server's copyStat reports).
    assert_eq!(zk.exists("/a/locks/x").unwrap().cversion, 4);
    // Persistent children count too, and a failed create (NodeExists) does not.
    zk.create(s, "/a/locks/x/p", b"", Mode::Persistent).unwrap();
    assert_eq!(zk.create(s, "/a/locks/x/p", b"", Mode::Persistent), Err(ZkErr::NodeExists));
    let third = zk.create(s, "/a/locks/x/other-", b"", Mode::EphemeralSequential).unwrap().0;
    assert_eq!(third, "/a/locks/x/other-0000000003");
    let stat = zk.exists("/a/locks/x").unwrap();
    assert_eq!((stat.cversion, stat.num_children), (6, 2));
    // Counters are per parent.
    assert_eq!(zk.create(s, "/a/n-", b"", Mode::EphemeralSequential).unwrap().0, "/a/n-0000000001");
}

#[test]
fn mkdir_creates_ancestors_once() {
    let mut zk = Zk::new();
    let s = zk.open_session();
    zk.mkdir(s, "/a/b/c").unwrap();
    assert_eq!(zk.zxid(), 4, "one create per missing node");
    assert!(zk.exists("/a/b/c").is_some());
    zk.mkdir(s, "/a/b/c").unwrap();
    zk.mkdir(s, "/a").unwrap();
    zk.mkdir(s, "/").unwrap();
    assert_eq!(zk.zxid(), 4, "existing nodes are left alone");
    zk.mkdir(s, "/a/b/d").unwrap();
    assert_eq!(zk.children_of("/a/b"), ["c", "d"]);
    let eph = zk.create(s, "/a/e", b"", Mode::EphemeralSequential).unwrap().0;
    assert_eq!(zk.mkdir(s, &format!("{eph}/x")), Err(ZkErr::NoChildrenForEphemerals));
    assert_eq!(zk.mkdir(s, "/a/"), Err(ZkErr::NoNode));
}

#[test]
fn plain_ephemerals_keep_their_name_and_end_with_their_session() {
    let mut zk = Zk::new();
    let (s, t) = (zk.open_session(), zk.open_session());
    zk.mkdir(s, "/p").unwrap();
    let (path, stat) = zk.create(s, "/p/abc-w1", b"w1", Mode::Ephemeral).unwrap();
    assert_eq!((path.as_str(), stat.ephemeral_owner), ("/p/abc-w1", s));
    assert_eq!(zk.create(t, "/p/abc-w1", b"", Mode::Ephemeral), Err(ZkErr::NodeExists));
    zk.expire(s);
    assert!(zk.exists("/p/abc-w1").is_none());
}

#[test]
fn failed_multi_changes_nothing() {
    let mut zk = Zk::new();
    let (s, w) = (zk.open_session(), zk.open_session());
    zk.mkdir(s, "/p").unwrap();
    zk.create(s, "/p/old", b"", Mode::Persistent).unwrap();
    let (_, watch) = zk.children(w, "/p", true).unwrap();
    let (_, _, old_watch) = zk.get_data(w, "/p/old", true).unwrap();
    let before = zk.clone();

    let ops = [
        create("/p/new", Mode::Persistent),
        create("/p/seq-", Mode::EphemeralSequential),
        delete("/p/old"),
        delete("/p/missing"),
        create("/p/never", Mode::Persistent),
    ];
    assert_eq!(zk.multi_write(s, &ops), Err((3, ZkErr::NoNode)));
    // Nodes, counters, zxid, ephemerals and armed watches are all as before, and nothing fired.
    assert_eq!(zk, before);
    assert!(zk.take_fired().is_empty());

    let ops = [delete("/p/old"), create("/p/x", Mode::Persistent), create("/p/x", Mode::Persistent)];
    assert_eq!(zk.multi_write(s, &ops), Err((2, ZkErr::NodeExists)));
    assert_eq!(zk, before);

    assert_eq!(zk.multi_write(w, &[create("/p/y", Mode::Persistent), delete("/p")]), Err((1, ZkErr::NotEmpty)));
    assert_eq!(zk, before);

    // The same ops minus the failing one commit, and the watches armed before are still there to fire.
    let ops = [create("/p/new", Mode::Persistent), create("/p/seq-", Mode::EphemeralSequential), delete("/p/old")];
    let results = zk.multi_write(s, &ops).unwrap();
    let WriteResult::Created { path, .. } = &results[1] else { panic!("{results:?}") };
    assert_eq!(path, "/p/seq-0000000002", "the rolled-back creates did not use up sequence numbers");
    assert_eq!(results[2], WriteResult::Deleted);
    assert_eq!(zk.zxid(), before.zxid() + 1);
    assert_eq!(
        fired(&mut zk),
        [
            (w, watch.unwrap(), "/p".to_owned(), WatchEvent::NodeChildrenChanged),
            (w, old_watch.unwrap(), "/p/old".to_owned(), WatchEvent::NodeDeleted),
        ]
    );
}

#[test]
fn multi_shares_one_zxid() {
    let mut zk = Zk::new();
    let s = zk.open_session();
    zk.mkdir(s, "/p").unwrap();
    let zxid = zk.zxid();
    let ops = [
        create("/p/a", Mode::Persistent),
        create("/p/a/b", Mode::Persistent),
        create("/p/a/s-", Mode::EphemeralSequential),
        create("/p/a/s-", Mode::EphemeralSequential),
    ];
    let results = zk.multi_write(s, &ops).unwrap();
    assert_eq!(zk.zxid(), zxid + 1, "the whole multi is one transaction");
    let created: Vec<(String, Stat)> = results
        .into_iter()
        .map(|r| match r {
            WriteResult::Created { path, stat } => (path, stat),
            other => panic!("only creates here: {other:?}"),
        })
        .collect();
    assert!(created.iter().all(|(_, stat)| stat.czxid == zxid + 1 && stat.mzxid == zxid + 1));
    assert!(created[1..].iter().all(|(path, stat)| zk.exists(path) == Some(*stat)));
    // Later ops see earlier ones: consecutive suffixes, and "/p/a" had no children when its stat was taken.
    assert_eq!(created[2].0, "/p/a/s-0000000001");
    assert_eq!(created[3].0, "/p/a/s-0000000002");
    assert_eq!(created[0].1.num_children, 0);
    assert_eq!(zk.exists("/p/a").unwrap().czxid, zxid + 1);
    assert_eq!(zk.exists("/p/a").unwrap().num_children, 3);
    // Delete and re-create in one multi: the same zxid again, one step on.
    zk.multi_write(s, &[delete("/p/a/b"), create("/p/a/b", Mode::Persistent)]).unwrap();
    assert_eq!(zk.exists("/p/a/b").unwrap().czxid, zxid + 2);
    assert_eq!(zk.multi_write(s, &[]), Ok(Vec::new()));
    assert_eq!(zk.zxid(), zxid + 2, "an empty multi is not sent");
}

#[test]
fn multi_read_each_op_on_its_own() {
    let mut zk = Zk::new();
    let s = zk.open_session();
    zk.mkdir(s, "/p/c").unwrap();
    let ops = [
        ReadOp::Children { path: "/p".to_owned() },
        ReadOp::Data { path: "/missing".to_owned() },
        ReadOp::Data { path: "/p/c".to_owned() },
        ReadOp::Children { path: "/missing".to_owned() },
    ];
    let stat = zk.exists("/p/c").unwrap();
    assert_eq!(
        zk.multi_read(s, &ops),
        Ok(vec![
            ReadResult::Children(vec!["c".to_owned()]),
            ReadResult::Error(ZkErr::NoNode),
            ReadResult::Data(Vec::new(), stat),
            ReadResult::Error(ZkErr::NoNode),
        ])
    );
    zk.expire(s);
    assert_eq!(zk.multi_read(s, &ops), Err(ZkErr::SessionExpired));
}

#[test]
fn expiry_deletes_ephemerals_and_fires_watches() {
    let mut zk = Zk::new();
    let (a, b, c) = (zk.open_session(), zk.open_session(), zk.open_session());
    zk.mkdir(a, "/party").unwrap();
    zk.mkdir(a, "/locks").unwrap();
    let member = zk.create(a, "/party/m-", b"a", Mode::EphemeralSequential).unwrap().0;
    let lock = zk.create(a, "/locks/l-", b"a", Mode::EphemeralSequential).unwrap().0;
    let other = zk.create(b, "/party/m-", b"b", Mode::EphemeralSequential).unwrap().0;
    let (_, own) = zk.children(a, "/party", true).unwrap();
    let (_, party) = zk.children(b, "/party", true).unwrap();
    let (_, _, on_lock) = zk.get_data(b, &lock, true).unwrap();
    let (_, on_lock_children) = zk.children(c, &lock, true).unwrap();
    let (_, locks) = zk.children(c, "/locks", true).unwrap();
    let zxid = zk.zxid();

    zk.expire(a);
    assert!(!zk.is_alive(a));
    assert_eq!((zk.exists(&member), zk.exists(&lock)), (None, None));
    assert!(zk.exists(&other).is_some(), "only the expired session's nodes go");
    assert_eq!(zk.zxid(), zxid + 1, "closeSession is one transaction");
    // In deletion order (sorted paths); the expired session's own watch is dropped, not fired.
    assert_eq!(
        fired(&mut zk),
        [
            (b, on_lock.unwrap(), lock.clone(), WatchEvent::NodeDeleted),
            (c, on_lock_children.unwrap(), lock, WatchEvent::NodeDeleted),
            (c, locks.unwrap(), "/locks".to_owned(), WatchEvent::NodeChildrenChanged),
            (b, party.unwrap(), "/party".to_owned(), WatchEvent::NodeChildrenChanged),
        ]
    );
    assert!(own.is_some());

    // A dead session can do nothing, and ending it again changes nothing.
    assert_eq!(zk.create(a, "/x", b"", Mode::Persistent), Err(ZkErr::SessionExpired));
    assert_eq!(zk.mkdir(a, "/x"), Err(ZkErr::SessionExpired));
    assert_eq!(zk.delete(a, &other), Err(ZkErr::SessionExpired));
    assert_eq!(zk.children(a, "/", true), Err(ZkErr::SessionExpired));
    assert_eq!(zk.get_data(a, "/", true), Err(ZkErr::SessionExpired));
    assert_eq!(zk.multi_write(a, &[delete(&other)]), Err((0, ZkErr::SessionExpired)));
    assert_eq!(zk.ephemerals(a, "/"), Vec::<String>::new());
    let before = zk.clone();
    zk.expire(a);
    zk.expire(99);
    assert_eq!(zk, before);

    // A new child of /party does not reach the dropped watch of the dead session.
    zk.create(c, "/party/m-", b"c", Mode::EphemeralSequential).unwrap();
    assert!(zk.take_fired().is_empty());
}

#[test]
fn watches_are_one_shot() {
    let mut zk = Zk::new();
    let (s, w) = (zk.open_session(), zk.open_session());
    zk.mkdir(s, "/p").unwrap();
    let (_, first) = zk.children(w, "/p", true).unwrap();
    let (_, second) = zk.children(w, "/p", true).unwrap();
    let (_, third) = zk.children(s, "/p", true).unwrap();
    assert_ne!(first, second, "each registration gets its own id");
    zk.create(s, "/p/a", b"", Mode::Persistent).unwrap();
    let event = WatchEvent::NodeChildrenChanged;
    assert_eq!(
        fired(&mut zk),
        [
            (w, first.unwrap(), "/p".to_owned(), event),
            (w, second.unwrap(), "/p".to_owned(), event),
            (s, third.unwrap(), "/p".to_owned(), event),
        ]
    );
    zk.create(s, "/p/b", b"", Mode::Persistent).unwrap();
    assert!(zk.take_fired().is_empty(), "fired watches are disarmed");

    // A watch request on a missing node fails and arms nothing.
    assert_eq!(zk.children(w, "/p/c", true), Err(ZkErr::NoNode));
    assert_eq!(zk.get_data(w, "/p/c", true), Err(ZkErr::NoNode));
    let (_, none) = zk.children(w, "/p", false).unwrap();
    assert_eq!(none, None);
    zk.create(s, "/p/c", b"", Mode::Persistent).unwrap();
    assert!(zk.take_fired().is_empty());

    // Deleting a node: its data and child watches see NodeDeleted, its parent's child watch a child change.
    let (_, _, data) = zk.get_data(w, "/p/c", true).unwrap();
    let (_, children) = zk.children(w, "/p/c", true).unwrap();
    let (_, parent) = zk.children(w, "/p", true).unwrap();
    zk.delete(s, "/p/c").unwrap();
    assert_eq!(
        fired(&mut zk),
        [
            (w, data.unwrap(), "/p/c".to_owned(), WatchEvent::NodeDeleted),
            (w, children.unwrap(), "/p/c".to_owned(), WatchEvent::NodeDeleted),
            (w, parent.unwrap(), "/p".to_owned(), WatchEvent::NodeChildrenChanged),
        ]
    );
    zk.create(s, "/p/c", b"", Mode::Persistent).unwrap();
    zk.delete(s, "/p/c").unwrap();
    assert!(zk.take_fired().is_empty());
}

#[test]
fn data_versions_guard_set_data_delete_and_check() {
    let mut zk = Zk::new();
    let (s, w) = (zk.open_session(), zk.open_session());
    zk.create(s, "/h", b"v0", Mode::Persistent).unwrap();
    let stat = zk.set_data(s, "/h", b"v1", Some(0)).unwrap();
    assert_eq!(stat.version, 1);
    assert_eq!(zk.data_of("/h").as_deref(), Some(&b"v1"[..]));
    assert_eq!(zk.set_data(s, "/h", b"x", Some(0)), Err(ZkErr::BadVersion), "a stale version is refused");
    assert_eq!(zk.set_data(s, "/missing", b"x", None), Err(ZkErr::NoNode));
    assert_eq!(zk.data_of("/h").as_deref(), Some(&b"v1"[..]), "a refused write changes nothing");

    // A check fails the whole multi, at its index, and leaves everything as it was.
    let before = zk.clone();
    let ops = [WriteOp::Check { path: "/h".into(), version: Some(0) }, create("/new", Mode::Persistent)];
    assert_eq!(zk.multi_write(s, &ops), Err((0, ZkErr::BadVersion)));
    assert_eq!(zk, before);
    let ops = [
        WriteOp::Check { path: "/h".into(), version: Some(1) },
        WriteOp::SetData { path: "/h".into(), data: b"v2".to_vec(), version: Some(1) },
        create("/new", Mode::Persistent),
    ];
    let results = zk.multi_write(s, &ops).unwrap();
    assert!(matches!(results[..], [WriteResult::Checked, WriteResult::Set(_), WriteResult::Created { .. }]));

    // A data watch sees the change (one-shot); a versioned delete needs the current version.
    let (_, _, watch) = zk.get_data(w, "/h", true).unwrap();
    zk.set_data(s, "/h", b"v3", None).unwrap();
    assert_eq!(fired(&mut zk), [(w, watch.unwrap(), "/h".to_owned(), WatchEvent::NodeDataChanged)]);
    assert_eq!(zk.delete_versioned(s, "/h", Some(2)), Err(ZkErr::BadVersion));
    assert_eq!(zk.delete_versioned(s, "/h", Some(3)), Ok(()));
}

#[test]
fn exists_watches_see_creation_and_deletion() {
    let mut zk = Zk::new();
    let (s, w) = (zk.open_session(), zk.open_session());
    // On a missing node: armed, and fires at its creation.
    let (stat, watch) = zk.exists_watch(w, "/lease", true).unwrap();
    assert_eq!(stat, None);
    zk.create(s, "/lease", b"", Mode::Ephemeral).unwrap();
    assert_eq!(fired(&mut zk), [(w, watch.unwrap(), "/lease".to_owned(), WatchEvent::NodeCreated)]);
    // On an existing one: fires at its deletion, here by its session's end (a writer's lease going).
    let (stat, watch) = zk.exists_watch(w, "/lease", true).unwrap();
    assert_eq!(stat.map(|s| s.ephemeral_owner), Some(s));
    zk.expire(s);
    assert_eq!(fired(&mut zk), [(w, watch.unwrap(), "/lease".to_owned(), WatchEvent::NodeDeleted)]);
    assert_eq!(zk.exists_watch(w, "/lease", false).unwrap(), (None, None));
}

#[test]
fn ephemerals_by_string_prefix() {
    let mut zk = Zk::new();
    let (s, t) = (zk.open_session(), zk.open_session());
    zk.mkdir(s, "/a").unwrap();
    zk.mkdir(s, "/ab").unwrap();
    let ax = zk.create(s, "/a/x-", b"", Mode::EphemeralSequential).unwrap().0;
    let axy = zk.create(s, "/a/xy-", b"", Mode::EphemeralSequential).unwrap().0;
    let ab = zk.create(s, "/ab/z-", b"", Mode::EphemeralSequential).unwrap().0;
    zk.create(t, "/a/x-", b"", Mode::EphemeralSequential).unwrap();
    zk.create(s, "/a/persistent", b"", Mode::Persistent).unwrap();

    assert_eq!(zk.ephemerals(s, "/"), [ax.clone(), axy.clone(), ab.clone()]);
    assert_eq!(zk.ephemerals(s, ""), [ax.clone(), axy.clone(), ab.clone()]);
    // A string prefix, not a subtree: "/a" also matches "/ab/...", "/a/x" also "/a/xy-...".
    assert_eq!(zk.ephemerals(s, "/a"), [ax.clone(), axy.clone(), ab.clone()]);
    assert_eq!(zk.ephemerals(s, "/a/"), [ax.clone(), axy.clone()]);
    assert_eq!(zk.ephemerals(s, "/a/x"), [ax.clone(), axy.clone()]);
    assert_eq!(zk.ephemerals(s, &axy), [axy.as_str()]);
    assert_eq!(zk.ephemerals(s, "/b"), Vec::<String>::new());
    assert_eq!(zk.ephemerals(t, "/a/"), ["/a/x-0000000002"]);

    // Whoever deletes an ephemeral, it leaves its owner's list.
    zk.delete(t, &ax).unwrap();
    assert_eq!(zk.ephemerals(s, "/a/"), [axy]);
}
