//! A TCP proxy that counts the requests a client sends: it parses ZooKeeper's framing (a 4-byte length, then for
//! every frame but the connection handshake a header `xid: i32, type: i32`) on the client-to-server side and records
//! each request's op code, pings excepted. Used to measure how many requests an operation costs.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// ZooKeeper op codes (`ZooDefs.OpCode`) that the tests name.
pub mod op {
    pub const CREATE: i32 = 1;
    pub const EXISTS: i32 = 3;
    pub const GET_DATA: i32 = 4;
    pub const SET_DATA: i32 = 5;
    pub const GET_CHILDREN: i32 = 8;
    pub const SYNC: i32 = 9;
    pub const MULTI: i32 = 14;
    pub const MULTI_READ: i32 = 22;
}

/// The xid of a ping.
const PING_XID: i32 = -2;

/// A counting proxy on `127.0.0.1:<random port>` to one upstream server. Its tasks are aborted on drop.
pub struct CountingProxy {
    addr: SocketAddr,
    ops: Arc<Mutex<Vec<i32>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl CountingProxy {
    pub async fn start(upstream: SocketAddr) -> CountingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding the counting proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let ops = Arc::new(Mutex::new(Vec::new()));
        let sink = ops.clone();
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let sink = sink.clone();
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(upstream).await else { return };
                    // Relay at once: Nagle's algorithm on the extra hop would add delays of its own.
                    let _ = (inbound.set_nodelay(true), outbound.set_nodelay(true));
                    let (mut client_read, mut client_write) = inbound.into_split();
                    let (mut server_read, mut server_write) = outbound.into_split();
                    let upward = async {
                        let mut parser = Parser::default();
                        let mut buffer = vec![0u8; 64 * 1024];
                        loop {
                            let read = match client_read.read(&mut buffer).await {
                                Ok(0) | Err(_) => break,
                                Ok(read) => read,
                            };
                            let requests = parser.feed(&buffer[..read]);
                            sink.lock().unwrap().extend(requests);
                            if server_write.write_all(&buffer[..read]).await.is_err() {
                                break;
                            }
                        }
                        let _ = server_write.shutdown().await;
                    };
                    let downward = async {
                        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                        let _ = client_write.shutdown().await;
                    };
                    tokio::join!(upward, downward);
                });
            }
        });
        CountingProxy { addr, ops, accept }
    }

    /// `127.0.0.1:PORT`: connect clients here (append a chroot as usual).
    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    /// The op codes of the requests sent since the start or the last [`take`](Self::take), in order.
    pub fn take(&self) -> Vec<i32> {
        std::mem::take(&mut *self.ops.lock().unwrap())
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Splits one connection's client-to-server bytes into frames.
#[derive(Default)]
struct Parser {
    buffer: Vec<u8>,
    /// The first frame is the connection handshake, which has no request header.
    handshake_seen: bool,
}

impl Parser {
    /// The op codes of the requests completed by `bytes`.
    fn feed(&mut self, bytes: &[u8]) -> Vec<i32> {
        self.buffer.extend_from_slice(bytes);
        let mut ops = Vec::new();
        while let Some(length) = self.buffer.get(..4).map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]])) {
            let length = usize::try_from(length).unwrap_or(0);
            if self.buffer.len() < 4 + length {
                break;
            }
            let frame: Vec<u8> = self.buffer.drain(..4 + length).skip(4).collect();
            if !self.handshake_seen {
                self.handshake_seen = true;
                continue;
            }
            if frame.len() >= 8 {
                let xid = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
                let op = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
                if xid != PING_XID {
                    ops.push(op);
                }
            }
        }
        ops
    }
}
