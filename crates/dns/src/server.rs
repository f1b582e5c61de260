//! The DNS server: the cluster zone answered from a [`RecordIndex`] over UDP and TCP
//! (RFC 1035 §4.2; TCP messages carry a two-byte length prefix), every other name relayed to
//! the node's upstream resolvers as CoreDNS's `forward . /etc/resolv.conf` does.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use parking_lot::RwLock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use crate::records::{Answer, RecordIndex};

/// How long a forwarded query waits for an upstream resolver before trying the next one.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a TCP client may stay idle between queries (RFC 7766 suggests seconds).
const TCP_IDLE: Duration = Duration::from_secs(10);

/// The largest UDP answer for a client without EDNS (RFC 1035 §4.2.1).
const UDP_PLAIN_MAX: usize = 512;

/// What to do with one received packet.
#[derive(Debug, PartialEq)]
pub enum Reply {
    /// Send these bytes back.
    Answer(Vec<u8>),
    /// The name is not ours: relay the query to an upstream resolver unchanged.
    Forward,
    /// Not a well-formed query: send nothing, as CoreDNS drops what it cannot parse.
    Drop,
}

/// The packet entry point: parses `packet` and answers it from `index`. Never panics, whatever
/// the bytes; `max_len` is the largest answer the transport carries (answers that do not fit are
/// sent truncated, with TC set, so the client retries over TCP); an EDNS client's announced
/// payload size raises it.
pub fn handle_packet(index: &RecordIndex, packet: &[u8], max_len: usize) -> Reply {
    let Ok(request) = Message::from_vec(packet) else {
        return Reply::Drop;
    };
    if request.message_type() != MessageType::Query {
        return Reply::Drop;
    }
    let mut response = Message::new();
    response
        .set_id(request.id())
        .set_message_type(MessageType::Response)
        .set_op_code(request.op_code())
        .set_recursion_desired(request.recursion_desired())
        .set_recursion_available(true);
    if request.op_code() != OpCode::Query {
        response.set_response_code(ResponseCode::NotImp);
        return encode(response, max_len);
    }
    let [query] = request.queries() else {
        response.set_response_code(ResponseCode::FormErr);
        return encode(response, max_len);
    };
    response.add_query(query.clone());
    if let Some(edns) = request.extensions() {
        let mut ours = hickory_proto::op::Edns::new();
        ours.set_max_payload(edns.max_payload().max(UDP_PLAIN_MAX as u16));
        response.set_edns(ours);
    }
    match index.lookup(query.name(), query.query_type()) {
        Answer::NotAuthoritative => return Reply::Forward,
        Answer::Records(records) => {
            response.set_authoritative(true).add_answers(records);
        }
        Answer::NoData => {
            response.set_authoritative(true).add_name_server(index.soa());
        }
        Answer::NxDomain => {
            response.set_authoritative(true).set_response_code(ResponseCode::NXDomain).add_name_server(index.soa());
        }
    }
    // An EDNS client announces how large a UDP answer it takes (RFC 6891 §6.2.3).
    let limit = request.extensions().as_ref().map_or(max_len, |e| max_len.max(usize::from(e.max_payload())));
    encode(response, limit)
}

fn encode(mut response: Message, max_len: usize) -> Reply {
    match response.to_vec() {
        Ok(bytes) if bytes.len() <= max_len => Reply::Answer(bytes),
        Ok(_) => {
            response.take_answers();
            response.set_truncated(true);
            response.to_vec().map_or(Reply::Drop, Reply::Answer)
        }
        Err(_) => Reply::Drop,
    }
}

/// The `nameserver` addresses of a resolv.conf (port 53), at most three as the resolver reads
/// (`MAXNS`); an unreadable file gives none, and forwarded names then go unanswered.
pub fn read_upstreams(path: &Path) -> Vec<SocketAddr> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("nameserver")).then(|| words.next()).flatten()
        })
        .filter_map(|addr| addr.split('%').next()?.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .take(3)
        .collect()
}

/// Relays a query to the upstream resolvers in order, returning the first answer.
async fn forward(upstreams: &[SocketAddr], query: &[u8]) -> Option<Vec<u8>> {
    for upstream in upstreams {
        let bind: SocketAddr = if upstream.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().ok()?;
        let Ok(socket) = UdpSocket::bind(bind).await else { continue };
        if socket.send_to(query, upstream).await.is_err() {
            continue;
        }
        let mut buf = vec![0u8; 65535];
        // Answers are matched on the query id; a stray datagram with another id is ignored.
        let deadline = tokio::time::Instant::now() + UPSTREAM_TIMEOUT;
        while let Ok(Ok((n, from))) = tokio::time::timeout_at(deadline, socket.recv_from(&mut buf)).await {
            if from == *upstream && n >= 2 && buf[..2] == query[..2] {
                return Some(buf[..n].to_vec());
            }
        }
    }
    None
}

/// A running DNS server.
pub struct DnsServer {
    udp: Arc<UdpSocket>,
    tcp: TcpListener,
    index: Arc<RwLock<RecordIndex>>,
    upstreams: Arc<Vec<SocketAddr>>,
}

impl DnsServer {
    /// Binds UDP and TCP on `addr` (port 0 picks a free port, the same for both).
    ///
    /// # Errors
    /// When either socket cannot be bound.
    pub async fn bind(
        addr: SocketAddr,
        index: Arc<RwLock<RecordIndex>>,
        upstreams: Vec<SocketAddr>,
    ) -> std::io::Result<Self> {
        let tcp = TcpListener::bind(addr).await?;
        let udp = UdpSocket::bind(tcp.local_addr()?).await?;
        Ok(Self { udp: Arc::new(udp), tcp, index, upstreams: Arc::new(upstreams) })
    }

    /// The address both sockets listen on.
    ///
    /// # Errors
    /// When the socket has no local address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// Serves until this future is dropped (the spawned task aborted).
    pub async fn run(self) {
        tokio::join!(
            serve_udp(self.udp, self.index.clone(), self.upstreams.clone()),
            serve_tcp(self.tcp, self.index, self.upstreams)
        );
    }
}

async fn serve_udp(socket: Arc<UdpSocket>, index: Arc<RwLock<RecordIndex>>, upstreams: Arc<Vec<SocketAddr>>) {
    let mut buf = vec![0u8; 65535];
    loop {
        let Ok((n, peer)) = socket.recv_from(&mut buf).await else { continue };
        let packet = &buf[..n];
        let reply = handle_packet(&index.read(), packet, UDP_PLAIN_MAX);
        match reply {
            Reply::Answer(bytes) => {
                let _ = socket.send_to(&bytes, peer).await;
            }
            Reply::Forward => {
                let (socket, upstreams, query) = (socket.clone(), upstreams.clone(), packet.to_vec());
                tokio::spawn(async move {
                    if let Some(answer) = forward(&upstreams, &query).await {
                        let _ = socket.send_to(&answer, peer).await;
                    }
                });
            }
            Reply::Drop => {}
        }
    }
}

async fn serve_tcp(listener: TcpListener, index: Arc<RwLock<RecordIndex>>, upstreams: Arc<Vec<SocketAddr>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        tokio::spawn(serve_tcp_conn(stream, index.clone(), upstreams.clone()));
    }
}

async fn serve_tcp_conn(mut stream: TcpStream, index: Arc<RwLock<RecordIndex>>, upstreams: Arc<Vec<SocketAddr>>) {
    loop {
        let mut len = [0u8; 2];
        if !matches!(tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut len)).await, Ok(Ok(_))) {
            return;
        }
        let mut packet = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if !matches!(tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut packet)).await, Ok(Ok(_))) {
            return;
        }
        let reply = handle_packet(&index.read(), &packet, 65535);
        let answer = match reply {
            Reply::Answer(bytes) => bytes,
            Reply::Forward => match forward(&upstreams, &packet).await {
                Some(bytes) => bytes,
                None => continue,
            },
            // A malformed message leaves the stream's framing in doubt: close it.
            Reply::Drop => return,
        };
        let Ok(len) = u16::try_from(answer.len()) else { continue };
        if stream.write_all(&len.to_be_bytes()).await.is_err() || stream.write_all(&answer).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_are_the_first_three_nameservers_of_resolv_conf() {
        let dir = std::env::temp_dir().join(format!("skiff-dns-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("resolv.conf");
        std::fs::write(&path, "search lan\nnameserver 192.0.2.1\n# nameserver 9.9.9.9\nnameserver fe80::1%eth0\nnameserver 192.0.2.2\nnameserver 192.0.2.3\n").unwrap();
        let got: Vec<String> = read_upstreams(&path).iter().map(ToString::to_string).collect();
        assert_eq!(got, ["192.0.2.1:53", "[fe80::1]:53", "192.0.2.2:53"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
